"""Reliability suite: faults (Redis killed, paused, restarted empty; backend killed), bad input,
foreign data in Redis, the security walk, and a bounded soak, through real Envoy, the real
`sluice` binary and real redis-server processes. Reuses tests/e2e/stack.py; every test module
starts the processes it breaks, so nothing leaks between tests."""

import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e"))
import rstack  # noqa: E402
import stack  # noqa: E402


def pytest_configure(config):
    missing = [p for p in (stack.ENVOY, stack.SLUICE, stack.WASM) if not os.path.exists(p)]
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if missing:
        pytest.exit(f"sluice reliability: missing {', '.join(missing)}; run tests/suites/50-reliability.sh",
                    returncode=2)


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
    server, port = stack.start_upstream()
    yield port
    server.shutdown()
    server.server_close()
