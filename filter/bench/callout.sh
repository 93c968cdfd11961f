#!/usr/bin/env bash
# The filter's two callouts side by side: Envoy CPU per request for the HTTP JSON callout
# (`backend.protocol: http`) and the gRPC callout (`backend.protocol: grpc`, ShouldRateLimit over
# h2c), both allowed, against one release backend on the memory store, with no filter as the
# baseline and, for reference, Envoy's native ratelimit filter calling the same RLS listener
# (the issue's bar for the filter's allowed path). The method is benches/envoy/run.sh's (its measure.py does each row: a 1 s warm-up,
# DURATION s of wrk load, CPU from /proc/PID/stat): one Envoy --concurrency 1 whose upstream is a
# direct_response listener of its own, wrk 1 thread × CONNECTIONS, ROUNDS interleaved rounds
# (reversed every other round), each row the median of its rounds. Bounded: about
# ROUNDS × 4 × (DURATION + 1) s of load; every process stopped by PID at exit.
#   DURATION=5 ROUNDS=3 CONNECTIONS=16 PIN=1 filter/bench/callout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-16}
BACKEND_BIN=${BACKEND_BIN:-target/release/sluice}
PIN=${PIN:-0}
PIN_ENVOY= PIN_OTHERS=
if [ "$PIN" = 1 ]; then PIN_ENVOY="taskset -c 0" PIN_OTHERS="taskset -c 1-$(($(nproc) - 1))"; fi
command -v wrk >/dev/null || { source scripts/apt.sh; apt_install wrk; }
[ -n "${SKIP_BUILD:-}" ] || {
  bash scripts/build-filter.sh >/dev/null
  cargo build --locked -q --release -p sluice-backend --bin sluice
}
TOKEN=bench-admin-token-0123456789abcdef
work=$(mktemp -d /tmp/sluice-callout.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # URL: bounded wait (20 s) for a 200
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ] && return 0
    sleep 0.1
  done
  echo "sluice callout bench: $1 did not come up; logs in $work" >&2; exit 1
}
DECISION=$(port) ADMIN=$(port) RLS=$(port) ENVOY_ADMIN=$(port) UPSTREAM=$(port) PLAIN=$(port) HTTP=$(port) GRPC=$(port) NATIVE=$(port)
RUST_LOG=warn $PIN_OTHERS "$BACKEND_BIN" --decision-listen "127.0.0.1:$DECISION" --admin-listen "127.0.0.1:$ADMIN" \
  --rls-listen "127.0.0.1:$RLS" --admin-token "$TOKEN" >"$work/sluice.log" 2>&1 &
backend_pid=$!; pids+=($backend_pid)
wait_for "http://127.0.0.1:$ADMIN/readyz"
curl -sf -X PUT -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  --data '{"algorithm": "gcra", "capacity": 10000000, "rate": {"count": 1000000000, "period": "1s"}}' \
  "http://127.0.0.1:$ADMIN/v1/rules/bench_allowed" >/dev/null
