"""sluice through a real Envoy, a real `sluice` backend and a real redis-server."""

import http.client
import json
import re
import time
import uuid

import pytest
import requests

import stack

HOUR = {"count": 1, "period": "1h"}


def user():
    return f"u-{uuid.uuid4().hex[:12]}"


def get(envoy, path, headers=None, listener="LISTEN_OPEN_PORT"):
    return requests.get(envoy.url(listener) + path, headers=headers or {}, timeout=10)


def raw_get(envoy, path, header_lines):
    """GET with exact header bytes (repeats and non-UTF-8 allowed) through http.client."""
    conn = http.client.HTTPConnection("127.0.0.1", envoy.ports["LISTEN_OPEN_PORT"], timeout=10)
    try:
        conn.putrequest("GET", path)
        for name, value in header_lines:
            conn.putheader(name, value)
        conn.endheaders()
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def assert_429(r, action, capacity):
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1
    assert re.fullmatch(rf'"{action}";q={capacity};w=\d+', r.headers["ratelimit-policy"])
    assert re.fullmatch(rf'"{action}";r=0;t=\d+', r.headers["ratelimit"])
    assert re.fullmatch(rf"{capacity}, {capacity};w=\d+", r.headers["x-ratelimit-limit"])
    assert r.headers["x-ratelimit-remaining"] == "0"
    assert int(r.headers["x-ratelimit-reset"]) >= 1
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == 429 and body["action"] == action
    assert action in body["detail"]


@pytest.mark.smoke
def test_one_user_gets_exactly_capacity_and_another_user_is_unaffected(envoy, backend):
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    alice, bob = user(), user()
    responses = [get(envoy, "/limited/post", {"x-user": alice}) for _ in range(12)]
    codes = [r.status_code for r in responses]
    assert codes == [200] * 5 + [429] * 7, codes
    # Allowed responses carry the rate-limit headers, remaining counting down.
    assert [r.headers["x-ratelimit-remaining"] for r in responses[:5]] == ["4", "3", "2", "1", "0"]
    assert responses[0].headers["ratelimit-policy"].startswith('"e2e_limited";q=5;w=')
    assert "retry-after" not in responses[0].headers
    for r in responses[5:]:
        assert_429(r, "e2e_limited", 5)
    # The upstream saw the five allowed requests, not the denied ones.
    assert responses[0].json()["path"] == "/limited/post"
    r = get(envoy, "/limited/post", {"x-user": bob})
    assert r.status_code == 200 and r.headers["x-ratelimit-remaining"] == "4"


