#!/usr/bin/env bash
# Builds both builds of the sluice filter for Envoy:
# - the proxy-wasm filter: target/wasm32-wasip1/wasm-release/sluice_filter.wasm (size-optimised,
#   panic = abort; see the root Cargo.toml's wasm-release profile), for any Envoy and Istio;
# - the dynamic module: target/release/libsluice_filter_native.so (native/, Envoy 1.40/1.41's
#   dynamic-module ABI v0.2.0), loaded by name through ENVOY_DYNAMIC_MODULES_SEARCH_PATH; and one
#   module per ABI, each in its own directory under the one file name Envoy looks up:
#   target/release/abi-v0.2.0/ (Envoy 1.40/1.41) and target/release/abi-v0.1.0/ (Envoy 1.38/1.39,
#   the feature abi-v0_1_0). docs/envoy-versions.md says which Envoy loads which.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# The wasm host crate (wasm/, sluice-filter-wasm) over the shared logic (filter/, sluice-filter).
cargo build --locked -p sluice-filter-wasm --target wasm32-wasip1 --profile wasm-release
built=target/wasm32-wasip1/wasm-release/sluice_filter_wasm.wasm
out=target/wasm32-wasip1/wasm-release/sluice_filter.wasm
[ -s "$built" ] || { echo "sluice: $built was not produced" >&2; exit 1; }
# Drop the exports of callbacks the filter does not implement: Envoy calls only exported ones,
# ~7.5k instructions per request saved (wasm/src/exports.rs). The trimmed module is the one
# Envoy loads, under the name every config and script uses. Idempotent: a rerun with nothing
# rebuilt rewrites the same bytes.
cargo run --locked -q -p sluice-filter-wasm --example trim_exports -- "$built" "$out.trimmed"
mv "$out.trimmed" "$out"
echo "$out ($(stat -c %s "$out") bytes)"
so=target/release/libsluice_filter_native.so
# native_for ABI [CARGO ARGS...]: builds the module for one ABI into target/release/abi-ABI/.
native_for() {
  local abi=$1
  shift
  cargo build --locked -q -p sluice-filter-native --release "$@"
  [ -s "$so" ] || { echo "sluice: $so was not produced" >&2; exit 1; }
  mkdir -p "target/release/abi-$abi"
  cp "$so" "target/release/abi-$abi/libsluice_filter_native.so"
  echo "target/release/abi-$abi/libsluice_filter_native.so ($(stat -c %s "$so") bytes)"
}
native_for v0.1.0 --features abi-v0_1_0
# The default (ABI v0.2.0) last, so that target/release/libsluice_filter_native.so is it.
native_for v0.2.0
echo "$so ($(stat -c %s "$so") bytes)"
