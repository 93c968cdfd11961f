#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need on a fresh machine, checks
# formatting and lints (scripts/lint.sh), then runs every suite: cargo tests (core, backend on memory + a real redis-server + a real Redis
# Cluster, filter logic), the core build/dependency checks, then each tests/suites/*.sh in order
# (Envoy end to end, browser, demo, reliability).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/install.sh

# A full run builds about 10 GB (Rust targets for three platforms, Docker images): say how much
# room there is, so a run that dies with "No space left on device" is explained at its top.
free_gb=$(df -Pk . | awk 'NR==2 {print int($4/1048576)}')
echo "== disk: ${free_gb} GB free under $PWD (a full run needs about 10 GB)"
if [ "$free_gb" -lt 10 ]; then
  echo "warning: less than 10 GB free under $PWD; the build may fail with 'No space left on device'" >&2
fi

echo "== format and lints (rustfmt, clippy with warnings as errors, native and both wasm targets)"
bash scripts/lint.sh

echo "== sluice-core builds for both wasm targets, with no tokio/mio/redis in its tree"
bash scripts/check-core.sh

echo "== cargo test (workspace)"
cargo test --workspace --locked

for suite in tests/suites/*.sh; do
  [ -e "$suite" ] || continue
  echo "== suite $suite"
  bash "$suite"
done
echo "== all suites passed"