def test_fail_closed_listener_limits_the_same_way(envoy, backend):
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    carol = user()
    codes = [get(envoy, "/limited/x", {"x-user": carol}, "LISTEN_CLOSED_PORT").status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2


@pytest.mark.smoke
def test_unmatched_request_passes_untouched(envoy, backend):
    before = backend.decisions("e2e_limited")
    r = get(envoy, "/free/thing", {"x-user": user()})
    assert r.status_code == 200
    assert not any(h.startswith(("ratelimit", "x-ratelimit", "x-sluice")) for h in r.headers)
    assert backend.decisions("e2e_limited") == before


def test_rule_changes_through_the_admin_api_take_effect_within_a_second(envoy, backend):
    pid = envoy.proc.popen.pid
    backend.put_rule({"action": "e2e_rule", "algorithm": "gcra", "capacity": 100, "rate": HOUR})
    dave = user()
    assert get(envoy, "/rule/x", {"x-user": dave}).status_code == 200

    def within_a_second(want):
        start = time.monotonic()
        while time.monotonic() - start < 1.0:
            r = get(envoy, "/rule/x", {"x-user": dave})
            if r.status_code == want:
                return r, time.monotonic() - start
        pytest.fail(f"still not {want} 1 s after the rule change")

    # Tighten: capacity 1 (one already used) denies at once.
    backend.put_rule({"action": "e2e_rule", "algorithm": "gcra", "capacity": 1, "rate": HOUR})
    r, took = within_a_second(429)
    assert r.headers["ratelimit-policy"].startswith('"e2e_rule";q=1;')
    # Loosen again: the denial cache holds a denial at most max_ttl_ms (600 in e2e.yaml).
    backend.put_rule({"action": "e2e_rule", "algorithm": "gcra", "capacity": 50, "rate": HOUR})
    r, took = within_a_second(200)
    assert r.headers["ratelimit-policy"].startswith('"e2e_rule";q=50;')
    assert envoy.proc.alive() and envoy.proc.popen.pid == pid, "Envoy was not restarted"


@pytest.mark.smoke
def test_denied_keys_are_answered_from_the_cache_without_callouts(envoy, backend):
    backend.put_rule({"action": "e2e_cached", "algorithm": "gcra", "capacity": 1, "rate": HOUR})
    erin = user()
    assert get(envoy, "/cached/x", {"x-user": erin}).status_code == 200
    denied_at = time.monotonic()
    first = get(envoy, "/cached/x", {"x-user": erin})
    assert_429(first, "e2e_cached", 1)
    assert "x-sluice-cache" not in first.headers, "the first denial comes from the backend"
    calls_before = backend.decisions("e2e_cached")
    cached_before = envoy.stats().get("wasmcustom.sluice.cached_denials", 0)
    # Fresh connections, so requests land on both Envoy workers: the cache is shared data.
    cached = [get(envoy, "/cached/x", {"x-user": erin}) for _ in range(5)]
    assert time.monotonic() - denied_at < 0.55, "too slow to stay inside the 600 ms cache bound"
    for r in cached:
        assert_429(r, "e2e_cached", 1)
        assert r.headers["x-sluice-cache"] == "hit"
    assert backend.decisions("e2e_cached") == calls_before, "the backend was called for a cached denial"
    assert envoy.stats()["wasmcustom.sluice.cached_denials"] == cached_before + 5
    # Another key of the same action still reaches the backend.
    assert get(envoy, "/cached/x", {"x-user": user()}).status_code == 200
    assert backend.decisions("e2e_cached") == calls_before + 1


def test_shadow_mode_passes_and_says_it_would_deny(envoy, backend):
    backend.put_rule({"action": "e2e_shadow", "algorithm": "fixed_window", "capacity": 1, "window": "1h",
                      "mode": "shadow"})
    frank = user()
    assert get(envoy, "/shadow/x", {"x-user": frank}).status_code == 200
    r = get(envoy, "/shadow/x", {"x-user": frank})
    assert r.status_code == 200
    assert r.headers["x-sluice-shadow"] == "would-deny"
    assert r.json()["headers"]["x-sluice-shadow"] == "would-deny", "the upstream is told too"


def test_an_action_without_a_rule_follows_unknown_action(envoy):
    r = get(envoy, "/norule/x")
    assert r.status_code == 200
    assert r.headers["x-sluice-unknown-action"] == "allow"


@pytest.mark.parametrize("variant", ["missing_or_empty", "ten_kb", "non_utf8", "repeated"])
def test_odd_key_headers_are_still_limited(envoy, backend, variant):
    # Each variant has its own keys (a fresh tag), except missing/empty: the one `anonymous` key,
    # used by this test only, on this session's fresh Redis.
    backend.put_rule({"action": "e2e_keys", "algorithm": "gcra", "capacity": 3, "rate": HOUR})
    tag = uuid.uuid4().hex[:8].encode()
    variants = {
        # Missing and empty share the `anonymous` bucket: neither is a free pass.
        "missing_or_empty": [[], [("x-user", b"")]] * 4,
        "ten_kb": [[("x-user", tag + b"k" * 10240)]] * 8,
        "non_utf8": [[("x-user", tag + b"\xff\xfe\xc3(")]] * 8,
        "repeated": [[("x-user", tag + b"a"), ("x-user", tag + b"b")]] * 8,
    }
    codes = [raw_get(envoy, "/keys/x", lines) for lines in variants[variant]]
    assert codes.count(200) == 3 and codes.count(429) == 5, (variant, codes)
