#!/usr/bin/env bash
# Serves: reliability
# schemathesis (PyPI) in ./.venv for the reliability suite's API fuzzing (tests/reliability).
# The venv itself comes from 30-python.sh, which runs first. Idempotent: a second run only checks
# the installed version.
set -euo pipefail
cd "$(dirname "$0")/../.."
SCHEMATHESIS_VERSION=4.32.5
venv=.venv
[ -x "$venv/bin/python" ] || { echo "sluice: .venv is missing; run scripts/install/30-python.sh first" >&2; exit 1; }
have() {
  [ -x "$venv/bin/schemathesis" ] &&
    "$venv/bin/python" - "$SCHEMATHESIS_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert version("schemathesis") == sys.argv[1]
PY
}
if have; then exit 0; fi
echo "sluice: installing schemathesis $SCHEMATHESIS_VERSION into .venv (once)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" ||
  { echo "sluice: could not install schemathesis $SCHEMATHESIS_VERSION from PyPI into .venv" >&2; exit 1; }
have || { echo "sluice: .venv has no working schemathesis $SCHEMATHESIS_VERSION after pip install" >&2; exit 1; }
