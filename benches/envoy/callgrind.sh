#!/usr/bin/env bash
# Envoy instructions per request, counted with callgrind: the precise per-request cost that
# wall-clock benches on this shared 2-core machine (±30% from run to run) cannot show. One Envoy
# (--concurrency 1) under `valgrind --tool=callgrind --instr-atstart=no`, one listener per row;
# for each row, after a warm-up, instrumentation is switched on (`callgrind_control -i on`) for
# REQUESTS sequential requests on one connection (curl URL globbing), switched off, dumped, and the
# dump's total divided by REQUESTS. User-space instructions only (the kernel's share is not
# counted). REPEATS rounds over all rows, printed side by side, with each row's difference to
# "no filter". Rows (ROWS, names as below):
#   no_filter    Envoy, no filter
#   nomatch      the sluice filter loaded, no route matches
#   leased       sluice allowed, leased hit (rule lease {max 100000, ttl 60s}: every measured
#                request is a hit)
#   leased_ietf, leased_noheaders  the leased hit with only the IETF headers (RateLimit,
#                RateLimit-Policy), and with no rate-limit headers (not in the default ROWS)
#   http         sluice allowed, HTTP callout (backend.protocol http)
#   grpc         sluice allowed, gRPC callout (protocol grpc: ShouldRateLimit to the RLS listener)
#   grpc_stream  sluice allowed, protocol grpc_stream (DecisionExchange/Stream on the RLS listener);
#                skipped, saying why, when the filter build or the backend does not have it. The
#                native build's row sends each exchange as a unary DecisionExchange/Call
#   grpc_stream_main  the native build only: grpc_stream over the one exchange stream Envoy's main
#                thread keeps (native/src/stream.rs), each decision handed to the main thread and
#                its answer back to the worker (skipped as grpc_stream, or with NATIVE=none)
#   cached       sluice denied from the denial cache (429, no callout; the rule admits one request
#                an hour, the warm-up spends it)
#   rls          Envoy's native ratelimit filter -> the backend's RLS listener
#   rlqs         stock Envoy's quota filter (envoy.filters.http.rate_limit_quota) with sluice's
#                assignment: the filter block of envoy/rlqs.yaml's fail-closed listener (bucket
#                {name: user, user: <x-user-id>}, DENY_ALL until assigned) reporting to the
#                backend's gRPC listener, rule `user` a token bucket far above the request rate.
#                Requests carry x-user-id. Before the first window a request must be admitted and
#                the backend must have sent a token bucket (sluice_rlqs_assignments_total{kind=
#                "token_bucket"}) and no allow_all; each window is then Envoy's token bucket
#                deciding locally (a window with a 429 is refused as any other). Envoy reports
#                every 5 s while it holds the bucket: an rlqs window holds about one report and
#                sluice's answer (the table's note: assignments=N, from the backend's metrics;
#                rlqs_tx_bytes/rlqs_rx_bytes). So that no other row's window holds one, the other
#                rows wait (up to 60 s) until sluice has abandoned the idle bucket (3 empty reports)
#                and holds none (sluice_rlqs_buckets 0). Envoy still sends a report with no bucket
#                (its domain only: rlqs_tx_bytes=29, no answer) every 5 s once the stream is open,
#                in every row's windows alike
#   grpc_tls, grpc_stream_tls, rls_tls  grpc, grpc_stream and rls over mutual TLS (not in the
#                default ROWS): the same decisions from Envoy to a second backend (the same binary
#                and rules, memory store) whose gRPC listener serves TLS and requires a client
#                certificate (--grpc-tls-cert/--grpc-tls-key/--grpc-tls-client-ca), Envoy's cluster
#                to it an UpstreamTlsContext with a client certificate (docs/security.md); the
#                certificates are made at run time with openssl in the work dir, and that backend
#                starts only when such a row is asked for. The table adds each one's difference to
#                its plaintext row (same build). grpc_stream_tls is skipped as grpc_stream is; its
#                native row, as grpc_stream's, sends each exchange as a unary DecisionExchange/Call.
#                One handshake per Envoy connection: the windows reuse the connection opened in
#                the warm-up, so a row's figure is TLS's per-request cost (records, encryption)
# Each sluice row is measured for each build: the wasm filter (base, COMPARE) and the dynamic
# module (NATIVE, default target/release/libsluice_filter_native.so, loaded by absolute path in the
# same Envoy; NATIVE=none leaves it out). The native build's grpc_stream row sends each exchange as
# a unary DecisionExchange/Call over Envoy's HTTP callout (docs/filter.md, "The native build: what is the same, what differs").
# Every sluice row fails closed with a 10 s callout timeout (a 25 ms timeout fires under valgrind
# and would let requests through undecided), denial cache and counts reports off (a report's tick
# would land in other rows' windows), and Envoy's stats flush is pushed to 299 s (at 5 s it landed
# in some windows: ~1% between repeats; without it repeats agree within ~0.3%). A window with any
# answer other than 200, or more than one new downstream connection, is refused; a leased window
# with a callout (the lease ran out and was granted again) is measured again. Each row also shows
# what Envoy's counters did in its windows (callouts, lease hits, ratelimit.ok, and new connections
# to the backend and TLS handshakes when there were any: none while Envoy reuses its connection).
#
# WASM: the filter build (default the build output); COMPARE: other builds (paths, space-separated,
# named in the table by file name), each loaded as its own VM in the same Envoy and measured beside
# the first, row by row (the table adds each one's difference to base). At most two COMPARE builds:
# V8 reserves ~10 GB of address space per wasm instance and valgrind's ends at 128 GB.
# BACKEND_BIN: the backend (release build, memory store, with --grpc-listen; the *_tls rows start
# a second one). Builds the filter and the backend first unless SKIP_BUILD=1. Everything on
# 127.0.0.1, stopped by PID at exit; bounded by MAX_SECONDS (default 1800). A run of the default
# rows takes ~100 s with one COMPARE build (~10-25 s to start Envoy under valgrind, 4-6 s per
# window) on an idle machine, about twice that while something compiles beside it; with rlqs among
# the rows, add up to ~20 s per repeat for the other rows' wait for sluice to abandon its bucket
# (327 s for the default rows and the native build, 2 repeats, on a busy machine).
#   SKIP_BUILD=1 WASM=/tmp/a.wasm COMPARE=/tmp/b.wasm benches/envoy/callgrind.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
WASM=$(realpath "${WASM:-target/wasm32-wasip1/wasm-release/sluice_filter.wasm}")
compare=()
for f in ${COMPARE:-}; do compare+=("$(realpath "$f")"); done
COMPARE="${compare[*]}"
BACKEND_BIN=${BACKEND_BIN:-target/release/sluice}
NATIVE=${NATIVE:-target/release/libsluice_filter_native.so}
[ "$NATIVE" = none ] || NATIVE=$(realpath "$NATIVE")
ROWS=${ROWS:-no_filter nomatch leased http grpc grpc_stream grpc_stream_main cached rls rlqs}
REPEATS=${REPEATS:-2}
REQUESTS=${REQUESTS:-300}
WARMUP=${WARMUP:-100}
MAX_SECONDS=${MAX_SECONDS:-1800}
VALGRIND=${VALGRIND:-/usr/bin/valgrind}
TOKEN=bench-admin-token-0123456789abcdef
helper=benches/envoy/callgrind.py
started=$SECONDS

