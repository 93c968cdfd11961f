"""All-or-nothing checks (several limits on one request) through a real Envoy
(envoy/e2e_all.yaml), the real backend and
a real redis-server: a route with three checks (per user, per client IP, global) asks ONE callout
(POST /v1/throttle/all); a request is allowed only if every limit allows it, and a denied request
consumes nothing from any of them (exact counts read back from the backend before and after).
Headers list every policy; X-RateLimit-* and Retry-After show the most restrictive; the 429's
problem+json names the limit that denied."""

import uuid

import pytest
import requests

import stack

HOUR = {"count": 1, "period": "1h"}


@pytest.fixture(scope="module")
def all_envoy(tmp, backend):
    e = stack.Envoy(tmp, "e2e_all.yaml", {"BACKEND_PORT": backend.decision_port, "TIMEOUT_MS": 1000},
                    ["LISTEN_OPEN_PORT", "UPSTREAM_PORT"]).start()
    yield e
    e.stop()


def remaining(backend, action, key):
    """The key's standing, read by a quantity-0 peek (changes nothing)."""
    r = requests.post(f"{backend.decision_url}/v1/throttle",
                      json={"action": action, "key": key, "quantity": 0}, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()["remaining"]


def rules(backend, user, ip, everyone):
    for action, capacity in (("e2e_m_user", user), ("e2e_m_ip", ip), ("e2e_m_all", everyone)):
        backend.put_rule({"action": action, "algorithm": "fixed_window", "capacity": capacity, "window": "7d"})


def get(envoy, user):
    return requests.get(envoy.url("LISTEN_OPEN_PORT") + "/multi/x", headers={"x-user": user}, timeout=5)


def reset(backend, action, key):
    r = requests.delete(f"{backend.admin_url}/v1/keys", params={"action": action, "key": key},
                        headers={"authorization": f"Bearer {stack.TOKEN}"}, timeout=5)
    assert r.status_code in (200, 204, 404), r.text


def test_the_third_limit_denying_leaves_the_others_untouched(all_envoy, backend):
    # Per user 5, per IP 100, global 3 (in place of 2000/s, so the test can reach it exactly).
    rules(backend, 5, 100, 3)
    for action, key in (("e2e_m_ip", "127.0.0.1"), ("e2e_m_all", "all")):
        reset(backend, action, key)
    users = [f"m-{uuid.uuid4().hex[:10]}" for _ in range(4)]
    for u in users[:3]:
        r = get(all_envoy, u)
        assert r.status_code == 200, r.text
        assert r.headers["ratelimit-policy"] == \
            '"e2e_m_user";q=5;w=604800, "e2e_m_ip";q=100;w=604800, "e2e_m_all";q=3;w=604800'
    assert r.headers["ratelimit"].startswith('"e2e_m_user";r=4;t=')
    assert r.headers["x-ratelimit-remaining"] == "0", "the global limit has the fewest left"
    before = (remaining(backend, "e2e_m_user", users[3]), remaining(backend, "e2e_m_ip", "127.0.0.1"))
    assert before == (5, 97)
    callouts = backend.metric("sluice_decisions_total", action="e2e_m_all")
    r = get(all_envoy, users[3])
    assert r.status_code == 429, r.text
    assert r.json()["action"] == "e2e_m_all", r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert "retry-after" in r.headers
    assert r.headers["x-ratelimit-limit"].startswith("3, "), r.headers
    assert len(r.headers["ratelimit-policy"].split(", ")) == 3
    # Nothing consumed from the first two limits.
    after = (remaining(backend, "e2e_m_user", users[3]), remaining(backend, "e2e_m_ip", "127.0.0.1"))
    assert after == before, f"{before} -> {after}"
    # One callout decided the request (one denial recorded, for the global limit only).
    assert backend.metric("sluice_decisions_total", action="e2e_m_all", outcome="denied") >= 1
    assert backend.metric("sluice_decisions_total", action="e2e_m_all") == callouts + 1


def test_the_first_limit_denying_leaves_the_others_untouched(all_envoy, backend):
    rules(backend, 2, 100, 1000)
    for action, key in (("e2e_m_ip", "127.0.0.1"), ("e2e_m_all", "all")):
        reset(backend, action, key)
    u = f"m-{uuid.uuid4().hex[:10]}"
    assert [get(all_envoy, u).status_code for _ in range(2)] == [200, 200]
    before = (remaining(backend, "e2e_m_ip", "127.0.0.1"), remaining(backend, "e2e_m_all", "all"))
    assert before == (98, 998)
    for _ in range(3):
        r = get(all_envoy, u)
        assert r.status_code == 429
        assert r.json()["action"] == "e2e_m_user"
        assert r.headers["x-ratelimit-limit"].startswith("2, ")
    after = (remaining(backend, "e2e_m_ip", "127.0.0.1"), remaining(backend, "e2e_m_all", "all"))
    assert after == before
    # Another user still passes: only the first user's limit was spent.
    assert get(all_envoy, f"m-{uuid.uuid4().hex[:10]}").status_code == 200
