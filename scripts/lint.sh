#!/usr/bin/env bash
# Formatting and lints, as the test command runs them (before any suite): rustfmt, then clippy
# with warnings as errors over every target of the workspace natively, plus the filter's wasm host
# (wasm/, with the shared logic it builds on) for wasm32-wasip1 and the dashboard for wasm32-unknown-unknown (their proxy-wasm and Leptos code
# only exists on wasm, so a native run never sees it). The dynamic-module build (native/) is a
# workspace member: the workspace run lints it, its bindings (native/src/abi/, native/src/hooks.rs)
# included. unwrap/expect/panic are denied in the filter and the backend outside tests (their
# Cargo.toml); clippy.toml allows them in tests.
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
# Every sluice flag, sluice_* metric and repository path the docs name exists in the code (file:line per fault).
python3 scripts/check-docs-facts.py . >&2 || exit 1

# The backend has no import circle wider than a file (docs/architecture.md, its floors).
python3 scripts/import-circles.py backend/src --none >/dev/null || { python3 scripts/import-circles.py backend/src -v >&2; exit 1; }

cargo fmt --all --check
# The native build's `unsafe` lives in its bindings only: native/src/abi/ (ffi.rs: the ABI's
# declarations and buffer readers; handle.rs: the handles over its callbacks; worker.rs:
# WorkerBound and the state whose invariant it keeps) and native/src/hooks.rs with
# native/src/hooks/config.rs (the exported hooks). abi.rs (their module root) and lib.rs allow
# it for those modules by name; every other file of the crate forbids it, so no later edit can
# add any.
while IFS= read -r f; do
  case "$f" in
    native/src/lib.rs|native/src/abi.rs|native/src/hooks.rs|native/src/hooks/config.rs|native/src/abi/ffi.rs|native/src/abi/handle.rs|native/src/abi/worker.rs) continue ;;
  esac
  grep -q '^#!\[forbid(unsafe_code)\]' "$f" || { echo "lint: $f lacks #![forbid(unsafe_code)] (only native/src/abi/ and native/src/hooks* may use unsafe)" >&2; exit 1; }
done < <(find native/src -name '*.rs' | sort)
# ... and only those name `allow(unsafe_code)`.
allowed=$(grep -rln 'allow(unsafe_code)' native/src | grep -vx -e native/src/lib.rs -e native/src/abi.rs || true)
if [ -n "$allowed" ]; then
  echo "lint: only native/src/lib.rs and native/src/abi.rs may allow unsafe_code (for the bindings' modules): $allowed" >&2
  exit 1
fi
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p sluice-filter-native --features fault-injection --all-targets --locked -- -D warnings
# The build for Envoy 1.38/1.39 (dynamic-module ABI v0.1.0): its own bindings, linted too.
cargo clippy -p sluice-filter-native --features abi-v0_1_0 --all-targets --locked -- -D warnings
cargo clippy -p sluice-core --all-targets --all-features --locked -- -D warnings
cargo clippy -p sluice-filter-wasm --target wasm32-wasip1 --locked -- -D warnings
cargo clippy -p sluice-dashboard --target wasm32-unknown-unknown --locked -- -D warnings
# The fuzz targets (fuzz/: not a workspace member, built by cargo fuzz only in the fuzz suite near
# the end of the test command) are type-checked here, so a change to a trait they implement (the
# filter's Host) fails in the first minutes, not after every other suite.
cargo check --manifest-path fuzz/Cargo.toml --bins --locked --quiet