[ -x "$VALGRIND" ] || { echo "sluice callgrind: no valgrind at $VALGRIND" >&2; exit 1; }
command -v callgrind_control >/dev/null || { echo "sluice callgrind: no callgrind_control" >&2; exit 1; }
[ -x .venv/bin/envoy ] || bash scripts/install/30-python.sh
# .venv/bin/envoy is a Python launcher; valgrind has to run the binary itself.
ENVOY_BIN=${ENVOY_BIN:-$(ls .venv/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -1)}
[ -x "$ENVOY_BIN" ] || { echo "sluice callgrind: no Envoy binary under .venv (ENVOY_BIN)" >&2; exit 1; }
[ -n "${SKIP_BUILD:-}" ] || {
  bash scripts/build-filter.sh >/dev/null
  cargo build --locked -q --release -p sluice-backend --bin sluice
}
natives=()
[ "$NATIVE" = none ] || natives=("$NATIVE")
for f in "$WASM" "${compare[@]}" "${natives[@]}" "$BACKEND_BIN"; do
  [ -s "$f" ] || { echo "sluice callgrind: $f is missing" >&2; exit 1; }
done

work=$(mktemp -d /tmp/sluice-callgrind.XXXXXX)
backend_pid= tls_backend_pid= envoy_pid=
# stop PID: TERM, up to 30 s for it to go (valgrind writes its last dump), then KILL.
stop() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() { stop "$envoy_pid"; stop "$backend_pid"; stop "$tls_backend_pid"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
check_time() {
  if ((SECONDS - started > MAX_SECONDS)); then
    echo "sluice callgrind: over MAX_SECONDS=$MAX_SECONDS, stopping (logs in $work)" >&2; exit 1
  fi
}
port() { python3 "$helper" port "$work"; }
wait_for() { # URL SECONDS [PID]: bounded wait for a 200 (while PID, if given, runs)
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then
      echo "sluice callgrind: the process behind $1 exited; logs in $work:" >&2
      grep -vE '^==' "$work/envoy.log" | tail -5 >&2; exit 1
    fi
    [ "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ] && return 0
    sleep 0.5
  done
  echo "sluice callgrind: $1 did not come up within $2 s; logs in $work" >&2; exit 1
}

# start_backend NAME [FLAGS...]: a backend on the memory store (decision API, admin, RLS listener;
# FLAGS added) with the bench's rules (callgrind.py RULES); sets NAME_pid, NAME_port, NAME_admin
# and NAME_rls, its log WORK/NAME.log.
start_backend() {
  local name=$1 decision admin rls action rule; shift
  decision=$(port) admin=$(port) rls=$(port)
  RUST_LOG=warn "$BACKEND_BIN" --decision-listen "127.0.0.1:$decision" --admin-listen "127.0.0.1:$admin" \
    --grpc-listen "127.0.0.1:$rls" --admin-token "$TOKEN" "$@" >"$work/$name.log" 2>&1 &
  printf -v "${name}_pid" %s "$!"
  printf -v "${name}_port" %s "$decision"; printf -v "${name}_admin" %s "$admin"; printf -v "${name}_rls" %s "$rls"
  wait_for "http://127.0.0.1:$admin/readyz" 20
  python3 "$helper" rules >"$work/rules.tsv"
  while IFS=$'\t' read -r action rule; do
    curl -sf --max-time 5 -X PUT -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' \
      --data "$rule" "http://127.0.0.1:$admin/v1/rules/$action" >/dev/null
  done <"$work/rules.tsv"
}
start_backend backend

# grpc_stream needs both sides: the filter build (it names the protocol) and the backend (it
# serves sluice.v1.DecisionExchange; an unknown gRPC method answers grpc-status 12, unimplemented).
rows=() : >"$work/skipped.tsv"
grpc_status() { # PATH: grpc-status of an empty unary call to the RLS listener
  printf '\0\0\0\0\0' >"$work/empty.grpc"
  curl -s --max-time 5 --http2-prior-knowledge -D - -o /dev/null -X POST -H 'content-type: application/grpc' \
    -H 'te: trailers' --data-binary @"$work/empty.grpc" "http://127.0.0.1:$backend_rls$1" |
    tr -d '\r' | awk -F': ' 'tolower($1) == "grpc-status" {print $2; exit}'
}
for row in $ROWS; do
  if [[ $row == grpc_stream* ]]; then
    why=
    if [ "$row" != grpc_stream_main ]; then
      for f in "$WASM" "${compare[@]}"; do
        grep -q grpc_stream "$f" || why="${why:+$why; }filter build $f does not know protocol grpc_stream"
      done
    elif [ "$NATIVE" = none ]; then
      why="NATIVE=none (a native-build row)"
    fi
    status=
    for _ in 1 2 3; do
      status=$(grpc_status /sluice.v1.DecisionExchange/Stream || true)
      [ -z "$status" ] || break
    done
    case $status in
      12) why="${why:+$why; }backend $BACKEND_BIN does not serve sluice.v1.DecisionExchange (grpc-status 12, unimplemented)" ;;
      "") why="${why:+$why; }no gRPC answer from the backend's RLS listener to DecisionExchange/Stream" ;;
    esac
    if [ -n "$why" ]; then printf '%s\t%s\n' "$row" "$why" >>"$work/skipped.tsv"; continue; fi
  fi
  rows+=("$row")
