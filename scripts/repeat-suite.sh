#!/usr/bin/env bash
# Runs one suite several times in a row with busy loops beside it, and prints each run's result and
# time: how issue 38 checks that a suite holds on a busy machine ("five runs in a row with two busy
# loops running beside it"). The busy loops are plain shell loops, one per core they take, stopped
# by PID at the end whatever happens.
#
#   scripts/repeat-suite.sh reliability              # 5 runs, 2 busy loops
#   RUNS=3 BUSY=1 scripts/repeat-suite.sh envoy
#   SLUICE_TEST_ORDER=reverse RUNS=1 scripts/repeat-suite.sh reliability   # tests/e2e/order.py
#
# Builds first (scripts/build-for-tests.sh), then runs the suite with SLUICE_TESTS_BUILT=1, as
# scripts/test.sh does. Logs: artifacts/repeat/<suite>-<n>.log. Exits 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/suite-lib.sh
name=${1:?usage: scripts/repeat-suite.sh SUITE, a suite name such as reliability}
file=$(ls tests/suites/[0-9][0-9]-"$name".sh 2>/dev/null | head -n 1)
[ -n "$file" ] || { echo "sluice: no suite named '$name'; the suites are: $(suite_names | tr '\n' ' ')" >&2; exit 1; }
runs=${RUNS:-5}
busy=${BUSY:-2}

bash scripts/build-for-tests.sh >/dev/null
export SLUICE_TESTS_BUILT=1

loops=()
stop_loops() {
  [ "${#loops[@]}" -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true
}
trap stop_loops EXIT
for _ in $(seq "$busy"); do
  ( while :; do :; done ) &
  loops+=("$!")
done

mkdir -p artifacts/repeat
passed=0
for n in $(seq "$runs"); do
  t0=$SECONDS
  log="artifacts/repeat/$name-$n.log"
  if bash "$file" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "run $n of $runs: passed in $(( SECONDS - t0 )) s ($busy busy loops beside it; $log)"
  else
    echo "run $n of $runs: FAILED after $(( SECONDS - t0 )) s ($busy busy loops beside it; $log):"
    grep -E "^(FAILED|ERROR)|AssertionError" "$log" | head -n 10 | sed 's/^/    /'
  fi
done
echo "$name: $passed of $runs runs passed with $busy busy loops beside it${SLUICE_TEST_ORDER:+ (SLUICE_TEST_ORDER=$SLUICE_TEST_ORDER)}"
[ "$passed" -eq "$runs" ]
