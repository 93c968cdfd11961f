"""Backend stopped or slower than the timeout: fail open passes, fail closed answers 503, each
within the callout timeout plus a small slack. Each case runs its own Envoy pointed at the broken
backend."""

import time

import pytest
import requests

import stack

TIMEOUT_MS = 100
SLACK_S = 0.4
LISTENERS = ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]


def timed_get(url, user):
    start = time.monotonic()
    r = requests.get(url + "/limited/x", headers={"x-user": user}, timeout=10)
    return r, time.monotonic() - start


def check_failure_modes(envoy, reason):
    before = envoy.stats()
    for _ in range(3):
        r, took = timed_get(envoy.url("LISTEN_OPEN_PORT"), "fail-open-user")
        assert r.status_code == 200, r.text
        assert r.headers["x-sluice-failure"] == reason
        assert r.json()["headers"]["x-sluice-failure"] == reason, "the upstream is told too"
        assert took < TIMEOUT_MS / 1000 + SLACK_S, took

        r, took = timed_get(envoy.url("LISTEN_CLOSED_PORT"), "fail-closed-user")
        assert r.status_code == 503, r.text
        assert r.headers["x-sluice-failure"] == reason
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["action"] == "e2e_limited"
        assert took < TIMEOUT_MS / 1000 + SLACK_S, took
    stats = envoy.stats()
    for name in ("failures_allow", "failures_deny"):
        stat = f"wasmcustom.sluice.{name}"
        assert stats[stat] - before.get(stat, 0) == 3, name


@pytest.mark.smoke
def test_backend_stopped(tmp, redis, upstream):
    backend = stack.Backend(tmp, redis).start()
    envoy = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream,
                                          "TIMEOUT_MS": TIMEOUT_MS}, LISTENERS)
    try:
        backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 1000,
                          "rate": {"count": 1, "period": "1h"}})
        envoy.start()
        r, _ = timed_get(envoy.url("LISTEN_CLOSED_PORT"), "before-stop")
        assert r.status_code == 200 and "x-sluice-failure" not in r.headers, "works while the backend runs"
        backend.stop()
        check_failure_modes(envoy, "unavailable")
    finally:
        envoy.stop()
        backend.stop()


def test_backend_slower_than_the_timeout(tmp, upstream):
    hole, port = stack.start_black_hole()
    envoy = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": port, "UPSTREAM_PORT": upstream,
                                          "TIMEOUT_MS": TIMEOUT_MS}, LISTENERS)
    try:
        envoy.start()
        r, took = timed_get(envoy.url("LISTEN_OPEN_PORT"), "slow")
        assert r.status_code == 200 and took >= TIMEOUT_MS / 1000 * 0.9, "the filter waited for the timeout"
        check_failure_modes(envoy, "timeout")
    finally:
        envoy.stop()
        hole.close()
