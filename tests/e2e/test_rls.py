"""Envoy's native rate limit filter (envoy.filters.http.ratelimit, envoy/rls.yaml) asking the real
`sluice` backend over gRPC (RLS v3, on its gRPC listener, --grpc-listen) on a real redis-server.
No wasm module: the descriptors Envoy builds from each route's `rate_limits` are mapped to
sluice's (action, key) by core/src/descriptor.rs, and the answer's headers come from Envoy
(X-RateLimit-*) and from sluice (RateLimit-Policy, RateLimit, Retry-After)."""

import http.client
import random
import re
import time
import uuid

import pytest
import requests

import stack

HOUR = {"count": 1, "period": "1h"}
OPEN, CLOSED = "RLS_OPEN_PORT", "RLS_CLOSED_PORT"
# The failure test's filter timeout (RLS_TIMEOUT in envoy/rls.yaml), and how much later than it an
# answer may come on a loaded 2-core machine (latency is not under test, only that nothing waits
# for much longer).
RLS_TIMEOUT_S = 0.25
SLACK_S = 0.75


def user():
    return f"u-{uuid.uuid4().hex[:12]}"


_used_ips = set()


def client_ip():
    """A loopback address of its own (127.0.0.0/8 all reaches Envoy on 127.0.0.1): a fresh
    remote_address for each test, so per-IP buckets do not leak between tests."""
    while True:
        ip = f"127.{random.randint(1, 254)}.{random.randint(0, 254)}.{random.randint(2, 254)}"
        if ip not in _used_ips:
            _used_ips.add(ip)
            return ip


def get(envoy, path, user_id=None, listener=OPEN, headers=None):
    h = dict(headers or {})
    if user_id is not None:
        h["x-user-id"] = user_id
    return requests.get(envoy.url(listener) + path, headers=h, timeout=10)


class Answer:
    def __init__(self, status, headers, body):
        self.status_code = status
        self.headers = headers
        self.body = body


def get_from(envoy, ip, path, headers=None, listener=OPEN):
    """GET from the source address `ip` (what Envoy's remote_address action sees)."""
    conn = http.client.HTTPConnection("127.0.0.1", envoy.ports[listener], timeout=10, source_address=(ip, 0))
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        body = r.read()
        return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, body)
    finally:
        conn.close()


def timed_get(envoy, path, user_id, listener):
    start = time.monotonic()
    r = get(envoy, path, user_id, listener)
    return r, time.monotonic() - start


def assert_rls_429(r, action, capacity):
    """A denial by Envoy's filter on sluice's OVER_LIMIT: Envoy's own status and X-RateLimit-*
    (from DescriptorStatus), sluice's IETF headers and Retry-After (response_headers_to_add)."""
    assert r.status_code == 429, r.text
    assert r.headers["x-envoy-ratelimited"] == "true"
    assert int(r.headers["retry-after"]) >= 1
    assert re.search(rf'"{action}";q={capacity};w=\d+', r.headers["ratelimit-policy"]), r.headers
    assert re.search(rf'"{action}";r=0;t=\d+', r.headers["ratelimit"]), r.headers
    assert r.headers["x-ratelimit-remaining"] == "0"
    assert re.match(rf"{capacity}(,|$)", r.headers["x-ratelimit-limit"]), r.headers
    assert int(r.headers["x-ratelimit-reset"]) >= 1


@pytest.mark.smoke
def test_one_user_gets_exactly_capacity_then_429_with_headers(rls_envoy, rls_backend):
    rls_backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    alice, bob = user(), user()
    responses = [get(rls_envoy, "/user/post", alice) for _ in range(9)]
    codes = [r.status_code for r in responses]
    assert codes == [200] * 5 + [429] * 4, codes
    # Allowed answers come from the upstream, with Envoy's X-RateLimit-* counting down and
    # sluice's RateLimit-Policy / RateLimit.
    assert [r.headers["x-ratelimit-remaining"] for r in responses[:5]] == ["4", "3", "2", "1", "0"]
    for r in responses[:5]:
        assert r.json()["path"] == "/user/post"
        assert re.match(r"5(,|$)", r.headers["x-ratelimit-limit"]), r.headers
        assert r.headers["ratelimit-policy"].startswith('"user";q=5;w=')
        assert "retry-after" not in r.headers and "x-envoy-ratelimited" not in r.headers
    for r in responses[5:]:
        assert_rls_429(r, "user", 5)
    # Another user has a bucket of their own.
    r = get(rls_envoy, "/user/post", bob)
    assert r.status_code == 200 and r.headers["x-ratelimit-remaining"] == "4"


