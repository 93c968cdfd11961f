"""Redis killed, restarted (with its data, or empty) and paused, while requests flow through a real
Envoy to the real backend: every request is answered within the filter timeout plus slack, as the
failure mode says (fail open: 200 with `x-sluice-failure`; fail closed: 503), decisions are right
again within 1 s of Redis coming back with no restart of anything else, the rules survive, and a
slow Redis sheds load instead of queueing it."""

import threading
import time

import pytest
import requests

import rstack
import stack

TIMEOUT_MS = 250  # the filter's callout timeout in these tests (envoy/e2e.yaml TIMEOUT_MS)
SLACK_S = 1.0  # generous: two cores shared with compilers and other suites
ANSWER_BOUND_S = TIMEOUT_MS / 1000 + SLACK_S
OPEN, CLOSED = "LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"
RULE = {"action": "e2e_limited", "algorithm": "gcra", "capacity": 3, "rate": {"count": 1, "period": "1h"}}
OUTAGE_S = 1.5


@pytest.fixture(scope="module")
def backend(tmp, redis):
    yield from rstack.running_backend(tmp, redis, RULE)


@pytest.fixture(scope="module")
def envoy(tmp, backend, upstream):
    e = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream,
                                      "TIMEOUT_MS": TIMEOUT_MS}, [OPEN, CLOSED]).start()
    yield e
    e.stop()


def burst(envoy, who, n=4, listener=CLOSED):
    """n requests for one user; returns [(status, x-sluice-failure)]."""
    out = []
    for _ in range(n):
        r = requests.get(envoy.url(listener) + "/limited/x", headers={"x-user": who}, timeout=10)
        out.append((r.status_code, r.headers.get("x-sluice-failure")))
    return out


CORRECT = [(200, None)] * 3 + [(429, None)]


def seconds_until_correct(envoy, since, limit=10.0):
    """Probes a fresh user (capacity 3: exactly 200 200 200 429, no failure) through the
    fail-closed listener until right; returns seconds from `since` to the first right answer."""
    while time.monotonic() - since < limit:
        if burst(envoy, rstack.user("probe")) == CORRECT:
            return time.monotonic() - since
    pytest.fail(f"decisions still wrong {limit}s after Redis came back")


def fresh_load(envoy):
    """Background load of fresh users on both listeners (every request is a callout and, when
    healthy, a 200)."""
    return rstack.Load(envoy, "/limited/x", [OPEN, CLOSED], threads=4, pause_s=0.02, max_seconds=40)


def check_answers(answers, reasons=("unavailable", "timeout")):
    """Every request answered in time, as its listener's failure mode says; returns failures per
    listener."""
    assert answers, "the load sent nothing"
    failures = {OPEN: 0, CLOSED: 0}
    for a in answers:
        assert a.error is None, f"a request got no answer: {a}"
        assert a.took <= ANSWER_BOUND_S, f"answered in {a.took:.3f}s > {ANSWER_BOUND_S}s: {a}"
        if a.failure is None:
            assert a.status == 200, f"a fresh user was not allowed: {a}"
            continue
        assert a.failure in reasons, a
        failures[a.listener] += 1
        assert a.status == (200 if a.listener == OPEN else 503), f"wrong failure-mode answer: {a}"
    return failures


