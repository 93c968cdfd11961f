#!/usr/bin/env bash
# Builds the proxy-wasm filter for Envoy: target/wasm32-wasip1/wasm-release/sluice_filter.wasm
# (size-optimised, panic = abort; see the root Cargo.toml's wasm-release profile).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --locked -p sluice-filter --target wasm32-wasip1 --profile wasm-release
out=target/wasm32-wasip1/wasm-release/sluice_filter.wasm
[ -s "$out" ] || { echo "sluice: $out was not produced" >&2; exit 1; }
# Drop the exports of callbacks the filter does not implement: Envoy calls only exported ones,
# ~7.5k instructions per request saved (filter/src/exports.rs). Idempotent: a rerun with nothing
# rebuilt rewrites the same bytes.
cargo run --locked -q -p sluice-filter --example trim_exports -- "$out" "$out.trimmed"
mv "$out.trimmed" "$out"
echo "$out ($(stat -c %s "$out") bytes)"
