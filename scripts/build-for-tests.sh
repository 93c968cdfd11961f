#!/usr/bin/env bash
# Builds, once, everything the suites of the test command load: the filter's builds (the wasm
# module, the dynamic module per ABI, and the test-only module with its fault switch), the
# `sluice` binary (debug: the suites and the demo's test run it), and the dashboard.
#
# scripts/test.sh runs it before the suites and then sets SLUICE_TESTS_BUILT=1, so no suite
# builds again: suites run side by side there, and a build while another suite starts an Envoy
# would swap the module under it (cargo re-links target/release/libsluice_filter_native.so on
# every build, and scripts/build-filter.sh builds the ABI v0.1.0 module there first) or remove
# target/debug/sluice for a moment. A suite run alone builds what it needs itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

t0=$SECONDS
# The test-only module (native/src/fault.rs; tests/e2e/test_native_faults.py), built first so
# that build-filter.sh leaves the real one in target/release.
cargo build --locked -q -p sluice-filter-native --release --features fault-injection
mkdir -p target/release/fault-injection
cp target/release/libsluice_filter_native.so target/release/fault-injection/
bash scripts/build-filter.sh
echo "build: filter builds in $(( SECONDS - t0 )) s"

t0=$SECONDS
cargo build --locked -q -p sluice-backend --bin sluice
echo "build: sluice in $(( SECONDS - t0 )) s"

t0=$SECONDS
bash scripts/build-dashboard.sh
echo "build: dashboard in $(( SECONDS - t0 )) s"
