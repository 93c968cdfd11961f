#!/usr/bin/env bash
# Envoy benchmark: requests/s and p50/p99 latency through Envoy, side by side in one run, for
#   no filter | Envoy's local_ratelimit (huge bucket) | sluice allowed, backend on the memory
#   store | sluice allowed, backend on Redis | sluice allowed, leased (a rule with lease {max 64,
#   ttl 1s}: most requests admitted from the lease in shared data, no callout), memory and Redis |
#   sluice denied (every request asks the backend),
#   memory and Redis | sluice cached denial (answered from shared data, no callout) | Envoy's
#   native ratelimit filter → sluice RLS (gRPC, --grpc-listen) allowed, memory and Redis | sluice
#   allowed through the filter's gRPC callout (ShouldRateLimit to the same RLS listener) | sluice
#   allowed through the filter's exchange stream (protocol grpc_stream: one long-lived gRPC stream
#   per Envoy worker to the same listener, one message each way per request) | stock Envoy's quota
#   filter (envoy.filters.http.rate_limit_quota) with sluice's assignments (rlqs_allowed_*:
#   envoy/rlqs.yaml's fail-closed listener and RLQS cluster, as the docs give them, added to the
#   memory and Redis Envoys by benches/envoy/rlqs_conf.py: bucket {name: user, user: <x-user-id>},
#   DENY_ALL until sluice's token bucket arrives; requests carry x-user-id; rule `user` a token
#   bucket far above any request rate, so the steady state is Envoy deciding every request from
#   its share, no callout)
# and the same sluice paths through the filter's dynamic-module build (native_*: a third Envoy from
# the same envoy/bench.yaml with its filter blocks loading libsluice_filter_native.so, on the memory
# store; its grpc_stream row rides the one exchange stream Envoy's main thread keeps, native/src/stream.rs),
# and the ratios of the allowed paths to no filter. Each row also shows where the CPU went:
# microseconds of CPU per request in Envoy, the backend, redis-server and wrk, and the total CPU
# use (200% = both cores of a 2-core machine busy), and for the sluice rows the callouts per 100
# requests (from the filter's Envoy stats sluice.callouts). The memory-store rows isolate the
# callout's cost from Redis's.
# Load: wrk (Debian package), DURATION seconds per path after a 1 s warm-up, CONNECTIONS
# connections, one wrk thread; ROUNDS rounds over all paths, each row the medians of its rounds
# (this machine's figures swing by ±30% from one run of a few seconds to the next). Backends:
# release `sluice`, one on a real redis-server, one on the memory store, each with BACKEND_THREADS tokio workers (default: one per CPU). The memory rows run
# through a second Envoy rendered from the same envoy/bench.yaml, pointed at the memory backend
# (idle while the other rows run). Everything on 127.0.0.1, stopped by PID at exit. Bounded:
# about ROUNDS × P × (DURATION + 1) seconds of load, P the paths in PATHS (22 by default). PATHS
# picks rows (names as printed). The rlqs rows fail the run unless the quota filter admitted a
# request after sluice sent a token bucket (sluice_rlqs_assignments_total) before the rounds, every
# measured request of theirs answered 200, and sluice sent no allow_all or deny_all.
#   DURATION=5 ROUNDS=3 CONNECTIONS=16 ENVOY_CONCURRENCY=1 BACKEND_THREADS=1 PIN=1 benches/envoy/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-16}
ENVOY_CONCURRENCY=${ENVOY_CONCURRENCY:-1}
BACKEND_THREADS=${BACKEND_THREADS:-$(nproc)}
PATHS=${PATHS:-no_filter local_ratelimit sluice_allowed_memory sluice_allowed_redis sluice_leased_memory sluice_leased_redis grpc_allowed_memory grpc_allowed_redis stream_allowed_memory stream_allowed_redis rls_allowed_memory rls_allowed_redis rlqs_allowed_memory rlqs_allowed_redis sluice_denied_memory sluice_denied_redis sluice_cached_denial native_allowed_memory native_leased_memory native_grpc_allowed_memory native_stream_allowed_memory native_cached_denial}
TOKEN=bench-admin-token-0123456789abcdef
# BACKEND_BIN: the backend binary (to compare builds). CALLOUT_PROTOCOL=h2: Envoy calls the backend
# over HTTP/2 (cleartext, prior knowledge) instead of HTTP/1.1; needs a backend that serves h2c.
BACKEND_BIN=${BACKEND_BIN:-target/release/sluice}
CALLOUT_PROTOCOL=${CALLOUT_PROTOCOL:-h1}
# PIN=1: Envoy on CPU 0, everything else (wrk, backends, redis-server) on the other CPUs.
PIN=${PIN:-0}
PIN_ENVOY= PIN_OTHERS=
if [ "$PIN" = 1 ]; then
  PIN_ENVOY="taskset -c 0" PIN_OTHERS="taskset -c 1-$(($(nproc) - 1))"
