#!/usr/bin/env bash
# Short, bounded libFuzzer runs of every cargo-fuzz target (longer runs: docs/fuzzing.md).
# The toolchain is stable; RUSTC_BOOTSTRAP lets cargo-fuzz pass its sanitizer flags.
# No cargo-fuzz, or a target list that cannot be read or misses a target of fuzz/fuzz_targets/,
# fails the suite: it never passes having fuzzed nothing.
# Lane: 2 (scripts/test.sh: beside the Envoy end to end tests, at a lower priority)
source "$(dirname "$0")/lib/cargo-suite.bash"
cargo fuzz --version >/dev/null 2>&1 || suite_install 50-cargo-fuzz.sh cargo-fuzz
cargo fuzz --version >/dev/null 2>&1 || suite_cannot_run cargo-fuzz "'cargo fuzz --version' fails after scripts/install/50-cargo-fuzz.sh"
cd fuzz
seconds="${SLUICE_FUZZ_SECONDS:-15}"
export RUSTC_BOOTSTRAP=1

# The list is read first (a failure inside `for ... in $(...)` would be lost, leaving no target),
# then checked against the sources: every fuzz_targets/*.rs must be a target that runs.
targets=$(cargo fuzz list) || { echo "sluice: suite $SUITE: 'cargo fuzz list' failed (above)" >&2; exit 1; }
for source in fuzz_targets/*.rs; do
  name=$(basename "$source" .rs)
  grep -qx -- "$name" <<<"$targets" || {
    echo "sluice: suite $SUITE: fuzz/$source is not a cargo-fuzz target (add a [[bin]] for it to fuzz/Cargo.toml)" >&2
    exit 1
  }
done
[ -n "$targets" ] || { echo "sluice: suite $SUITE: cargo fuzz list names no target" >&2; exit 1; }

ran=0
for target in $targets; do
  corpus="corpus/$target"
  mkdir -p "$corpus"
  seeds=()
  [ -d "seeds/$target" ] && seeds=("seeds/$target")
  echo "fuzz: $target for ${seconds}s"
  log="$(mktemp)"
  # nice: CPU-bound for its whole time, it runs beside suites whose deadlines are tens of ms.
  if ! nice -n 10 cargo fuzz run "$target" "$corpus" "${seeds[@]}" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target failed (a crash is saved under fuzz/artifacts/$target)" >&2
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units)" "$log" || true
  rm -f "$log"
  ran=$((ran + 1))
done
echo "fuzz: $ran targets fuzzed for ${seconds}s each"