def test_fail_closed_listener_limits_the_same_way(rls_envoy, rls_backend):
    rls_backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    carol = user()
    codes = [get(rls_envoy, "/user/x", carol, CLOSED).status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2, codes


def test_per_ip_limit_from_remote_address(rls_envoy, rls_backend):
    rls_backend.put_rule({"action": "remote_address", "algorithm": "gcra", "capacity": 3, "rate": HOUR})
    ip, other = client_ip(), client_ip()
    answers = [get_from(rls_envoy, ip, "/ip/x") for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 3 + [429] * 2
    assert answers[-1].headers["x-envoy-ratelimited"] == "true"
    assert '"remote_address";r=0;' in answers[-1].headers["ratelimit"]
    # The address is the connection's peer: a client-sent x-forwarded-for changes nothing.
    spoofed = get_from(rls_envoy, ip, "/ip/x", {"x-forwarded-for": client_ip()})
    assert spoofed.status_code == 429
    assert get_from(rls_envoy, other, "/ip/x").status_code == 200


def test_a_missing_user_header_is_limited_per_ip_not_a_free_pass(rls_envoy, rls_backend):
    rls_backend.put_rule({"action": "user_anonymous", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
    ip = client_ip()
    codes = [get_from(rls_envoy, ip, "/user/x").status_code for _ in range(4)]
    assert codes == [200, 200, 429, 429], codes
    # With the header, the request is the user's, not the address's.
    r = get_from(rls_envoy, ip, "/user/x", {"x-user-id": user()})
    assert r.status_code == 200


def test_two_descriptors_one_over_limit_is_429(rls_envoy, rls_backend):
    # /reply/ sends (generic_key reply, user U) and (user U): two decisions, 429 if either is over.
    rls_backend.put_rule({"action": "reply", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
    rls_backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 100, "rate": HOUR})
    dan = user()
    answers = [get(rls_envoy, "/reply/x", dan) for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 429, 429]
    denied = answers[2]
    assert denied.headers["x-envoy-ratelimited"] == "true"
    assert '"reply";r=0;' in denied.headers["ratelimit"], denied.headers
    # Envoy's X-RateLimit-* report the tightest descriptor: the one that is over.
    assert denied.headers["x-ratelimit-remaining"] == "0"
    assert int(denied.headers["retry-after"]) >= 1
    # A refused request consumes nothing in any descriptor: dan's per-user bucket paid for the two
    # requests that passed, not for the two refused.
    r = get(rls_envoy, "/user/x", dan)
    assert r.status_code == 200 and r.headers["x-ratelimit-remaining"] == "97", r.headers
    # The other way round: the per-user descriptor over, the reply one far from it.
    rls_backend.put_rule({"action": "reply", "algorithm": "gcra", "capacity": 100, "rate": HOUR})
    rls_backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
    eve = user()
    answers = [get(rls_envoy, "/reply/x", eve) for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert '"user";r=0;' in answers[2].headers["ratelimit"], answers[2].headers


def test_rule_changes_through_the_admin_api_apply_within_a_second(rls_envoy, rls_backend):
    pid = rls_envoy.proc.popen.pid
    rls_backend.put_rule({"action": "rls_rule", "algorithm": "gcra", "capacity": 100, "rate": HOUR})
    fay = user()
    for _ in range(3):  # warm: connections to the upstream and to sluice are open
        assert get(rls_envoy, "/rule/x", fay).status_code == 200

    def within_a_second(want):
        start = time.monotonic()
        while time.monotonic() - start < 1.0:
            r = get(rls_envoy, "/rule/x", fay)
            if r.status_code == want:
                return r
        pytest.fail(f"still not {want} 1 s after the rule change")

    # Tighten: capacity 2 with three already used denies at once.
    rls_backend.put_rule({"action": "rls_rule", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
    r = within_a_second(429)
    assert r.headers["ratelimit-policy"].startswith('"rls_rule";q=2;')
    # Loosen: there is no denial cache on this path, the next request passes.
    rls_backend.put_rule({"action": "rls_rule", "algorithm": "gcra", "capacity": 50, "rate": HOUR})
    r = within_a_second(200)
    assert r.headers["ratelimit-policy"].startswith('"rls_rule";q=50;')
    assert rls_envoy.proc.alive() and rls_envoy.proc.popen.pid == pid, "Envoy was not restarted"


def test_shadow_rule_passes_and_says_it_would_deny(rls_envoy, rls_backend):
    rls_backend.put_rule({"action": "rls_shadow", "algorithm": "fixed_window", "capacity": 1, "window": "1h",
                          "mode": "shadow"})
    gus = user()
    first = get(rls_envoy, "/shadow/x", gus)
    assert first.status_code == 200 and "x-sluice-shadow" not in first.headers
    r = get(rls_envoy, "/shadow/x", gus)
    assert r.status_code == 200
    assert r.headers["x-sluice-shadow"] == "would-deny"
    assert "x-envoy-ratelimited" not in r.headers


def test_an_action_without_a_rule_answers_ok(rls_envoy, rls_backend):
    rls_backend.delete_rule("rls_norule")
    before = rls_envoy.stats("ratelimit").get("cluster.upstream.ratelimit.ok", 0)
    codes = [get(rls_envoy, "/norule/x", "hal", listener=OPEN).status_code for _ in range(3)]
    assert codes == [200] * 3
    assert rls_envoy.stats("ratelimit")["cluster.upstream.ratelimit.ok"] >= before + 3, "answered OK, not an error"


def test_an_unmetered_route_passes_untouched(rls_envoy):
    r = get(rls_envoy, "/free/x", user())
    assert r.status_code == 200
    assert not any(h.startswith(("ratelimit", "x-ratelimit", "x-sluice", "retry-after")) for h in r.headers)


def test_a_huge_user_id_is_still_limited(rls_envoy, rls_backend):
    # A 10 KB header value becomes a 10 KB descriptor value: sluice bounds the key (not an error,
    # which failure_mode_deny: false would turn into a free pass).
    rls_backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 3, "rate": HOUR})
    huge = uuid.uuid4().hex + "k" * 10240
    codes = [get(rls_envoy, "/user/x", huge).status_code for _ in range(5)]
    assert codes == [200] * 3 + [429] * 2, codes
    assert rls_envoy.stats("ratelimit").get("cluster.upstream.ratelimit.failure_mode_allowed", 0) == 0


@pytest.mark.smoke
def test_redis_stopped_fails_closed_and_open_within_the_timeout(tmp, upstream):
    """Redis stopped under a running backend: sluice answers gRPC UNAVAILABLE within its Redis
    timeout; Envoy's failure_mode_deny: true answers 500 (status_on_error's default), false lets
    the request through, each within the filter's timeout plus slack."""
    redis_proc, redis_port = stack.start_redis(tmp)
    backend = stack.Backend(tmp, redis_port, rls=True)
    envoy = stack.Envoy(tmp, "rls.yaml", {"RLS_PORT": backend.rls_port, "UPSTREAM_PORT": upstream,
                                          "RLS_TIMEOUT": f"{RLS_TIMEOUT_S}s"}, [OPEN, CLOSED])
    try:
        backend.start()
        backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 1000, "rate": HOUR})
        envoy.start()
        # Warm up both listeners (connections to sluice and the upstream open, Redis scripts
        # loaded): until each has had three answers from sluice (Envoy's X-RateLimit-* present),
        # so a slow first call on a loaded machine is not mistaken for the failure under test.
        for listener in (OPEN, CLOSED):
            answered = []

            def three_answers():
                r = get(envoy, "/user/x", "before-stop", listener)
                if r.status_code == 200 and "x-ratelimit-remaining" in r.headers:
                    answered.append(r)
                return len(answered) >= 3

            stack.wait_until(three_answers, f"three answers from sluice on {listener}", timeout=20)
        redis_proc.stop()
        stack.wait_until(lambda: not stack.port_open(redis_port), "redis-server stopped", timeout=10)
        before = envoy.stats("ratelimit")
        for _ in range(3):
            r, took = timed_get(envoy, "/user/x", "fail-closed", CLOSED)
            assert r.status_code == 500, (r.status_code, r.text)
            assert "x-envoy-ratelimited" not in r.headers
            assert took < RLS_TIMEOUT_S + SLACK_S, took

            r, took = timed_get(envoy, "/user/x", "fail-open", OPEN)
            assert r.status_code == 200, (r.status_code, r.text)
            assert r.json()["path"] == "/user/x", "the upstream answered"
            assert took < RLS_TIMEOUT_S + SLACK_S, took
        after = envoy.stats("ratelimit")
        delta = lambda name: after.get(name, 0) - before.get(name, 0)  # noqa: E731
        assert delta("cluster.upstream.ratelimit.error") == 6, after
        assert delta("cluster.upstream.ratelimit.failure_mode_allowed") == 3, after
        assert backend.proc.alive(), "the backend survives a lost store"
    finally:
        envoy.stop()
        backend.stop()
        redis_proc.stop()


def test_sluice_slower_than_the_timeout_fails_closed_and_open_at_the_timeout(tmp, upstream):
    """A rate limit service that accepts connections and never answers: Envoy gives up after its
    own timeout and applies failure_mode_deny the same way (500 / pass)."""
    hole, port = stack.start_black_hole()
    envoy = stack.Envoy(tmp, "rls.yaml", {"RLS_PORT": port, "UPSTREAM_PORT": upstream,
                                          "RLS_TIMEOUT": f"{RLS_TIMEOUT_S}s"}, [OPEN, CLOSED])
    try:
        envoy.start()
        for _ in range(2):
            r, took = timed_get(envoy, "/user/x", "slow-closed", CLOSED)
            assert r.status_code == 500, (r.status_code, r.text)
            assert RLS_TIMEOUT_S * 0.9 <= took < RLS_TIMEOUT_S + SLACK_S, took

            r, took = timed_get(envoy, "/user/x", "slow-open", OPEN)
            assert r.status_code == 200 and r.json()["path"] == "/user/x", r.text
            assert RLS_TIMEOUT_S * 0.9 <= took < RLS_TIMEOUT_S + SLACK_S, took
        stats = envoy.stats("ratelimit")
        assert stats["cluster.upstream.ratelimit.error"] == 4, stats
        assert stats["cluster.upstream.ratelimit.failure_mode_allowed"] == 2, stats
    finally:
        envoy.stop()
        hole.close()
