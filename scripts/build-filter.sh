#!/usr/bin/env bash
# Builds the proxy-wasm filter for Envoy: target/wasm32-wasip1/wasm-release/sluice_filter.wasm
# (size-optimised, panic = abort; see the root Cargo.toml's wasm-release profile).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --locked -p sluice-filter --target wasm32-wasip1 --profile wasm-release
out=target/wasm32-wasip1/wasm-release/sluice_filter.wasm
[ -s "$out" ] || { echo "sluice: $out was not produced" >&2; exit 1; }
echo "$out ($(stat -c %s "$out") bytes)"