done

# The *_tls rows' backend: certificates made now (openssl), its gRPC listener over mutual TLS.
tls_backend_rls=
if [[ " ${rows[*]} " == *_tls\ * ]]; then
  python3 "$helper" pki "$work/pki" >"$work/tls-flags"
  mapfile -t tls_flags <"$work/tls-flags"
  start_backend tls_backend "${tls_flags[@]}"
fi

# Envoy under callgrind, one listener per row (and per build).
envoy_admin=$(port)
ENVOY_ADMIN_PORT=$envoy_admin BACKEND_PORT=$backend_port BACKEND_RLS_PORT=$backend_rls BACKEND_TLS_RLS_PORT=$tls_backend_rls \
  PKI=$work/pki WASM=$WASM COMPARE=$COMPARE NATIVE=$NATIVE python3 "$helper" config "$work" "$work/envoy.json" "${rows[@]}"
"$VALGRIND" --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.out.%p" \
  "$ENVOY_BIN" -c "$work/envoy.json" --disable-hot-restart --concurrency 1 --log-level warn >"$work/envoy.log" 2>&1 &
envoy_pid=$!
wait_for "http://127.0.0.1:$envoy_admin/ready" 300 "$envoy_pid"
echo "envoy (callgrind) ready after $((SECONDS - started)) s; work dir $work" >&2
if grep -q 'Failed to create new Wasm instance' "$work/envoy.log"; then
  # V8 reserves ~10 GB of address space per wasm instance (one per build on the main thread and
  # one on the worker); valgrind's address space ends at 128 GB: more builds fail to start.
  echo "sluice callgrind: Envoy could not create every wasm instance under valgrind (address space);" \
    "use at most two COMPARE builds per run" >&2
  exit 1