fi

command -v wrk >/dev/null || { source scripts/apt.sh; apt_install wrk; }
command -v redis-server >/dev/null || bash scripts/install/10-redis.sh
[ -x .venv/bin/envoy ] || bash scripts/install/30-python.sh
[ -n "${SKIP_BUILD:-}" ] || {
  bash scripts/build-filter.sh >/dev/null
  cargo build --locked -q --release -p sluice-backend --bin sluice
}

work=$(mktemp -d /tmp/sluice-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# Free loopback ports, never one handed out before in this run (two quick binds to port 0 can
# return the same port).
: >"$work/ports"
free_port() {
  python3 - "$work/ports" <<'PY'
import socket, sys
used = set(open(sys.argv[1]).read().split())
for _ in range(100):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = str(s.getsockname()[1]); s.close()
    if port not in used:
        open(sys.argv[1], "a").write(port + "\n"); print(port); break
else:
    sys.exit("sluice bench: no free port")
PY
}
wait_for() { # URL: bounded wait (20 s) for a 200
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ] && return 0
    sleep 0.1
  done
  echo "sluice bench: $1 did not come up; logs in $work" >&2; exit 1
}

REDIS_PORT=$(free_port)
$PIN_OTHERS redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis_server_pid=$!; pids+=($redis_server_pid)

# backend NAME [sluice flags...]: starts a release backend; sets <NAME>_pid, <NAME>_port, <NAME>_admin
# and <NAME>_rls (its gRPC rate limit service, --grpc-listen).
backend() {
  local name=$1; shift
  local port admin rls; port=$(free_port) admin=$(free_port) rls=$(free_port)
  TOKIO_WORKER_THREADS=$BACKEND_THREADS RUST_LOG=warn $PIN_OTHERS "$BACKEND_BIN" --decision-listen "127.0.0.1:$port" \
    --admin-listen "127.0.0.1:$admin" --grpc-listen "127.0.0.1:$rls" --admin-token "$TOKEN" "$@" >"$work/sluice-$name.log" 2>&1 &
  local pid=$!; pids+=($pid)
  printf -v "${name}_pid" %s "$pid"; printf -v "${name}_port" %s "$port"; printf -v "${name}_admin" %s "$admin"
  printf -v "${name}_rls" %s "$rls"
  wait_for "http://127.0.0.1:$admin/readyz"
  put_rule "$admin" bench_allowed '{"algorithm": "gcra", "capacity": 10000000, "rate": {"count": 1000000000, "period": "1s"}}'
  put_rule "$admin" bench_leased '{"algorithm": "gcra", "capacity": 10000000, "rate": {"count": 1000000000, "period": "1s"}, "lease": {"max": 64, "ttl": "1s"}}'
  put_rule "$admin" bench_denied '{"algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1h"}}'
  # envoy/rlqs.yaml's bucket {name: user, user: <x-user-id>} is action `user` (docs/rlqs.md). A
  # token bucket whose rate fits its capacity, so sluice pays each second's refill from the key
  # (a gcra of 1e9/s would owe more than it holds and have the share's rate halved).
  put_rule "$admin" user '{"algorithm": "token_bucket", "capacity": 10000000, "rate": {"count": 1000000, "period": "1s"}}'
}
put_rule() { # ADMIN_PORT ACTION JSON
  curl -sf -X PUT -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
    --data "$3" "http://127.0.0.1:$1/v1/rules/$2" >/dev/null
}
backend on_redis --redis-url "redis://127.0.0.1:$REDIS_PORT/"
backend on_memory

