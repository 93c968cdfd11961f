#!/usr/bin/env bash
# The quick start cannot rot: drives scripts/demo.sh itself (start, probe through Envoy, stop),
# and checks that docker-compose.yml uses the same configuration files as the demo.
# Lane: 2 (scripts/test.sh: beside the Envoy end to end and reliability suites)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/suite-lib.sh
suite_init "$0"
[ -x .venv/bin/python ] || suite_install 30-python.sh ".venv with pytest"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/demo
