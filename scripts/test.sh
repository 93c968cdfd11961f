#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need on a fresh machine, checks
# formatting and lints (scripts/lint.sh), then runs every suite: cargo tests (core, backend on memory + a real redis-server + a real Redis
# Cluster, filter logic), the core build/dependency checks, then each tests/suites/*.sh in order
# (Envoy end to end, browser, demo, reliability, fuzz, compose).
#
# Every suite runs or the command fails: a suite that cannot run here (Docker, cargo-fuzz... missing)
# fails it, naming the suite and what is missing. A suite is left out only when asked for by name,
# SLUICE_SKIP_SUITES=compose,fuzz (scripts/suite-lib.sh); the summary at the end lists every step
# and suite as passed, skipped by request, FAILED or not run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
source scripts/suite-lib.sh

skips=$(suite_skips)  # fails here, before anything runs, on a name that is no suite
[ -z "$skips" ] || echo "== suites skipped by request (SLUICE_SKIP_SUITES): $(echo $skips | tr ' ' ',')"

summary=()
reason_file=$(mktemp)
trap 'rm -f "$reason_file"' EXIT
started=$(date +%s)

print_summary() {
  echo "== summary ($(( $(date +%s) - started )) s)"
  printf '   %s\n' "${summary[@]}"
}

# step LABEL COMMAND...: runs it; on failure prints the summary (with what did not run) and exits 1.
step() {
  local label=$1 t0=$SECONDS rc=0
  shift
  : >"$reason_file"
  SLUICE_SUITE_REASON="$reason_file" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    local why
    why=$(head -n 1 "$reason_file")
    summary+=("$label: FAILED (exit $rc, after $(( SECONDS - t0 )) s)${why:+: $why}")
    return 1
  fi
  summary+=("$label: passed ($(( SECONDS - t0 )) s)")
}

fail_out() {
  local pending
  for pending in "$@"; do
    if grep -qx -- "${pending#suite }" <<<"$skips"; then
      summary+=("$pending: SKIPPED by request (SLUICE_SKIP_SUITES), not tested")
    else
      summary+=("$pending: not run (an earlier step failed)")
    fi
  done
  print_summary
  echo "== FAILED" >&2
  exit 1
}

suites=()
for suite in tests/suites/*.sh; do
  [ -e "$suite" ] && suites+=("$suite")
done
[ "${#suites[@]}" -gt 0 ] || { echo "sluice: no tests/suites/*.sh found: nothing would run" >&2; exit 1; }
later=("lint" "core checks" "cargo test")
for suite in "${suites[@]}"; do later+=("suite $(suite_name "$suite")"); done

step "install" bash scripts/install.sh || fail_out "${later[@]}"

# A full run builds about 10 GB (Rust targets for three platforms, Docker images): say how much
# room there is, so a run that dies with "No space left on device" is explained at its top.
free_gb=$(df -Pk . | awk 'NR==2 {print int($4/1048576)}')
echo "== disk: ${free_gb} GB free under $PWD (a full run needs about 10 GB)"
if [ "$free_gb" -lt 10 ]; then
  echo "warning: less than 10 GB free under $PWD; the build may fail with 'No space left on device'" >&2
fi

echo "== format and lints (rustfmt, clippy with warnings as errors, native and both wasm targets)"
later=("${later[@]:1}")
step "lint" bash scripts/lint.sh || fail_out "${later[@]}"

echo "== sluice-core builds for both wasm targets, with no tokio/mio/redis in its tree"
later=("${later[@]:1}")
step "core checks" bash scripts/check-core.sh || fail_out "${later[@]}"

echo "== cargo test (workspace)"
later=("${later[@]:1}")
step "cargo test" cargo test --workspace --locked || fail_out "${later[@]}"

for suite in "${suites[@]}"; do
  name=$(suite_name "$suite")
  later=("${later[@]:1}")
  if grep -qx -- "$name" <<<"$skips"; then
    echo "== suite $suite: SKIPPED by request (SLUICE_SKIP_SUITES)"
    summary+=("suite $name: SKIPPED by request (SLUICE_SKIP_SUITES), not tested")
    continue
  fi
  echo "== suite $suite"
  step "suite $name" bash "$suite" || fail_out "${later[@]}"
done
print_summary
if [ -n "$skips" ]; then
  echo "== all suites passed, except those skipped by request: $(echo $skips | tr ' ' ',')"
else
  echo "== all suites passed"
fi