# envoy NAME BACKEND_PORT BACKEND_RLS_PORT: an Envoy from envoy/bench.yaml calling that backend (HTTP
# decision API and gRPC RLS); sets <NAME>_pid and the BENCH_*_PORT of its listeners as <NAME>_<listener>.
export FILTER_WASM=$PWD/target/wasm32-wasip1/wasm-release/sluice_filter.wasm
envoy() {
  local name=$1 listener
  local -A ports=([ENVOY_ADMIN_PORT]=$(free_port) [BACKEND_PORT]=$2 [BACKEND_RLS_PORT]=$3)
  for listener in UPSTREAM PLAIN LOCAL_RL ALLOWED LEASED DENIED CACHED RLS GRPC STREAM RLQS; do ports[BENCH_${listener}_PORT]=$(free_port); done
  local env=(); for k in "${!ports[@]}"; do env+=("$k=${ports[$k]}"); done
  env "${env[@]}" envoy/render.sh bench.yaml >"$work/envoy-$name.yaml"
  local run_env=()
  if [ "${4:-}" = native ]; then # the same config, each wasm filter block loading the dynamic module
    .venv/bin/python -c 'import sys; sys.path.insert(0, "tests/e2e"); import stack; p = sys.argv[1]; t = stack.to_native(open(p).read()); open(p, "w").write(t)' \
      "$work/envoy-$name.yaml"
    run_env=(ENVOY_DYNAMIC_MODULES_SEARCH_PATH="$PWD/target/release")
  fi
  if [ "$CALLOUT_PROTOCOL" = h2 ]; then # only the sluice_backend cluster says http_protocol_options
    sed -i 's/explicit_http_config: {http_protocol_options: {}}/explicit_http_config: {http2_protocol_options: {}}/' "$work/envoy-$name.yaml"
  fi
  if [ "${4:-}" != native ]; then # last (it writes JSON): the quota filter's listener (the rlqs rows), from envoy/rlqs.yaml
    .venv/bin/python benches/envoy/rlqs_conf.py merge "$work/envoy-$name.yaml" "$work/envoy-$name.yaml" \
      "${ports[BENCH_RLQS_PORT]}" "$3"
  fi
  env "${run_env[@]}" $PIN_ENVOY .venv/bin/envoy -c "$work/envoy-$name.yaml" --disable-hot-restart --concurrency "$ENVOY_CONCURRENCY" --log-level warn >"$work/envoy-$name.log" 2>&1 &
  local pid=$!; pids+=($pid)
  printf -v "${name}_pid" %s "$pid"
  for listener in PLAIN LOCAL_RL ALLOWED LEASED DENIED CACHED RLS GRPC STREAM RLQS ENVOY_ADMIN; do
    local k=BENCH_${listener}_PORT; [ "$listener" = ENVOY_ADMIN ] && k=ENVOY_ADMIN_PORT
    printf -v "${name}_${listener,,}" %s "${ports[$k]}"
  done
  local admin_var="${name}_envoy_admin"
  wait_for "http://127.0.0.1:${!admin_var}/ready"
}
envoy envoy_redis "$on_redis_port" "$on_redis_rls"
envoy envoy_memory "$on_memory_port" "$on_memory_rls"
envoy envoy_native "$on_memory_port" "$on_memory_rls" native

