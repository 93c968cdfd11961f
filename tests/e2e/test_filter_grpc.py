"""The sluice filter's gRPC callout (`backend.protocol: grpc`) through a real Envoy to the real
backend's gRPC listener (--grpc-listen, h2c) on a real redis-server: exactly capacity admitted, then
429 with the same headers as the HTTP callout, the cached 429, quantity as hits_addend, shadow and
no-rule answers, and the failure mode with the backend down.

This module starts its own redis-server and backend (with --grpc-listen), so rules put here never
touch the session backend's; envoy/e2e_grpc.yaml uses e2e.yaml's actions, and a second Envoy from
e2e.yaml on the same backend gives the HTTP callout to compare with."""

import re
import time
import uuid

import pytest
import requests

import stack

TIMEOUT_MS = 250
HOUR = {"count": 1, "period": "1h"}
# Headers whose values depend on the moment of the answer (seconds to a reset or retry).
TIMED = {"ratelimit", "x-ratelimit-reset", "retry-after"}
RATE_HEADERS = ["ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining",
                "x-ratelimit-reset", "retry-after"]


class RlsBackend(stack.Backend):
    """The real `sluice` binary; these tests call its gRPC listener (`rls_port`, on a free port in
    every stack.Backend), whose name this class kept from when that listener was off by default."""


def grpc_envoy(tmp, rls_port, upstream):
    """An Envoy (not started) on e2e_grpc.yaml: the filter's unary gRPC protocol to `rls_port`."""
    return stack.Envoy(tmp, "e2e_grpc.yaml",
                       {"RLS_PORT": rls_port, "UPSTREAM_PORT": upstream, "TIMEOUT_MS": TIMEOUT_MS, "PROTOCOL": "grpc"},
                       ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])

@pytest.fixture(scope="module")
def grpc_stack(tmp, upstream):
    redis, redis_port = stack.start_redis(tmp)
    backend = RlsBackend(tmp, redis_port).start()
    grpc = grpc_envoy(tmp, backend.rls_port, upstream).start()
    http = stack.Envoy(tmp, "e2e.yaml",
                       {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream, "TIMEOUT_MS": TIMEOUT_MS},
                       ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]).start()
    yield backend, grpc, http
    for proc in (http, grpc, backend):
        proc.stop()
    redis.stop()


@pytest.fixture(scope="module")
def down_envoy(tmp, upstream):
    """The gRPC config pointed at a port nothing listens on: the backend is down."""
    e = grpc_envoy(tmp, stack.free_port(), upstream).start()
    yield e
    e.stop()


def user():
    return f"g-{uuid.uuid4().hex[:12]}"


def get(envoy, path, who, listener="LISTEN_OPEN_PORT"):
    return requests.get(envoy.url(listener) + path, headers={"x-user": who}, timeout=10)


def shape(r):
    """The rate-limit headers of a response: exact values, except the timed ones as present."""
    return {h: (r.headers[h] if h not in TIMED else "present") for h in RATE_HEADERS if h in r.headers}


@pytest.mark.smoke
def test_exactly_capacity_then_429s_with_the_same_headers_as_the_http_callout(grpc_stack):
    backend, grpc, http = grpc_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    via_grpc = [get(grpc, "/limited/x", user_g) for user_g in [user()] for _ in range(8)]
    via_http = [get(http, "/limited/x", user_h) for user_h in [user()] for _ in range(8)]
    assert [r.status_code for r in via_grpc] == [200] * 5 + [429] * 3
    assert [r.status_code for r in via_http] == [200] * 5 + [429] * 3
    assert [r.headers["x-ratelimit-remaining"] for r in via_grpc[:5]] == ["4", "3", "2", "1", "0"]
    for g, h in zip(via_grpc, via_http):
        assert shape(g) == shape(h), (g.headers, h.headers)
        assert "x-sluice-failure" not in g.headers
    # The first 429 is the backend's, answered at the same moment as the HTTP one: same wait.
    g, h = via_grpc[5], via_http[5]
    assert abs(int(g.headers["retry-after"]) - int(h.headers["retry-after"])) <= 1
    assert g.headers["content-type"] == h.headers["content-type"] == "application/problem+json"
    gb, hb = g.json(), h.json()
    assert gb["action"] == hb["action"] == "e2e_limited"
    assert {k: v for k, v in gb.items() if k not in ("detail", "retry_after_ms")} == \
        {k: v for k, v in hb.items() if k not in ("detail", "retry_after_ms")}
    assert abs(gb["retry_after_ms"] - hb["retry_after_ms"]) < 1000
    # The later 429s came from the denial cache (no callout), as over HTTP.
    assert via_grpc[6].headers.get("x-sluice-cache") == "hit"
    assert via_http[6].headers.get("x-sluice-cache") == "hit"
    # The upstream saw the admitted requests.
    assert via_grpc[0].json()["path"] == "/limited/x"


