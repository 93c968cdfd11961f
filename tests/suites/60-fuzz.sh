#!/usr/bin/env bash
# Short, bounded libFuzzer runs of every cargo-fuzz target (longer runs: docs/fuzzing.md).
# The toolchain is stable; RUSTC_BOOTSTRAP lets cargo-fuzz pass its sanitizer flags.
set -euo pipefail
cd "$(dirname "$0")/../../fuzz"
seconds="${SLUICE_FUZZ_SECONDS:-20}"
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
  corpus="corpus/$target"
  mkdir -p "$corpus"
  seeds=()
  [ -d "seeds/$target" ] && seeds=("seeds/$target")
  echo "fuzz: $target for ${seconds}s"
  log="$(mktemp)"
  if ! cargo fuzz run "$target" "$corpus" "${seeds[@]}" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target failed (a crash is saved under fuzz/artifacts/$target)" >&2
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units)" "$log" || true
  rm -f "$log"
done