# Use up bench_denied's single request on both backends, then check each path answers what it should.
probe() { # PORT EXPECTED_STATUS [HEADER]: up to 3 tries (a path's first callout may time out
  # while Envoy connects to the backend and V8 compiles the filter; failure_mode allow then passes it).
  local out try
  for try in 1 2 3; do
    out=$(curl -s -D - -o /dev/null -H 'x-user: bench' "http://127.0.0.1:$1/")
    grep -q "^HTTP/1.1 $2" <<<"$out" && { [ -z "${3:-}" ] || grep -qi "^$3" <<<"$out"; } && return 0
    sleep 0.2
  done
  echo "sluice bench: port $1 answered $(head -1 <<<"$out"), expected $2${3:+ with $3}:" >&2
  echo "$out" >&2; exit 1
}
curl -s -o /dev/null -H 'x-user: bench' "http://127.0.0.1:$envoy_redis_denied/"
curl -s -o /dev/null -H 'x-user: bench' "http://127.0.0.1:$envoy_memory_denied/"
probe "$envoy_redis_plain" 200
probe "$envoy_redis_local_rl" 200
probe "$envoy_memory_allowed" 200 x-ratelimit-remaining
probe "$envoy_redis_allowed" 200 x-ratelimit-remaining
probe "$envoy_memory_leased" 200 x-ratelimit-remaining
probe "$envoy_redis_leased" 200 x-ratelimit-remaining
probe "$envoy_memory_rls" 200 x-ratelimit-remaining   # Envoy's own header: sluice answered OK
probe "$envoy_redis_rls" 200 x-ratelimit-remaining
probe "$envoy_memory_grpc" 200 x-ratelimit-remaining
probe "$envoy_redis_grpc" 200 x-ratelimit-remaining
probe "$envoy_memory_stream" 200 x-ratelimit-remaining
probe "$envoy_redis_stream" 200 x-ratelimit-remaining
probe "$envoy_memory_denied" 429 retry-after
probe "$envoy_redis_denied" 429 retry-after
probe "$envoy_redis_cached" 429   # the first denial fills the cache
probe "$envoy_redis_cached" 429 "x-sluice-cache: hit"
probe "$envoy_native_allowed" 200 x-ratelimit-remaining
probe "$envoy_native_leased" 200 x-ratelimit-remaining
probe "$envoy_native_grpc" 200 x-ratelimit-remaining
probe "$envoy_native_stream" 200 x-ratelimit-remaining
probe "$envoy_native_cached" 429
probe "$envoy_native_cached" 429 "x-sluice-cache: hit"
# rlqs_assigned KIND BACKEND_PORT: sluice_rlqs_assignments_total{kind="KIND"} on that backend (0 if absent).
rlqs_assigned() {
  curl -s "http://127.0.0.1:$2/metrics" |
    awk -v k="sluice_rlqs_assignments_total{kind=\"$1\"}" '$1 == k {print $2; found = 1} END {if (!found) print 0}'
}
# The quota filter's first request of a bucket is denied (no assignment yet, DENY_ALL); then a
# bounded wait (20 s) for sluice's token bucket: a request admitted, and the backend's count of
# token buckets sent above 0 with no allow_all (an allow_all would admit too: a missing rule).
rlqs_probe() { # ENVOY_PORT BACKEND_PORT
  local code
  for _ in $(seq 1 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'x-user-id: bench' "http://127.0.0.1:$1/" || true)
    if [ "$code" = 200 ] && [ "$(rlqs_assigned token_bucket "$2")" != 0 ] && [ "$(rlqs_assigned allow_all "$2")" = 0 ]; then
      return 0
    fi
    sleep 0.2
  done
  echo "sluice bench: the quota filter on port $1 answered $code; backend $2 sent $(rlqs_assigned token_bucket "$2")" \
    "token buckets, $(rlqs_assigned allow_all "$2") allow_all: no share from sluice in force; logs in $work" >&2
  exit 1
}
rlqs_probe "$envoy_redis_rlqs" "$on_redis_port"
rlqs_probe "$envoy_memory_rlqs" "$on_memory_port"

declare -A port_of=(
  [no_filter]=$envoy_redis_plain [local_ratelimit]=$envoy_redis_local_rl
  [sluice_allowed_memory]=$envoy_memory_allowed [sluice_allowed_redis]=$envoy_redis_allowed
  [sluice_leased_memory]=$envoy_memory_leased [sluice_leased_redis]=$envoy_redis_leased
  [sluice_denied_memory]=$envoy_memory_denied [sluice_denied_redis]=$envoy_redis_denied
  [sluice_cached_denial]=$envoy_redis_cached
  [rls_allowed_memory]=$envoy_memory_rls [rls_allowed_redis]=$envoy_redis_rls
  [grpc_allowed_memory]=$envoy_memory_grpc [grpc_allowed_redis]=$envoy_redis_grpc
  [stream_allowed_memory]=$envoy_memory_stream [stream_allowed_redis]=$envoy_redis_stream
  [native_allowed_memory]=$envoy_native_allowed [native_leased_memory]=$envoy_native_leased
  [native_grpc_allowed_memory]=$envoy_native_grpc [native_stream_allowed_memory]=$envoy_native_stream
  [native_cached_denial]=$envoy_native_cached
  [rlqs_allowed_memory]=$envoy_memory_rlqs [rlqs_allowed_redis]=$envoy_redis_rlqs
)
# The header each path's requests carry: the sluice filter and the RLS descriptor key by x-user;
# envoy/rlqs.yaml buckets by x-user-id.
header_of() { case $1 in rlqs_*) echo 'x-user-id: bench' ;; *) echo 'x-user: bench' ;; esac; }
# Warm every path once before measuring any (the first row would otherwise also pay for start-up
# work still going on in the background, e.g. V8 compiling the filter).
for name in $PATHS; do
  $PIN_OTHERS wrk -t1 -c"$CONNECTIONS" -d1s -H "$(header_of "$name")" "http://127.0.0.1:${port_of[$name]:?unknown path $name}/" >/dev/null 2>&1
