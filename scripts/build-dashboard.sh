#!/usr/bin/env bash
# Builds the dashboard for the browser: trunk (release, offline) compiles sluice-dashboard to
# wasm32, runs the wasm-bindgen CLI and binaryen's wasm-opt, and writes dashboard/dist, which the
# backend serves at / (sluice --dashboard-dir dashboard/dist). Skips the build when dist is newer
# than every input. Prints the wasm size, raw and gzipped.
#   scripts/build-dashboard.sh          build if out of date
#   scripts/build-dashboard.sh --force  always build
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# npm binaryen's wasm-opt first: Debian's (108) silently corrupts Leptos release wasm.
export PATH="$root/dashboard/.tools/node_modules/.bin:$HOME/.cargo/bin:$PATH"

for tool in trunk wasm-bindgen wasm-opt; do
  command -v "$tool" >/dev/null || {
    echo "sluice: $tool not found; run scripts/install.sh (scripts/install/40-dashboard.sh installs it)" >&2
    exit 1
  }
done

dist=dashboard/dist
stamp=$dist/.built
if [ "${1:-}" != "--force" ] && [ -f "$stamp" ] && [ -f "$dist/index.html" ] \
  && [ -z "$(find dashboard/src dashboard/index.html dashboard/style.css dashboard/Trunk.toml \
              dashboard/Cargo.toml core/src core/Cargo.toml Cargo.lock Cargo.toml \
              -newer "$stamp" -print -quit)" ]; then
  echo "dashboard: $dist is up to date"
else
  echo "dashboard: building with trunk (release, wasm-opt)"
  # trunk --offline also makes cargo offline: fetch the wasm-only crates (leptos...) first, which
  # `cargo test` on the host never downloads. Instant when they are already here.
  cargo fetch --locked --target wasm32-unknown-unknown
  (cd dashboard && trunk build --release --offline --locked)
  touch "$stamp"
fi

wasm=$(ls "$dist"/*.wasm 2>/dev/null | head -n 1)
[ -n "$wasm" ] || { echo "sluice: no .wasm in $dist after the build" >&2; exit 1; }
raw=$(wc -c <"$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
echo "dashboard: $(basename "$wasm") is $raw bytes raw, $gz bytes gzipped (gzip -9)"