WASM=$PWD/target/wasm32-wasip1/wasm-release/sluice_filter.wasm
hcm() { # NAME PORT HTTP_FILTERS...
  cat <<YAML
  - name: $1
    address: {socket_address: {address: 127.0.0.1, port_value: $2}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: $1
          route_config:
            virtual_hosts:
            - {name: all, domains: ["*"], routes: [{match: {prefix: "/"}, $3}]}
          http_filters:
$4
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
YAML
}
sluice() { # NAME BACKEND_JSON
  cat <<YAML
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: $1
                vm_config: {vm_id: sluice, runtime: envoy.wasm.runtime.v8, code: {local: {filename: "$WASM"}}}
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"backend": $2, "routes": [{"action": "bench_allowed", "key": {"source": "header", "name": "x-user"}}]}'
YAML
}
cluster() { # NAME PORT PROTOCOL_OPTIONS
  cat <<YAML
  - name: $1
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        $3
    load_assignment:
      cluster_name: $1
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $2}}}}]}]
YAML
}
to_upstream='route: {cluster: upstream}'
{
  echo "admin: {address: {socket_address: {address: 127.0.0.1, port_value: $ENVOY_ADMIN}}}"
  echo "static_resources:"
  echo "  listeners:"
  hcm upstream "$UPSTREAM" 'direct_response: {status: 200, body: {inline_string: "ok\n"}}' ""
  hcm plain "$PLAIN" "$to_upstream" ""
  hcm http "$HTTP" "$to_upstream" "$(sluice http '{"cluster": "sluice_backend", "timeout_ms": 1000}')"
  hcm grpc "$GRPC" "$to_upstream" "$(sluice grpc '{"cluster": "sluice_rls", "protocol": "grpc", "timeout_ms": 1000}')"
  # As envoy/bench.yaml's rls listener (the descriptor maps to the same action and key).
  hcm native "$NATIVE" 'route: {cluster: upstream, rate_limits: [{actions: [{generic_key: {descriptor_value: bench_allowed}}, {request_headers: {header_name: x-user, descriptor_key: user}}]}]}' \
'          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: sluice
              timeout: 1s
              failure_mode_deny: false
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              rate_limit_service: {transport_api_version: V3, grpc_service: {envoy_grpc: {cluster_name: sluice_rls}}}'
  echo "  clusters:"
  # As envoy/bench.yaml: HTTP/1.1 to the decision listener (idle connections closed after 5 s).
  cluster sluice_backend "$DECISION" 'common_http_protocol_options: {idle_timeout: 5s}
        explicit_http_config: {http_protocol_options: {}}'
  cluster sluice_rls "$RLS" 'explicit_http_config: {http2_protocol_options: {}}'
  cluster upstream "$UPSTREAM" 'explicit_http_config: {http_protocol_options: {}}'
} >"$work/envoy.yaml"
$PIN_ENVOY .venv/bin/envoy -c "$work/envoy.yaml" --disable-hot-restart --concurrency 1 --log-level warn >"$work/envoy.log" 2>&1 &
envoy_pid=$!; pids+=($envoy_pid)
wait_for "http://127.0.0.1:$ENVOY_ADMIN/ready"
for p in "$HTTP" "$GRPC" "$NATIVE"; do
  out=$(curl -s -D - -o /dev/null -H 'x-user: bench' "http://127.0.0.1:$p/")
  grep -qi '^x-ratelimit-remaining' <<<"$out" && ! grep -qi '^x-sluice-failure' <<<"$out" \
    || { echo "sluice callout bench: port $p did not answer with a decision: $out" >&2; exit 1; }
done
declare -A port_of=([no_filter]=$PLAIN [sluice_http_callout]=$HTTP [sluice_grpc_callout]=$GRPC
  [native_ratelimit_rls]=$NATIVE)
paths=(no_filter sluice_http_callout sluice_grpc_callout native_ratelimit_rls)
for name in "${paths[@]}"; do
  $PIN_OTHERS wrk -t1 -c"$CONNECTIONS" -d1s -H 'x-user: bench' "http://127.0.0.1:${port_of[$name]}/" >/dev/null 2>&1
done
for round in $(seq 1 "$ROUNDS"); do
  order=("${paths[@]}")
  ((round % 2)) || order=(native_ratelimit_rls sluice_grpc_callout sluice_http_callout no_filter)
  for name in "${order[@]}"; do
    $PIN_OTHERS python3 benches/envoy/measure.py "$name" "http://127.0.0.1:${port_of[$name]}/" "$DURATION" \
      "$CONNECTIONS" "$work" envoy="$envoy_pid" backend="$backend_pid" | tee -a "$work/rows.txt"
  done
done
stats=$(curl -s "http://127.0.0.1:$ENVOY_ADMIN/stats?filter=wasmcustom")
echo "filter counters: $(grep -E 'failures|allowed' <<<"$stats" | tr '\n' ' ')"
echo "medians of $ROUNDS rounds (rps, p50 ms, p99 ms, Envoy µs/req, backend µs/req, wrk µs/req, CPU %, non-2xx):"
python3 - "$work/rows.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *vals = line.split()
    rows.setdefault(name, []).append([float(v) for v in vals])
base = None
for name in ("no_filter", "sluice_http_callout", "sluice_grpc_callout", "native_ratelimit_rls"):
    cols = list(zip(*rows[name]))
    med = [statistics.median(c) for c in cols]
    if name == "no_filter":
        base = med
    print(f"{name:22} {med[0]:7.0f} ({min(cols[0]):.0f}-{max(cols[0]):.0f}) p50 {med[1]:.2f} p99 {med[2]:.2f} "
          f"envoy {med[3]:4.0f} µs/req (all rounds {' '.join(f'{v:.0f}' for v in cols[3])}) backend {med[4]:3.0f} "
          f"wrk {med[5]:3.0f} cpu {med[6]:.0f}% non2xx {med[7]:.0f}  rps/no_filter {med[0] / base[0]:.2f}")
PY
