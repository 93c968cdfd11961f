#!/usr/bin/env bash
# The docker-compose stack, built and run for real (tests/compose/test_stack.py): the README's
# compose command, unchanged, then checks through the stack (the envoy service on the wasm filter,
# then once recreated on the dynamic-module build, SLUICE_ENVOY_CONFIG) and `docker compose down`.
#
# Uses the Docker engine that answers; when none does, starts Debian's dockerd for this suite
# only (no bridge, no iptables changes: every container uses host networking on 127.0.0.1) and
# stops it by its PID at the end. Then builds (or finds cached) the local stand-ins for the
# official images the compose files name (tests/compose/standins.sh): no registry is reachable.
# A machine where no engine answers and dockerd cannot start FAILS this suite, saying what is
# missing (scripts/suite-lib.sh); to leave it out on purpose: SLUICE_SKIP_SUITES=compose.
#
# Lane: 2 (scripts/test.sh: beside the Envoy end to end tests; with the demo, on the same ports)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
source scripts/suite-lib.sh
suite_init "$0"
started=$(date +%s)
state="$root/.sluice/compose"
mkdir -p "$state"

dockerd_pid=""
stop_engine() {
  # Whatever happened (a timeout, a failed test), the stack does not outlive the suite.
  if timeout 5 docker info >/dev/null 2>&1 && [ -n "$(docker compose ps -a -q 2>/dev/null)" ]; then
    echo "compose: the stack is still up; docker compose down"
    timeout 180 docker compose down >/dev/null 2>&1 || true
  fi
  [ -n "$dockerd_pid" ] || return 0
  echo "compose: stopping the dockerd this suite started (pid $dockerd_pid)"
  kill "$dockerd_pid" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$dockerd_pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "compose: dockerd (pid $dockerd_pid) did not stop within 30 s; killing it" >&2
  kill -9 "$dockerd_pid" 2>/dev/null || true
}
trap stop_engine EXIT

suite_need docker "scripts/install/70-docker.sh installs Debian's docker.io"
if timeout 20 docker info >/dev/null 2>&1; then
  echo "compose: using the Docker engine that already runs (left running)"
else
  command -v dockerd >/dev/null || suite_cannot_run "a Docker engine" "none answers and there is no dockerd to start (scripts/install/70-docker.sh installs Debian's docker.io)"
  [ "$(id -u)" = 0 ] || suite_cannot_run "a Docker engine" "none answers, and starting dockerd needs root"
  [ ! -S /var/run/docker.sock ] || rm -f /var/run/docker.sock  # stale: nothing answered on it
  echo "compose: starting dockerd for this suite (log: .sluice/compose/dockerd.log)"
  # At a lower priority while it builds (scripts/test.sh runs this suite beside the Envoy end to
  # end tests, whose deadlines are tens of ms); back to normal before the stack runs (below).
  ( nice -n 10 dockerd --bridge=none --iptables=false --ip6tables=false --storage-driver=overlay2 \
      </dev/null >"$state/dockerd.log" 2>&1 & echo $! >"$state/dockerd.pid" )
  dockerd_pid=$(cat "$state/dockerd.pid")
  for _ in $(seq 60); do
    timeout 5 docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { dockerd_pid=""; suite_cannot_run "a Docker engine" "dockerd could not start here: $(grep -v '^$' "$state/dockerd.log" | tail -n 1)"; }
    sleep 0.5
  done
  timeout 5 docker info >/dev/null 2>&1 || suite_cannot_run "a Docker engine" "dockerd started but did not answer within 30 s: $(tail -n 1 "$state/dockerd.log")"
fi
docker compose version >/dev/null 2>&1 || suite_cannot_run "docker compose" "the Compose v2 CLI plugin (scripts/install/70-docker.sh installs it)"

# CPU time spent inside Docker (builds and containers; cgroup v1 cpuacct, when readable): a
# figure that, unlike wall time, does not grow when other work shares the machine.
docker_cpu() { cat /sys/fs/cgroup/cpuacct/docker/cpuacct.usage 2>/dev/null || echo 0; }
t0=$(date +%s)
timeout 1800 bash tests/compose/standins.sh
echo "compose: stand-in images ready in $(( $(date +%s) - t0 )) s"

# The images built first, still at the engine's lower priority when this suite started it; the
# test's own `docker compose up --build` then finds them in BuildKit's cache (as a user's second
# `up` does) and runs the containers at normal priority. The build is what costs CPU; the stack's
# checks through Envoy are what must not wait behind another suite.
if [ -n "$dockerd_pid" ]; then
  t0=$(date +%s)
  cpu0=$(docker_cpu)
  SLUICE_ADMIN_TOKEN=prebuild-only timeout 3000 docker compose build --quiet \
    || { echo "compose: docker compose build failed (above)" >&2; exit 1; }
  echo "compose: images built in $(( $(date +%s) - t0 )) s (CPU inside Docker: $(( ($(docker_cpu) - cpu0) / 1000000000 )) s)"
  # Every thread: Linux's nice is per thread, and a container's processes inherit it from the
  # containerd thread that starts them.
  for pid in "$dockerd_pid" $(pgrep -x containerd || true); do
    for task in /proc/"$pid"/task/*; do
      renice -n 0 -p "${task##*/}" >/dev/null 2>&1 || true
    done
  done
fi

t0=$(date +%s)
cpu0=$(docker_cpu)
SLUICE_COMPOSE_LOG="$state/compose-up.log" timeout 3600 \
  .venv/bin/python -m pytest -q -p no:cacheprovider -s tests/compose
echo "compose: stack built, run and checked in $(( $(date +%s) - t0 )) s (CPU inside Docker: $(( ($(docker_cpu) - cpu0) / 1000000000 )) s); suite in $(( $(date +%s) - started )) s"