def test_the_cached_429_is_answered_without_a_callout(grpc_stack):
    backend, grpc, _ = grpc_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
    who = user()
    assert [get(grpc, "/limited/c", who).status_code for _ in range(3)] == [200, 200, 429]
    before = backend.decisions("e2e_limited")
    stats_before = grpc.stats()
    cached = [get(grpc, "/limited/c", who) for _ in range(5)]
    assert all(r.status_code == 429 and r.headers.get("x-sluice-cache") == "hit" for r in cached)
    assert all(int(r.headers["retry-after"]) >= 1 for r in cached)
    assert backend.decisions("e2e_limited") == before, "no callout reached the backend"
    after = grpc.stats()
    name = next(k for k in after if k.endswith("sluice.cached_denials"))
    assert after[name] - stats_before.get(name, 0) == 5


def test_the_quantity_is_the_hits_addend(grpc_stack):
    backend, grpc, _ = grpc_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    who = user()
    codes = [get(grpc, "/heavy/x", who).status_code for _ in range(3)]
    assert codes == [200, 200, 429], "2 + 2 of 5, then 2 more do not fit"
    r = get(grpc, "/limited/x", who)
    assert r.status_code == 200 and r.headers["x-ratelimit-remaining"] == "0"


def test_fail_closed_listener_limits_the_same_way(grpc_stack):
    backend, grpc, _ = grpc_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 3, "rate": HOUR})
    who = user()
    codes = [get(grpc, "/limited/y", who, "LISTEN_CLOSED_PORT").status_code for _ in range(5)]
    assert codes == [200] * 3 + [429] * 2


def test_shadow_and_no_rule(grpc_stack):
    backend, grpc, _ = grpc_stack
    backend.put_rule({"action": "e2e_shadow", "algorithm": "gcra", "capacity": 1, "rate": HOUR,
                      "mode": "shadow"})
    who = user()
    rs = [get(grpc, "/shadow/x", who) for _ in range(3)]
    assert [r.status_code for r in rs] == [200, 200, 200]
    assert "x-sluice-shadow" not in rs[0].headers
    assert rs[1].headers.get("x-sluice-shadow") == "would-deny"
    assert rs[1].json()["headers"].get("x-sluice-shadow") == "would-deny", "sent upstream too"
    r = get(grpc, "/norule/x", who)
    assert r.status_code == 200 and r.headers.get("x-sluice-unknown-action") == "allow"


@pytest.mark.smoke
def test_backend_down_follows_the_failure_mode(down_envoy):
    for listener, status in (("LISTEN_OPEN_PORT", 200), ("LISTEN_CLOSED_PORT", 503)):
        started = time.monotonic()
        r = get(down_envoy, "/limited/x", user(), listener)
        elapsed = time.monotonic() - started
        assert r.status_code == status, r.text
        reason = r.headers.get("x-sluice-failure")
        assert reason and re.fullmatch(r"grpc_\d+", reason), r.headers
        assert elapsed < TIMEOUT_MS / 1000 + 1.0
        if status == 200:
            assert r.json()["headers"].get("x-sluice-failure") == reason, "told upstream"
        else:
            assert r.headers["content-type"] == "application/problem+json"
    stats = down_envoy.stats()
    assert any(k.endswith("sluice.failures_allow") and v >= 1 for k, v in stats.items()), stats
    assert any(k.endswith("sluice.failures_deny") and v >= 1 for k, v in stats.items()), stats


def test_a_backend_stopped_mid_run_fails_open_then_recovers(tmp, upstream):
    """The RLS listener going away after the filter has an HTTP/2 connection to it."""
    redis, redis_port = stack.start_redis(tmp)
    b = RlsBackend(tmp, redis_port).start()
    e = grpc_envoy(tmp, b.rls_port, upstream).start()
    try:
        b.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 100, "rate": HOUR})
        who = user()
        r = get(e, "/limited/z", who)
        assert r.status_code == 200 and "x-sluice-failure" not in r.headers
        b.stop()
        r = get(e, "/limited/z", who)
        assert r.status_code == 200 and re.fullmatch(r"grpc_\d+", r.headers.get("x-sluice-failure", "")), r.headers
        r = get(e, "/limited/z", who, "LISTEN_CLOSED_PORT")
        assert r.status_code == 503
        b.start()
        stack.wait_until(lambda: "x-sluice-failure" not in get(e, "/limited/z", who).headers,
                         "the filter back on the restarted backend", timeout=10)
    finally:
        e.stop()
        b.stop()
        redis.stop()


def test_an_unknown_grpc_cluster_fails_at_dispatch_and_the_vm_lives_on(tmp, upstream):
    """proxy-wasm's SDK panics (killing the VM) on some hostcall statuses; an unknown cluster
    must come back as a dispatch failure instead, request after request."""
    e = grpc_envoy(tmp, stack.free_port(), upstream)
    e.config.write_text(e.config.read_text().replace('"cluster": "sluice_rls"', '"cluster": "no_such_cluster"'))
    e.start()
    try:
        for _ in range(3):
            r = get(e, "/limited/x", user())
            assert r.status_code == 200 and r.headers.get("x-sluice-failure") == "dispatch", r.headers
        r = get(e, "/limited/x", user(), "LISTEN_CLOSED_PORT")
        assert r.status_code == 503 and r.headers.get("x-sluice-failure") == "dispatch"
    finally:
        e.stop()
