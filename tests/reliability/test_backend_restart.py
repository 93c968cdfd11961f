"""The backend killed (SIGKILL: no graceful anything) under load and started again on the same
ports: Envoy keeps answering as each listener's failure mode says, within the callout timeout
plus slack, needs no restart, and decisions are right again once the backend is back, with the
throttle state (in Redis) intact."""

import time

import pytest

import rstack
import stack
from test_redis_faults import (ANSWER_BOUND_S, CLOSED, CORRECT, OPEN, RULE, TIMEOUT_MS, burst, check_answers,
                               fresh_load, seconds_until_correct)


@pytest.fixture(scope="module")
def stack_up(tmp, upstream):
    redis = rstack.Redis(tmp).start()
    backend = rstack.Backend(tmp, redis.url).start()
    backend.put_rule(RULE)
    envoy = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream,
                                          "TIMEOUT_MS": TIMEOUT_MS}, [OPEN, CLOSED]).start()
    yield redis, backend, envoy
    envoy.stop()
    backend.stop()
    redis.stop()


def test_backend_killed_and_restarted_under_load(stack_up):
    redis, backend, envoy = stack_up
    pid_envoy = envoy.proc.popen.pid
    assert burst(envoy, rstack.user("before")) == CORRECT
    victim = rstack.user("victim")
    assert burst(envoy, victim) == CORRECT
    load = fresh_load(envoy).start()
    try:
        time.sleep(0.3)
        backend.kill()
        killed = time.monotonic()
        while time.monotonic() - killed < 1.5:
            time.sleep(0.05)
        down = [a for a in load.answers if a.started > killed + 0.2]
        backend.start()  # same ports; reads the rules from Redis
        back = time.monotonic()
        took = seconds_until_correct(envoy, back)
        correct_at = time.monotonic()
        time.sleep(0.5)
    finally:
        load.stop()
    failures = check_answers(load.answers)
    print(f"backend killed: {len(load.answers)} requests, {failures[OPEN]} fail-open and "
          f"{failures[CLOSED]} fail-closed answers, max latency {max(a.took for a in load.answers) * 1000:.0f} ms "
          f"(bound {ANSWER_BOUND_S * 1000:.0f}), correct {took * 1000:.0f} ms after the backend was ready")
    assert any(a.failure == "unavailable" and a.listener == OPEN for a in down), "fail open seen"
    assert any(a.failure == "unavailable" and a.listener == CLOSED for a in down), "fail closed seen"
    assert all(a.failure is None for a in load.answers if a.started > correct_at + 0.1), "failures after recovery"
    assert took < 1.0, f"decisions right {took:.2f}s after the restarted backend was ready"
    assert envoy.proc.alive() and envoy.proc.popen.pid == pid_envoy, "Envoy was not restarted"
    assert burst(envoy, victim, n=1) == [(429, None)], "throttle state in Redis outlived the backend"
    assert [r["action"] for r in backend.admin("GET", "/v1/rules").json()["rules"]] == ["e2e_limited"]


def test_a_backend_started_while_redis_is_down_exits_at_once_saying_why(tmp):
    """Fail fast at start (a supervisor restarts it), never a backend that looks up but has no
    store and no rules."""
    dead = stack.free_port()
    b = rstack.Backend(tmp, f"redis://127.0.0.1:{dead}/")
    b.proc = stack.Proc([stack.SLUICE, "--decision-listen", f"127.0.0.1:{b.decision_port}",
                         "--admin-listen", f"127.0.0.1:{b.admin_port}", "--redis-url", b.redis_url,
                         "--admin-token", rstack.TOKEN], tmp / "sluice-no-redis.log")
    try:
        code = b.proc.popen.wait(timeout=15)
    finally:
        b.stop()
    assert code != 0
    assert "cannot connect to Redis" in b.log_text(), b.log_text()