def outage(redis, envoy, backend, keep_data):
    """Kills Redis under load for OUTAGE_S, restarts it on the same port; returns
    (answers, seconds to correct decisions, victim's answers after)."""
    assert burst(envoy, rstack.user("before")) == CORRECT, "decisions are right before the fault"
    victim = rstack.user("victim")
    assert burst(envoy, victim) == CORRECT
    if keep_data:
        redis.save()
    load = fresh_load(envoy).start()
    try:
        time.sleep(0.3)
        redis.kill()
        killed = time.monotonic()
        # While Redis is down: the cached rules are still served and the backend says not ready.
        rules = backend.admin("GET", "/v1/rules")
        assert rules.status_code == 200 and [r["action"] for r in rules.json()["rules"]] == ["e2e_limited"]
        assert requests.get(backend.decision_url + "/readyz", timeout=5).status_code == 503
        r = backend.throttle("e2e_limited", rstack.user("direct"))
        assert r.status_code == 503 and r.json()["error"] in ("store_unavailable", "store_timeout"), r.text
        w = backend.admin("PUT", "/v1/rules/e2e_other", json={**RULE, "action": "e2e_other"})
        assert w.status_code == 503, f"a rule write while Redis is down: {w.status_code} {w.text}"
        while time.monotonic() - killed < OUTAGE_S:
            time.sleep(0.05)
        down = [a for a in load.answers if a.started > killed + 0.2]
        redis.start(keep_data=keep_data)
        back = time.monotonic()
        took = seconds_until_correct(envoy, back)
        correct_at = time.monotonic()
        time.sleep(0.5)
    finally:
        load.stop()
    failures = check_answers(load.answers)
    print(f"redis outage (keep_data={keep_data}): {len(load.answers)} requests, "
          f"{failures[OPEN]} fail-open and {failures[CLOSED]} fail-closed answers, "
          f"max latency {max(a.took for a in load.answers) * 1000:.0f} ms, correct again {took * 1000:.0f} ms after restart")
    assert any(a.failure and a.listener == OPEN for a in down), "the outage was seen on the fail-open listener"
    assert any(a.failure and a.listener == CLOSED for a in down), "the outage was seen on the fail-closed listener"
    after = [a for a in load.answers if a.started > correct_at]
    assert after, "the load ran after recovery"
    late = [a for a in after if a.failure == "unavailable"]
    assert not late, f"store failures after decisions were right again (at {correct_at:.3f}): {late[:5]}"
    assert sum(a.failure is not None for a in after) <= max(1, len(after) // 100), "timeouts after recovery"
    return took, burst(envoy, victim, n=1)


def test_redis_killed_under_load_comes_back_with_its_data(redis, backend, envoy):
    pid_envoy, pid_backend = envoy.proc.popen.pid, backend.pid
    took, victim = outage(redis, envoy, backend, keep_data=True)
    assert took < 1.0, f"decisions right again {took:.2f}s after Redis came back (bound 1 s)"
    assert victim == [(429, None)], "the victim's state came back with Redis's data"
    assert envoy.proc.popen.pid == pid_envoy and envoy.proc.alive(), "Envoy was not restarted"
    assert backend.pid == pid_backend and backend.proc.alive(), "the backend was not restarted"


def test_redis_restarted_empty_gets_the_cached_rules_republished(tmp, redis, backend, envoy):
    took, victim = outage(redis, envoy, backend, keep_data=False)
    assert took < 1.0, f"decisions right again {took:.2f}s after Redis came back (bound 1 s)"
    # Throttle state lived only in the lost Redis: the victim starts afresh (docs/failure-modes.md).
    assert victim == [(200, None)]
    stack.wait_until(lambda: "publishing this replica's 1 cached rules again" in backend.log_text(),
                     "the republish log line", timeout=5)
    stack.wait_until(lambda: "e2e_limited" in redis.cli("HKEYS", "{sluice:rules}"), "rules back in Redis",
                     timeout=5)
    # A replica started now finds the rule in the store.
    other = rstack.Backend(tmp, redis.url).start()
    try:
        rules = other.admin("GET", "/v1/rules").json()["rules"]
        assert [r["action"] for r in rules] == ["e2e_limited"] and rules[0]["capacity"] == 3
    finally:
        other.stop()


def test_redis_paused_answers_fast_and_sheds_load(tmp, redis, backend, envoy):
    """SIGSTOP of redis-server: the connection stays open and nothing answers, the worst case."""
    shedding = rstack.Backend(tmp, redis.url, ["--max-in-flight", "4", "--redis-timeout-ms", "1000"]).start()
    load = fresh_load(envoy)
    try:
        assert shedding.throttle("e2e_limited", rstack.user()).status_code == 200
        load.start()
        time.sleep(0.3)
        redis.pause()
        paused = time.monotonic()
        # The default backend (--redis-timeout-ms 50): a quick 503 store_timeout, not a hang.
        for _ in range(3):
            start = time.monotonic()
            r = backend.throttle("e2e_limited", rstack.user("direct"))
            took = time.monotonic() - start
            assert r.status_code == 503 and r.json()["error"] in ("store_timeout", "overloaded"), r.text
            assert took < 0.05 + 0.5, f"store_timeout after {took:.3f}s with a 50 ms Redis timeout"

        # 24 requests at once at a backend allowing 4 Redis commands in flight, 1 s timeout.
        results = []
        gate = threading.Barrier(24)

        def one():
            gate.wait(timeout=10)
            start = time.monotonic()
            try:
                r = shedding.throttle("e2e_limited", rstack.user("burst"), timeout=15)
                results.append((r.status_code, r.json().get("error"), time.monotonic() - start))
            except requests.RequestException as e:
                results.append((0, repr(e), time.monotonic() - start))

        threads = [threading.Thread(target=one) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        while time.monotonic() - paused < 1.0:
            time.sleep(0.05)
        down = [a for a in load.answers if a.started > paused + 0.1]
        redis.resume()
        resumed = time.monotonic()
        took = seconds_until_correct(envoy, resumed)
        time.sleep(0.3)
    finally:
        redis.resume()
        load.stop()
        shedding.stop()
    overloaded = [t for s, e, t in results if e == "overloaded"]
    timed_out = [t for s, e, t in results if e == "store_timeout"]
    print(f"redis paused: 24 concurrent at --max-in-flight 4: {len(overloaded)} overloaded "
          f"(max {max(overloaded, default=0) * 1000:.0f} ms), {len(timed_out)} store_timeout "
          f"(max {max(timed_out, default=0) * 1000:.0f} ms); correct {took * 1000:.0f} ms after SIGCONT")
    assert len(results) == 24 and all(s == 503 for s, _, _ in results), results
    assert len(overloaded) + len(timed_out) == 24, results
    assert len(overloaded) >= 12, f"excess requests must be shed, not queued: {results}"
    assert all(t < 0.75 for t in overloaded), f"overloaded answers must be fast: {overloaded}"
    assert all(0.8 < t < 1.0 + 1.5 for t in timed_out), f"store_timeout bounded by the 1 s timeout: {timed_out}"
    check_answers(load.answers)
    assert any(a.failure == "unavailable" for a in down), "the pause was seen through Envoy"
    assert took < 1.0, f"decisions right again {took:.2f}s after SIGCONT"