done
echo "sluice Envoy benchmark: Envoy 1.40 (--concurrency $ENVOY_CONCURRENCY$([ "$PIN" = 1 ] && echo ", pinned to CPU 0; the rest on the other CPUs")),"
echo "wrk 1 thread × $CONNECTIONS connections × ${DURATION}s per path, medians of $ROUNDS interleaved rounds;"
echo "backend: $BACKEND_BIN ($BACKEND_THREADS tokio workers; callouts over $CALLOUT_PROTOCOL) on the memory store and on redis-server; $(nproc) CPUs shared by all"
# Rounds run the paths in turn (reversed every other round), so a slow spell of this shared machine
# hits every path alike instead of one row.
paths=($PATHS) reversed=()
for ((i = ${#paths[@]} - 1; i >= 0; i--)); do reversed+=("${paths[$i]}"); done
for round in $(seq 1 "$ROUNDS"); do
  if ((round % 2)); then order=("${paths[@]}"); else order=("${reversed[@]}"); fi
  for name in "${order[@]}"; do
    row=$($PIN_OTHERS python3 benches/envoy/measure.py "$name" "http://127.0.0.1:${port_of[$name]}/" "$DURATION" "$CONNECTIONS" "$work" \
      envoy="$envoy_redis_pid" envoy="$envoy_memory_pid" envoy="$envoy_native_pid" backend="$on_memory_pid" \
      backend="$on_redis_pid" redis="$redis_server_pid" stats="http://127.0.0.1:$envoy_redis_envoy_admin" \
      stats="http://127.0.0.1:$envoy_memory_envoy_admin" stats="http://127.0.0.1:$envoy_native_envoy_admin" \
      header="$(header_of "$name")")
    echo "$row" >>"$work/rows.txt"
    # A quota filter row measures Envoy's token bucket only if every measured request was admitted
    # (measure.py's 1 s warm-up before it waits out a re-assignment after sluice abandoned the idle
    # bucket): a 429 in the measured run means no share, or a spent one, was in force.
    if [[ $name == rlqs_* ]] && [ "$(awk '{print $10}' <<<"$row")" != 0 ]; then
      echo "sluice bench: $name: $(awk '{print $10}' <<<"$row") measured answers were not 2xx (the quota filter" \
        "denied: no share from sluice in force, or a spent one); logs in $work" >&2
      exit 1
    fi
  done
done
python3 benches/envoy/summarize.py "$work/rows.txt" "${paths[@]}"
for e in envoy_redis envoy_memory envoy_native; do
  admin_var="${e}_envoy_admin"
  echo "filter counters ($e): $(curl -s "http://127.0.0.1:${!admin_var}/stats?filter=custom.sluice" | tr '\n' ' ')"
  # Envoy's ratelimit filter: ok (sluice answered), error / failure_mode_allowed (no answer in time:
  # those requests passed without a decision, so they must stay near 0 for the rls rows to count).
  echo "ratelimit filter counters ($e): $(curl -s "http://127.0.0.1:${!admin_var}/stats?filter=cluster.upstream.ratelimit" | tr '\n' ' ')"
done
# RLQS: what sluice sent each quota filter Envoy (a token bucket on each 5 s report and on every
# re-grant after an idle bucket was abandoned between rounds), and what the filter answered.
for b in on_redis:envoy_redis on_memory:envoy_memory; do
  backend_port_var="${b%%:*}_port" admin_var="${b#*:}_envoy_admin"
  sent=$(for k in token_bucket allow_all deny_all abandon; do echo -n "$k=$(rlqs_assigned "$k" "${!backend_port_var}") "; done)
  echo "rlqs assignments sent (${b%%:*}): $sent; quota filter answers (${b#*:}):" \
    "$(curl -s "http://127.0.0.1:${!admin_var}/stats?filter=^http.rlqs_closed.downstream_rq_.xx" | tr '\n' ' ')"
  if [[ $sent != *"allow_all=0 deny_all=0 "* ]]; then
    echo "sluice bench: ${b%%:*} sent allow_all or deny_all: the rlqs rows were not all decided by sluice's share" >&2
    exit 1
  fi
done