fi

want() { if [ "$1" = cached ]; then echo 429; else echo 200; fi; } # ROW: the status every request gets
header() { python3 "$helper" header "$1"; } # ROW: the header its requests carry
# rlqs_metric KIND: the backend's sluice_rlqs_assignments_total{kind="KIND"} (0 when absent).
rlqs_metric() {
  curl -s --max-time 10 "http://127.0.0.1:$backend_port/metrics" |
    awk -v k="sluice_rlqs_assignments_total{kind=\"$1\"}" '$1 == k {print $2; found = 1} END {if (!found) print 0}'
}
# rlqs_quiet: bounded wait (60 s) until the backend holds no quota filter bucket (sluice_rlqs_buckets
# 0: the rlqs row's idle bucket abandoned, so Envoy sends no more reports into other rows' windows).
rlqs_quiet() {
  local held end=$((SECONDS + 60))
  while ((SECONDS < end)); do
    held=$(curl -s --max-time 10 "http://127.0.0.1:$backend_port/metrics" | awk '$1 == "sluice_rlqs_buckets" {print $2}')
    [ "${held:-0}" = 0 ] && return 0
    sleep 1
  done
  echo "  (rlqs: the backend still holds $held buckets after 60 s: reports may land in the next windows)" >&2
}
# rlqs_admitted PORT: bounded wait (60 s) until the quota filter admits a request, i.e. sluice's
# token bucket is in force (the listener denies every request until an assignment arrives: the
# first request of a bucket, and again after sluice abandoned an idle one, 15 s without requests).
rlqs_admitted() {
  local code end=$((SECONDS + 60))
  while ((SECONDS < end)); do
    code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' -H "$(header rlqs)" "http://127.0.0.1:$1/assign" || true)
    [ "$code" = 200 ] && return 0
    sleep 0.5
  done
  echo "sluice callgrind: rlqs: no request admitted within 60 s (last answer $code): no assignment from sluice; see $work" >&2
  exit 1
}

