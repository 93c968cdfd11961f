"""Fixtures: one redis-server, one sluice backend, one upstream and one Envoy for the session;
tests that need a stopped or slow backend start their own Envoy pointed at it."""

import functools
import inspect
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import stack  # noqa: E402


def pytest_configure(config):
    missing = [p for p in (stack.ENVOY, stack.SLUICE, stack.FILTER) if not os.path.exists(p)]
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    if missing:
        pytest.exit(f"sluice e2e: missing {', '.join(missing)}; run tests/suites/20-envoy.sh", returncode=2)


# Tests of what only one build has, skipped on the other (SLUICE_FILTER_BUILD, see stack.py): the
# wasm module's exports (the native build has the exchange stream too: Envoy's main thread keeps it,
# docs/filter.md, "The native build").
WASM_ONLY = ("test_wasm_exports.py",)
# Single tests of what only one build has (none today: the native build keeps the exchange stream
# on Envoy's main thread, with the same backoff, probes and log lines).
WASM_ONLY_TESTS = ()

# The native pass runs the tests that render the sluice filter; a test whose Envoys never load it
# (Envoy's own ratelimit filter -> sluice RLS, say) runs once, in the wasm pass. Decided per test,
# from what it can reach: the Envoy configs (envoy/*.yaml) named in its module, in the e2e helper
# modules that module uses, and in every fixture it depends on (their functions' source). A test
# is skipped only when it names at least one config of envoy/ and none of them has the filter's
# block; a test that names none (its config is built some other way) runs in both passes.
SLUICE_BLOCK = "envoy.filters.http.wasm"
_YAML_NAME = re.compile(r"""["']([A-Za-z0-9_.-]+\.yaml)["']""")
_E2E_DIR = Path(__file__).resolve().parent


def _source(obj):
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=None)
def _config_has_sluice(name):
    """True/False for a config of envoy/ with/without the filter's block; None: not a config there."""
    path = stack.ROOT / "envoy" / name
    if not path.is_file():
        return None
    return SLUICE_BLOCK in path.read_text()


def _module_sources(module):
    """The test module's source and its e2e helper modules' (imported whole or by name)."""
    seen = {module}
    for value in vars(module).values():
        other = value if inspect.ismodule(value) else sys.modules.get(getattr(value, "__module__", None) or "")
        if other is None or other in seen:
            continue
        path = getattr(other, "__file__", None)
        if path and Path(path).resolve().parent == _E2E_DIR:
            seen.add(other)
    return [_source(m) for m in seen]


def renders_sluice(item):
    """Whether a test may render the sluice filter (see above); True when it cannot tell."""
    texts = _module_sources(item.module) if item.module is not None else []
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        texts.extend(_source(d.func) for d in defs)
    verdicts = {_config_has_sluice(n) for t in texts for n in _YAML_NAME.findall(t)} - {None}
    return not verdicts or True in verdicts


def pytest_collection_modifyitems(config, items):
    if stack.FILTER_BUILD != "native":
        return
    skip = pytest.mark.skip(reason="wasm build only (SLUICE_FILTER_BUILD=native)")
    once = pytest.mark.skip(reason="its Envoys never load the sluice filter: runs in the wasm pass only")
    for item in items:
        if item.path.name in WASM_ONLY or item.originalname in WASM_ONLY_TESTS:
            item.add_marker(skip)
        elif not renders_sluice(item):
            item.add_marker(once)


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
    server, port = stack.start_upstream()
    yield port
    server.shutdown()
    server.server_close()


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
