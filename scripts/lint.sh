#!/usr/bin/env bash
# Formatting and lints, as the test command runs them (before any suite): rustfmt, then clippy
# with warnings as errors over every target of the workspace natively, plus the filter's wasm host
# (wasm/, with the shared logic it builds on) for wasm32-wasip1 and the dashboard for wasm32-unknown-unknown (their proxy-wasm and Leptos code
# only exists on wasm, so a native run never sees it). The dynamic-module build (native/) is a
# workspace member: the workspace run lints it, its bindings (native/src/abi.rs) included. unwrap/expect/panic are denied in the
# filter and the backend outside tests (their Cargo.toml); clippy.toml allows them in tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# Stale words first (seconds, before any build): the gRPC listener's flag is --grpc-listen
# (backend/src/cli.rs); its old name may appear only on a line that says it is the old name.
stale=$(grep -rn --include='*.md' --include='*.yaml' --include='*.yml' --include='*.py' --include='*.mjs' --include='*.sh' \
  -e '--rls-listen' -e 'SLUICE_RLS_LISTEN' README.md docs envoy tests benches demo docker-compose.yml |
  grep -vi 'old name' || true)
if [ -n "$stale" ]; then
  echo "sluice: these name the gRPC listener by its old flag; write --grpc-listen (SLUICE_GRPC_LISTEN), or say on the line that it is the old name:" >&2
  echo "$stale" >&2
  exit 1
fi

# Every relative link of the Markdown (a file, and a heading within it) exists: docs move.
python3 scripts/check-doc-links.py . >/dev/null || { python3 scripts/check-doc-links.py . >&2; exit 1; }

cargo fmt --all --check
# The native build's `unsafe` lives in its bindings module only (native/src/abi.rs and
# native/src/abi/: the ABI's calls, its hooks, and WorkerBound with the state whose invariant it
# keeps); every other module of the crate forbids it, so no later edit can add any.
for f in native/src/*.rs; do
  case "$f" in native/src/abi.rs|native/src/lib.rs) continue ;; esac
  grep -q '^#!\[forbid(unsafe_code)\]' "$f" || { echo "lint: $f lacks #![forbid(unsafe_code)] (only native/src/abi* may use unsafe)" >&2; exit 1; }
done
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p sluice-filter-native --features fault-injection --all-targets --locked -- -D warnings
cargo clippy -p sluice-core --all-targets --all-features --locked -- -D warnings
cargo clippy -p sluice-filter-wasm --target wasm32-wasip1 --locked -- -D warnings
cargo clippy -p sluice-dashboard --target wasm32-unknown-unknown --locked -- -D warnings
# The fuzz targets (fuzz/: not a workspace member, built by cargo fuzz only in the fuzz suite near
# the end of the test command) are type-checked here, so a change to a trait they implement (the
# filter's Host) fails in the first minutes, not after every other suite.
cargo check --manifest-path fuzz/Cargo.toml --bins --locked --quiet