# Each listener answers as its row means (the first sluice requests also take the lease), then the
# warm-up.
while IFS=$'\t' read -r row build p _; do
  [ "$row" != rlqs ] || rlqs_admitted "$p"
  out=$(curl -s --max-time 120 -D - -o /dev/null -H "$(header "$row")" "http://127.0.0.1:$p/probe")
  # The cached row's first request spends the hour's one unit; the next is the denial it caches.
  [ "$row" != cached ] || out=$(curl -s --max-time 120 -D - -o /dev/null -H "$(header "$row")" "http://127.0.0.1:$p/probe")
  grep -q "^HTTP/1.1 $(want "$row")" <<<"$out" || { echo "sluice callgrind: $row/$build answered $(head -1 <<<"$out")" >&2; exit 1; }
  case $row in
    no_filter | nomatch | cached) ;;
    rlqs) # admitted by sluice's share, not by an allow_all (a rule missing, an unmapped bucket)
      if [ "$(rlqs_metric token_bucket)" = 0 ] || [ "$(rlqs_metric allow_all)" != 0 ]; then
        echo "sluice callgrind: rlqs: the backend sent $(rlqs_metric token_bucket) token buckets and" \
          "$(rlqs_metric allow_all) allow_all; want a token bucket and no allow_all" >&2; exit 1
      fi ;;
    leased_ietf) grep -qi '^ratelimit:' <<<"$out" || { echo "sluice callgrind: $row/$build sent no RateLimit" >&2; exit 1; } ;;
    leased_noheaders) ;;
    *) grep -qi '^x-ratelimit-remaining' <<<"$out" || { echo "sluice callgrind: $row/$build sent no x-ratelimit-remaining" >&2; exit 1; } ;;
  esac
  curl -s --max-time 600 -o /dev/null -H "$(header "$row")" "http://127.0.0.1:$p/warm[1-$WARMUP]" >/dev/null
done <"$work/rows.tsv"
check_time

