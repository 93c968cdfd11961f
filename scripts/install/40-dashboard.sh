#!/usr/bin/env bash
# What the dashboard's build and browser tests need: trunk 0.21.14, the wasm-bindgen CLI of the
# exact version in Cargo.lock, binaryen's wasm-opt 132 from npm (project-local, in
# dashboard/.tools; Debian's binaryen corrupts Leptos release builds), Debian chromium, and
# playwright-core (tests/browser/node_modules; it drives the Debian chromium, it downloads none).
# Idempotent: each tool is checked first, so a second run takes about a second.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
source scripts/apt.sh
export PATH="$HOME/.cargo/bin:$PATH"

fail() { echo "sluice: $*" >&2; exit 1; }

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm || fail "could not install node and npm; install Node.js 18+ with npm"
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$node_major" -ge 20 ] || fail "the browser tests need Node.js 20 or newer (playwright-core); found $(node --version 2>/dev/null || echo none): install Node 20+ (e.g. from NodeSource)"
command -v chromium >/dev/null || apt_install chromium || fail "could not install Debian chromium; run: apt-get install chromium"

# trunk 0.22+ needs a newer rustc than this project's; a cold install takes about 8 minutes.
trunk_version=0.21.14
if [ "$(trunk --version 2>/dev/null)" != "trunk $trunk_version" ]; then
  echo "installing trunk $trunk_version (cargo install, several minutes)"
  cargo install trunk --version "$trunk_version" --locked --quiet \
    || fail "could not install trunk; run: cargo install trunk --version $trunk_version --locked"
fi

# The CLI must equal the wasm-bindgen crate in Cargo.lock. Not --locked: its own lockfile pins a
# crate version the registry no longer has.
bindgen_version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
[ -n "$bindgen_version" ] || fail "no wasm-bindgen in Cargo.lock; run: cargo generate-lockfile"
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $bindgen_version" ]; then
  echo "installing wasm-bindgen-cli $bindgen_version (cargo install, a few minutes)"
  cargo install wasm-bindgen-cli --version "$bindgen_version" --force --quiet \
    || fail "could not install wasm-bindgen-cli; run: cargo install wasm-bindgen-cli --version $bindgen_version"
fi

tools=$root/dashboard/.tools
if ! "$tools/node_modules/.bin/wasm-opt" --version 2>/dev/null | grep -q 'version_132'; then
  mkdir -p "$tools"
  [ -f "$tools/package.json" ] || echo '{"private": true}' >"$tools/package.json"
  npm install --prefix "$tools" --no-audit --no-fund --silent binaryen@132.0.0 \
    || fail "could not install npm binaryen@132.0.0 into dashboard/.tools"
fi

if [ ! -f tests/browser/node_modules/playwright-core/package.json ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --silent) \
    || fail "could not install playwright-core; run: (cd tests/browser && npm ci)"
fi
