"""Fixtures: one redis-server, one sluice backend, one upstream and one Envoy for the session;
tests that need a stopped or slow backend start their own Envoy pointed at it."""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import builds  # noqa: E402
import matrix_report  # noqa: E402
import order  # noqa: E402
import stack  # noqa: E402


# Tests of what only one build has, skipped on the other (SLUICE_FILTER_BUILD, see stack.py): the
# wasm module's exports (the native build has the exchange stream too: Envoy's main thread keeps it,
# docs/filter.md, "The native build: what is the same, what differs").
WASM_ONLY = ("test_wasm_exports.py",)
# Single tests of what only one build has (none today: the native build keeps the exchange stream
# on Envoy's main thread, with the same backoff, probes and log lines).
WASM_ONLY_TESTS = ()
_E2E_DIR = Path(__file__).resolve().parent


def renders_sluice(item):
    """Whether the native pass runs a test (tests/e2e/builds.py): a test whose Envoys never load
    the sluice filter (Envoy's own ratelimit filter -> sluice RLS, say) runs once, in the wasm pass.
    Decided from the Envoy configs (envoy/*.yaml) named in its module, in the e2e helper modules
    that module uses, and in every fixture it depends on (their functions' source). A test is
    skipped only when it names at least one config of envoy/ and none of them has the filter's
    block; a test that names none (its config is built some other way) runs in both passes."""
    found = builds.verdicts(builds.module_sources(item, _E2E_DIR) + builds.fixture_sources(item))
    return not found or True in found


def pytest_configure(config):
    config.addinivalue_line("markers", "smoke: one test of each kind of behaviour, run on every Envoy version of "
                            "the matrix (tests/matrix/run.py, `-m smoke`)")
    config.addinivalue_line("markers", "main_thread_counters: checks counters the filter bumps on Envoy's main "
                            "thread; skipped on an Envoy whose dynamic-module ABI has none (1.38)")
    matrix_report.register(config)
    order.register(config)
    needed = (stack.ENVOY, stack.SLUICE) + ((stack.FILTER,) if stack.FILTER_BUILD != "none" else ())
    missing = [p for p in needed if not os.path.exists(p)]
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    if missing:
        pytest.exit(f"sluice e2e: missing {', '.join(missing)}; run tests/suites/20-envoy.sh", returncode=2)
    config.pluginmanager.register(builds.NativePass(_E2E_DIR, renders_sluice, WASM_ONLY, WASM_ONLY_TESTS),
                                  "sluice-native-pass-e2e")


@pytest.fixture(scope="session")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def redis(tmp):
    proc, port = stack.start_redis(tmp)
    yield port
    proc.stop()


@pytest.fixture(scope="session")
def backend(tmp, redis):
    b = stack.Backend(tmp, redis).start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def upstream():
    yield from stack.running_upstream()


TIMEOUT_MS = 250


@pytest.fixture(scope="session")
def envoy(tmp, backend, upstream):
    e = stack.Envoy(tmp, "e2e.yaml",
                    {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream, "TIMEOUT_MS": TIMEOUT_MS},
                    ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]).start()
    yield e
    e.stop()


RLS_LISTENERS = ["RLS_OPEN_PORT", "RLS_CLOSED_PORT"]
# The ratelimit filter's timeout for the session's Envoy: generous, since a timeout on the fail-open
# listener would pass a request the tests expect denied (the failure test uses its own, short one).
RLS_TIMEOUT = "1s"


@pytest.fixture(scope="session")
def rls_backend(tmp, redis):
    """A second backend on the session's redis-server that also serves Envoy's rate limit service
    (gRPC) on its gRPC listener (--grpc-listen). Exact counts are under test here, not latency: a
    1 s Redis timeout, so one slow EVALSHA on a loaded machine is not an UNAVAILABLE that fails
    open."""
    b = stack.Backend(tmp, redis, rls=True, extra_args=["--redis-timeout-ms", "1000"]).start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def rls_envoy(tmp, rls_backend, upstream):
    """Envoy with its native ratelimit filter (envoy/rls.yaml) calling rls_backend over gRPC."""
    e = stack.Envoy(tmp, "rls.yaml", {"RLS_PORT": rls_backend.rls_port, "UPSTREAM_PORT": upstream,
                                      "RLS_TIMEOUT": RLS_TIMEOUT}, RLS_LISTENERS).start()
    yield e
    e.stop()


def pytest_collection_modifyitems(config, items):
    if stack.main_thread_counters():
        return
    skip = pytest.mark.skip(reason="Envoy's dynamic-module ABI here has no configuration-level counters "
                            "(Envoy 1.38): the native module's main-thread counts are dropped")
    for item in items:
        if item.get_closest_marker("main_thread_counters"):
            item.add_marker(skip)
