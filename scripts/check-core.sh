#!/usr/bin/env bash
# sluice-core must stay pure: it builds for both wasm targets (the proxy-wasm filter runs on
# wasm32-wasip1, the dashboard on wasm32-unknown-unknown), and its normal dependency tree, for
# every target, holds no async runtime or I/O crate (tokio, mio) and no Redis client (redis).
# Idempotent: cargo only rebuilds what changed. Exits non-zero on the first failed check.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

targets=(wasm32-wasip1 wasm32-unknown-unknown)
forbidden='tokio|mio|redis'

installed=$(rustup target list --installed 2>/dev/null || true)
for target in "${targets[@]}"; do
  grep -qx "$target" <<<"$installed" || {
    echo "check-core: Rust target $target is missing; run: rustup target add $target" >&2
    exit 1
  }
done

for target in "${targets[@]}"; do
  echo "check-core: cargo build -p sluice-core --target $target"
  cargo build --quiet --locked -p sluice-core --target "$target"
  # The feature the backend and the dashboard turn on: named time zones, from a tz database
  # compiled in (no file is read, so it builds and runs on both wasm targets too).
  echo "check-core: cargo build -p sluice-core --features tz --target $target"
  cargo build --quiet --locked -p sluice-core --features tz --target "$target"
done

for target in "${targets[@]}" host; do
  if [ "$target" = host ]; then
    target_args=()
  else
    target_args=(--target "$target")
  fi
  echo "check-core: cargo tree -p sluice-core --features tz -e normal ${target_args[*]:-(host)} has no tokio, mio or redis"
  tree=$(cargo tree --locked -p sluice-core --features tz -e normal "${target_args[@]}" --prefix none --format '{p}')
  # Crate names are the first word of each line. Match whole names and their family
  # (tokio, tokio-util, mio, redis, redis-protocol...), not substrings (so "mime" is fine).
  if bad=$(awk '{print $1}' <<<"$tree" | grep -E -x "($forbidden)(-.*)?" | sort -u) && [ -n "$bad" ]; then
    echo "check-core: FAIL: sluice-core's dependency tree for ${target_args[*]:-host} holds: $(tr '\n' ' ' <<<"$bad")" >&2
    echo "$tree" >&2
    exit 1
  fi
done
# A workspace test run unifies features (the backend turns on tz), so core's tests of a build
# without tz (a zone name refused, naming calendar.zone) run only when core is tested alone.
echo "check-core: cargo test -p sluice-core (without tz: the tests a workspace run never builds)"
cargo test --quiet --locked -p sluice-core

echo "check-core: OK (sluice-core builds for ${targets[*]}, with and without tz; no tokio, mio or redis in its tree)"
