#!/usr/bin/env bash
# The wasm targets: wasm32-wasip1 (the Envoy filter) and wasm32-unknown-unknown (the dashboard).
set -euo pipefail
command -v cargo >/dev/null || { echo "sluice: cargo not found; install Rust with rustup (https://rustup.rs)" >&2; exit 1; }
installed=$(rustup target list --installed 2>/dev/null || true)
for target in wasm32-wasip1 wasm32-unknown-unknown; do
  if ! grep -qx "$target" <<<"$installed"; then
    rustup target add "$target" >/dev/null || { echo "sluice: could not add Rust target $target; run: rustup target add $target" >&2; exit 1; }
  fi
done