has_rlqs=0; [[ " ${rows[*]} " != *" rlqs "* ]] || has_rlqs=1
dumps() { find "$work" -name 'cg.out.*.*' | wc -l; }
control() { # callgrind_control ARGS, quiet unless it fails
  local out
  out=$(timeout 120 callgrind_control "$@" "$envoy_pid" 2>&1) || {
    echo "sluice callgrind: callgrind_control $* failed: $out" >&2; exit 1
  }
}
: >"$work/results.tsv"
measure() { # ROW BUILD PORT REPEAT
  local url="http://127.0.0.1:$3" n file total hdr assigned
  hdr=$(header "$1")
  [ "$1" = rlqs ] || ((has_rlqs == 0)) || rlqs_quiet
  # A few unmeasured requests first: the callout connection may have idled out since the last round
  # (and sluice may have abandoned the rlqs row's idle bucket: wait for its assignment again).
  curl -s --max-time 600 -o /dev/null -H "$hdr" "$url/pre[1-10]" >/dev/null
  if [ "$1" = rlqs ]; then rlqs_admitted "$3"; assigned=$(rlqs_metric token_bucket); fi
  curl -s --max-time 30 "http://127.0.0.1:$envoy_admin/stats" >"$work/stats.before"
  control -z
  control -i on
  curl -s --max-time 900 -o /dev/null -w '%{stderr}%{http_code} %{num_connects}\n' -H "$hdr" \
    "$url/m[1-$REQUESTS]" >/dev/null 2>"$work/codes"
  control -i off
  n=$(dumps)
  control -d "$1-$2-$4"
  for _ in $(seq 1 200); do
    (($(dumps) > n)) && break
    curl -s --max-time 5 -o /dev/null "http://127.0.0.1:$envoy_admin/ready" || true # wakes Envoy
    sleep 0.3
  done
  file=$(ls -t "$work"/cg.out.*.* | head -1)
  curl -s --max-time 30 "http://127.0.0.1:$envoy_admin/stats" >"$work/stats.after"
  local ok connects note
  ok=$(awk -v want="$(want "$1")" '$1 == want' "$work/codes" | wc -l)
  connects=$(awk '{s += $2} END {print s + 0}' "$work/codes")
  if [ "$ok" != "$REQUESTS" ] || [ "$connects" -gt 1 ]; then
    echo "sluice callgrind: $1/$2: $ok of $REQUESTS answered $(want "$1") over $connects new connections; see $work" >&2; exit 1
  fi
  total=$(python3 "$helper" total "$file") || exit 1
  note=$(python3 "$helper" delta "$work/stats.before" "$work/stats.after") || exit 1
  # The rlqs row: token buckets sluice sent in the window (a renewal answers each 5 s report).
  if [ "$1" = rlqs ]; then
    assigned="assignments=$(($(rlqs_metric token_bucket) - assigned))"
    if [ "$note" = "no counter moved" ]; then note=$assigned; else note="$assigned $note"; fi
  fi
  echo "  $1/$2 repeat $4: $((total / REQUESTS)) instructions per request ($note)" >&2
  # A leased window must be all hits: a lease that ran out (60 s ttl) and was granted again inside
  # the window adds a callout to it. Such a window is measured again (the new lease has 60 s).
  if [[ $1 == leased* ]] && [[ $note == *callouts=* ]]; then return 3; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$4" "$((total / REQUESTS))" "$note" >>"$work/results.tsv"
}
for rep in $(seq 1 "$REPEATS"); do
  while IFS=$'\t' read -r row build p _; do
    for attempt in 1 2 3; do
      check_time
      status=0; measure "$row" "$build" "$p" "$rep" </dev/null || status=$?
      [ "$status" = 3 ] || break
      echo "  ($row/$build: a callout in a leased window, the lease was granted again; measuring again)" >&2
    done
    [ "$status" = 0 ] || { echo "sluice callgrind: $row/$build: no clean window in 3 attempts" >&2; exit 1; }
  done <"$work/rows.tsv"
done

if grep -qiE 'wasm.*(error|fail)|panick|critical' "$work/envoy.log"; then
  echo "sluice callgrind: Envoy logged wasm errors:" >&2; grep -iE 'wasm.*(error|fail)|panick|critical' "$work/envoy.log" | head -5 >&2
fi
echo "Envoy 1.40 instructions per request (callgrind; --concurrency 1; $REQUESTS sequential requests on one"
echo "connection after $WARMUP warm-up; $REPEATS repeats). base: $WASM"
[ -z "$COMPARE" ] || echo "compare: $COMPARE"
[ "$NATIVE" = none ] || echo "native: $NATIVE"
echo "backend: $BACKEND_BIN (memory store${tls_backend_pid:+; the *_tls rows: a second one, gRPC listener over mutual TLS}); run took $((SECONDS - started)) s"
echo
python3 "$helper" table "$work"
