"""Reliability suite: faults (Redis killed, paused, restarted empty; backend killed), bad input,
foreign data in Redis, the security walk, and a bounded soak, through real Envoy, the real
`sluice` binary and real redis-server processes. Reuses tests/e2e/stack.py; every test module
starts the processes it breaks, so nothing leaks between tests.

Every Envoy is a stack.Envoy, so SLUICE_FILTER_BUILD=native runs it with the dynamic module
instead of the wasm filter, as in tests/e2e. tests/suites/50-reliability.sh runs the suite
twice; the native pass runs only the tests whose Envoys load the sluice filter (`runs_native`
below, checked by the wasm pass: tests/e2e/builds.py). A new test file needs no entry here."""

import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e"))
import builds  # noqa: E402
import order  # noqa: E402
import rstack  # noqa: E402
import stack  # noqa: E402


def runs_native(item):
    """Whether the native pass runs a test: only when the code it can reach (its function, its
    fixtures, and the helpers they call: builds.reachable_sources) names a config of envoy/ that
    loads the sluice filter. Most of this suite starts no Envoy (bad input, schemathesis, the
    security walk, foreign keys, Redis failover), and the native pass would only repeat it."""
    return True in builds.verdicts(builds.reachable_sources(item))


# The long stalls run in the wasm pass only. What they add to the 15 s stall (which both passes
# run) is the backend's: the stall gate's floor windows (30 s each, backend/src/deadline/stall.rs)
# outlived, and a gate that kept its clock offset through 90 s without traffic. The filter's part
# (give up after its timeout, pass unchecked, name the given-up decision in its report) is the
# same in a 15 s stall as in a 90 s one, and the native pass checks it there; the two saved about
# 3.5 min of the test command.
WASM_ONLY_TESTS = ("test_a_90_s_stall_under_load", "test_a_20_s_stall_after_90_s_without_traffic")


def pytest_configure(config):
    missing = [p for p in (stack.ENVOY, stack.SLUICE, stack.FILTER) if not os.path.exists(p)]
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if missing:
        pytest.exit(f"sluice reliability: missing {', '.join(missing)}; run tests/suites/50-reliability.sh",
                    returncode=2)
    config.pluginmanager.register(builds.NativePass(HERE, runs_native, wasm_only_tests=WASM_ONLY_TESTS), "sluice-native-pass-reliability")
    order.register(config)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("rel")


@pytest.fixture(scope="module")
def redis(tmp):
    """A redis-server of this test module's own (modules break theirs in different ways)."""
    r = rstack.Redis(tmp).start()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def upstream():
    yield from stack.running_upstream()
