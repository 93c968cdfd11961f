#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need on a fresh machine, checks
# formatting and lints (scripts/lint.sh), then runs every suite: cargo tests (core, backend on memory + a real redis-server + a real Redis
# Cluster, filter logic), the core build/dependency checks, builds once what the suites load
# (scripts/build-for-tests.sh), then each tests/suites/*.sh (Envoy end to end, the Envoy matrix,
# browser, demo, reliability, fuzz, compose).
#
# The suites run in two lanes side by side, each lane's suites in file order: lane 1 by default,
# lane 2 for a suite whose file says `# Lane: 2`. Two cores: a lane of Envoy end to end tests waits
# on the clock much of its time, and the other lane's builds and fuzzing take what it leaves (they
# run at a lower priority, `nice`). What keeps them apart: nothing builds once the suites start
# (SLUICE_TESTS_BUILT=1), each lane hands its test servers ports from its own range
# (SLUICE_TEST_PORTS, tests/e2e/stack.py) and keeps pytest's temporary files in its own root; only
# compose takes fixed ports (demo/demo.env's), outside both ranges. SLUICE_TEST_LANES=1 runs every
# suite one after another instead. Each suite's output goes to artifacts/suite-logs/NAME.log and is
# printed whole when the suite ends.
#
# Every suite runs or the command fails: a suite that cannot run here (Docker, cargo-fuzz... missing)
# fails it, naming the suite and what is missing. A suite is left out only when asked for by name,
# SLUICE_SKIP_SUITES=compose,fuzz (scripts/suite-lib.sh); the summary at the end lists every step
# and suite as passed, skipped by request, FAILED or not run, with its time.
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
later=("lint" "core checks" "cargo test" "build")
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

echo "== build what the suites load, once (scripts/build-for-tests.sh)"
later=("${later[@]:1}")
step "build" bash scripts/build-for-tests.sh || fail_out "${later[@]}"
export SLUICE_TESTS_BUILT=1

# suite_lane FILE: the lane its `# Lane: N` line names (1 without one, or with SLUICE_TEST_LANES=1).
suite_lane() {
  local lane
  lane=$(sed -n 's/^# Lane: \([12]\).*/\1/p' "$1" | head -n 1)
  if [ "${SLUICE_TEST_LANES:-2}" = 1 ] || [ -z "$lane" ]; then echo 1; else echo "$lane"; fi
}

logs=artifacts/suite-logs
results=$(mktemp -d)
mkdir -p "$logs"
rm -f "$logs"/*.log
trap 'rm -f "$reason_file"; rm -rf "$results"' EXIT

# run_suite FILE LANE: runs one suite with its output in its log, then prints the log whole (one
# suite at a time: flock) and writes its summary line to $results/NAME.
run_suite() {
  local suite=$1 lane=$2 name t0=$SECONDS rc=0 reason line
  name=$(suite_name "$suite")
  reason=$(mktemp)
  echo "== suite $suite: started in lane $lane ($(date +%H:%M:%S))"
  SLUICE_SUITE_REASON="$reason" bash "$suite" >"$logs/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    line="suite $name: passed ($(( SECONDS - t0 )) s, lane $lane)"
  else
    line="suite $name: FAILED (exit $rc, after $(( SECONDS - t0 )) s, lane $lane)$(head -n 1 "$reason" | sed 's/^./: &/')"
  fi
  rm -f "$reason"
  echo "$line" >"$results/$name"
  (
    flock 9
    echo "== suite $suite (lane $lane), its output ($logs/$name.log):"
    cat "$logs/$name.log"
    echo "== $line"
  ) 9>"$results/.print-lock"
  return "$rc"
}

# run_lane LANE FILE...: the lane's suites in order; a failed suite does not stop the lane (the
# others' results are worth having), the lane's status does.
run_lane() {
  local lane=$1 status=0 suite lo hi
  shift
  lo=$(( 20000 + (lane - 1) * 6000 )); hi=$(( lo + 5999 ))
  export SLUICE_TEST_PORTS="$lo-$hi"
  export PYTEST_DEBUG_TEMPROOT="$results/tmp-lane-$lane"
  mkdir -p "$PYTEST_DEBUG_TEMPROOT"
  for suite in "$@"; do
    run_suite "$suite" "$lane" || status=1
  done
  return "$status"
}

lane1=()
lane2=()
for suite in "${suites[@]}"; do
  name=$(suite_name "$suite")
  if grep -qx -- "$name" <<<"$skips"; then
    echo "== suite $suite: SKIPPED by request (SLUICE_SKIP_SUITES)"
    echo "suite $name: SKIPPED by request (SLUICE_SKIP_SUITES), not tested" >"$results/$name"
    continue
  fi
  if [ "$(suite_lane "$suite")" = 2 ]; then lane2+=("$suite"); else lane1+=("$suite"); fi
done
echo "== suites: lane 1: $(for f in "${lane1[@]}"; do suite_name "$f"; done | tr '\n' ' ')| lane 2: $(for f in "${lane2[@]}"; do suite_name "$f"; done | tr '\n' ' ')"
suites_t0=$SECONDS
lanes_failed=0
run_lane 1 "${lane1[@]}" &
lane1_pid=$!
lane2_pid=""
if [ "${#lane2[@]}" -gt 0 ]; then
  run_lane 2 "${lane2[@]}" &
  lane2_pid=$!
fi
wait "$lane1_pid" || lanes_failed=1
[ -z "$lane2_pid" ] || wait "$lane2_pid" || lanes_failed=1
for suite in "${suites[@]}"; do
  name=$(suite_name "$suite")
  if [ -f "$results/$name" ]; then
    summary+=("$(cat "$results/$name")")
  else
    summary+=("suite $name: not run (its lane ended early)")
    lanes_failed=1
  fi
done
summary+=("suites, both lanes: $(( SECONDS - suites_t0 )) s")
print_summary
if [ "$lanes_failed" -ne 0 ]; then
  echo "== FAILED" >&2
  exit 1
fi
if [ -n "$skips" ]; then
  echo "== all suites passed, except those skipped by request: $(echo $skips | tr ' ' ',')"
else
  echo "== all suites passed"
fi
