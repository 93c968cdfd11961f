"""Keys that hold data sluice did not write: another Redis type where a throttle key lives, garbage
of the right type, or a value changed by someone else between two calls. That one request gets a
clear error naming the key (500 `store_wrong_type`), redis-server and the backend stay up (the
redis-cell module aborts redis-server here), and every other key keeps working. Key layout:
backend/src/store/redis/keys.rs (`<prefix>:{<action>:<subject>}:<algorithm>`, cells
`<prefix>:cell:{<subject>}`, rules `{<prefix>:rules}` and `{<prefix>:rules}:version`)."""

import pytest
import requests

import rstack
import stack

RULES = stack.HOURLY_LIMITS
# What each algorithm keeps (keys.rs and backend/lua/*.lua), and a field it reads.
KIND = {"gcra": "string", "fixed_window": "hash", "sliding_log": "list", "sliding_window": "hash",
        "leaky_bucket": "hash", "token_bucket": "hash"}
FIELD = {"fixed_window": "count", "sliding_window": "current", "leaky_bucket": "level", "token_bucket": "tokens"}


def wrong_type(redis, key, kind):
    """Writes a value of a type the algorithm does not use."""
    redis.cli("DEL", key)
    if kind == "string":
        redis.cli("HSET", key, "foreign", "1")
    else:
        redis.cli("SET", key, "foreign")


def garbage(redis, key, kind, field):
    """Overwrites the state with the right type holding unreadable values."""
    if kind == "string":
        redis.cli("SET", key, "garbage")
    elif kind == "list":
        redis.cli("RPUSH", key, "garbage")
    else:
        redis.cli("HSET", key, field, "-x")


@pytest.fixture(scope="module")
def backend(tmp, redis):
    rules = [{"action": f"fk_{algo}", "algorithm": algo, "capacity": 3, **extra} for algo, extra in RULES.items()]
    yield from rstack.running_backend(tmp, redis, *rules)


def state_key(action, subject, algorithm):
    return f"sluice:{{{action}:{subject}}}:{algorithm}"


def assert_wrong_type(r, key):
    assert r.status_code == 500, r.text
    body = r.json()
    assert body["error"] == "store_wrong_type", body
    assert key in body["message"] and "delete it" in body["message"], body


def assert_all_still_work(redis, backend):
    assert redis.cli("PING") == "PONG", "redis-server is up"
    assert requests.get(backend.decision_url + "/healthz", timeout=5).status_code == 200
    for algo in RULES:
        r = backend.throttle(f"fk_{algo}", rstack.user("bystander"))
        assert r.status_code == 200 and r.json()["allowed"], (algo, r.text)


@pytest.mark.parametrize("algo", list(RULES))
def test_another_type_where_the_state_lives(redis, backend, algo):
    action, subject = f"fk_{algo}", rstack.user("victim")
    key = state_key(action, subject, algo)
    wrong_type(redis, key, KIND[algo])
    for _ in range(2):  # and again: nothing got worse
        assert_wrong_type(backend.throttle(action, subject), key)
    assert_all_still_work(redis, backend)
    redis.cli("DEL", key)
    assert backend.throttle(action, subject).json()["allowed"] is True, "deleting the key heals it"


@pytest.mark.parametrize("algo", list(RULES))
def test_state_overwritten_between_calls(redis, backend, algo):
    action, subject = f"fk_{algo}", rstack.user("victim")
    key = state_key(action, subject, algo)
    assert [backend.throttle(action, subject).json()["allowed"] for _ in range(2)] == [True, True]
    garbage(redis, key, KIND[algo], FIELD.get(algo))
    assert_wrong_type(backend.throttle(action, subject), key)
    assert_all_still_work(redis, backend)
    wrong_type(redis, key, KIND[algo])
    assert_wrong_type(backend.throttle(action, subject), key)
    redis.cli("DEL", key)
    assert [backend.throttle(action, subject).json()["allowed"] for _ in range(4)] == [True, True, True, False]


def test_a_far_future_time_written_by_someone_else_is_a_bounded_denial(redis, backend):
    """A readable but absurd value (a GCRA TAT 10^31 ns ahead): a denial whose retry is clamped
    (the gcra script clamps a stored TAT to 2^63 - 1 ns ahead, beyond any TAT it writes itself),
    not an error or an overflow."""
    subject = rstack.user("future")
    redis.cli("SET", state_key("fk_gcra", subject, "gcra"), "9" * 32)
    body = backend.throttle("fk_gcra", subject).json()
    assert body.get("allowed") is False, body
    assert 0 < body["retry_after_ms"] <= (2**63 - 1) // 10**6 + 1, body


def test_a_foreign_cell_key(redis, backend):
    subject = rstack.user("cell")
    key = f"sluice:cell:{{{subject}}}"
    redis.cli("HSET", key, "a", "b")
    r = requests.post(backend.decision_url + "/v1/cl.throttle",
                      json={"key": subject, "max_burst": 1, "count": 1, "period": 60}, timeout=5)
    assert_wrong_type(r, key)
    assert_all_still_work(redis, backend)


def test_the_rules_key_clobbered(redis, backend):
    """The rules hash replaced by a string: rule writes fail clearly, decisions keep using the
    cached rules, and once the key is deleted the backend publishes its rules again."""
    # In one step: a rules poll between a DEL and a SET would republish in between.
    redis.cli("EVAL", "redis.call('DEL', KEYS[1], KEYS[2]); return redis.call('SET', KEYS[1], 'foreign')",
              "2", "{sluice:rules}", "{sluice:rules}:version")
    assert redis.cli("TYPE", "{sluice:rules}") == "string"
    r = backend.admin("PUT", "/v1/rules/fk_new", json={"algorithm": "gcra", "capacity": 1,
                                                       "rate": {"count": 1, "period": "1h"}})
    assert_wrong_type(r, "{sluice:rules}")
    assert_all_still_work(redis, backend)
    assert len(backend.admin("GET", "/v1/rules").json()["rules"]) == len(RULES), "cached rules still listed"
    redis.cli("DEL", "{sluice:rules}")
    stack.wait_until(lambda: len([k for k in redis.cli("HKEYS", "{sluice:rules}").split() if k != "#version"]) == len(RULES),
                     "rules republished", timeout=5)
    assert "publishing this replica's 6 cached rules again" in backend.log_text()


def test_through_envoy_a_foreign_key_is_that_requests_failure_only(tmp, redis, backend, upstream):
    """The filter sees the 500 as a backend failure for that one request (reason `status_500`)
    and applies the failure mode; other users are limited as usual."""
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 3, "rate": {"count": 1, "period": "1h"}})
    envoy = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream,
                                          "TIMEOUT_MS": 500}, ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]).start()
    try:
        victim = rstack.user("victim")
        wrong_type(redis, state_key("e2e_limited", victim, "gcra"), "string")
        for listener, status in (("LISTEN_OPEN_PORT", 200), ("LISTEN_CLOSED_PORT", 503)):
            r = requests.get(envoy.url(listener) + "/limited/x", headers={"x-user": victim}, timeout=10)
            assert (r.status_code, r.headers.get("x-sluice-failure")) == (status, "status_500"), r.text
        other = rstack.user("other")
        codes = [requests.get(envoy.url("LISTEN_CLOSED_PORT") + "/limited/x", headers={"x-user": other},
                              timeout=10).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
    finally:
        envoy.stop()
