"""Counts only the filter knows reach the backend: leased admissions and cached denials (no
callout), and callouts that failed, by reason, with how many passed unchecked. Each Envoy worker
sends them from its root context's tick as `POST /v1/report`; a report that fails is kept and
added to the next one, so an outage's failures arrive once the backend is back."""

import time
import uuid

import pytest
import requests

import stack
from lease_stack import PER_HOUR, counters, delta, hammer, start_envoy, start_slow_proxy


def user():
    return f"r-{uuid.uuid4().hex[:12]}"


def filter_counts(backend, action):
    m = lambda outcome: backend.metric("sluice_filter_decisions_total", action=action, outcome=outcome)
    f = lambda reason: backend.metric("sluice_filter_failures_total", action=action, reason=reason)
    return {"leased": m("leased"), "cached_denied": m("cached_denied"), "passed_unchecked": m("passed_unchecked"),
            "timeout": f("timeout"), "error": f("error")}


def wait_for(check, what, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout}s")


@pytest.mark.smoke
@pytest.mark.main_thread_counters
def test_leased_admissions_and_cached_denials_reach_the_backend(tmp, backend):
    backend.put_rule({"action": "e2e_report", "algorithm": "gcra", "capacity": 60, "rate": PER_HOUR,
                      "lease": {"max": 8, "ttl": "2s"}})
    envoys = [start_envoy(tmp, backend.decision_port, report_period_ms=300) for _ in range(2)]
    try:
        time.sleep(0.5)  # any report from an earlier test's traffic has gone out
        metrics_before = filter_counts(backend, "e2e_report")
        stats_before = [counters(e) for e in envoys]
        codes = hammer([e.url("LISTEN_OPEN_PORT") + "/report/x" for e in envoys], {"x-user": user()}, 160)
        assert sum(c.count(200) for c in codes) <= 60
        stats = [counters(e) for e in envoys]
        leased = sum(delta(a, b, "lease_hits") for a, b in zip(stats, stats_before))
        cached = sum(delta(a, b, "cached_denials") for a, b in zip(stats, stats_before))
        assert leased > 0 and cached > 0, (leased, cached)

        def arrived():
            now = filter_counts(backend, "e2e_report")
            return (now["leased"] - metrics_before["leased"] == leased
                    and now["cached_denied"] - metrics_before["cached_denied"] == cached)

        wait_for(arrived, f"{leased} leased and {cached} cached denials in the backend's metrics", 10)
        # Exactly those: nothing counted twice once the reports are in.
        time.sleep(0.8)
        assert arrived()
        assert all(counters(e).get("reports_sent", 0) > 0 for e in envoys)
    finally:
        for e in envoys:
            e.stop()


def test_failures_during_an_outage_are_reported_once_the_backend_is_back(tmp, redis):
    backend = stack.Backend(tmp, redis).start()
    envoy = start_envoy(tmp, backend.decision_port, report_period_ms=300)
    try:
        backend.put_rule({"action": "e2e_report", "algorithm": "gcra", "capacity": 1000, "rate": PER_HOUR})
        key = {"x-user": user()}
        assert requests.get(envoy.url("LISTEN_OPEN_PORT") + "/report/x", headers=key, timeout=10).status_code == 200
        backend.stop()
        for _ in range(5):
            r = requests.get(envoy.url("LISTEN_OPEN_PORT") + "/report/x", headers=key, timeout=10)
            assert r.status_code == 200 and r.headers["x-sluice-failure"] == "unavailable"
        for _ in range(3):
            r = requests.get(envoy.url("LISTEN_CLOSED_PORT") + "/report/x", headers=key, timeout=10)
            assert r.status_code == 503
        # Reports fail meanwhile, and their counts are kept.
        wait_for(lambda: counters(envoy).get("reports_failed", 0) > 0, "a failed report", 5)
        backend.start()  # same ports: a fresh process, its metrics start at zero
        want = {"leased": 0, "cached_denied": 0, "passed_unchecked": 5, "timeout": 0, "error": 8}
        wait_for(lambda: filter_counts(backend, "e2e_report") == want, f"the outage's counts {want}", 15)
        time.sleep(0.8)
        assert filter_counts(backend, "e2e_report") == want, "counted once"
    finally:
        envoy.stop()
        backend.stop()


def test_callouts_that_time_out_are_reported_as_timeouts(tmp, backend):
    # Every answer is held 300 ms: callouts (timeout 100 ms) time out, reports (1 s) get through.
    backend.put_rule({"action": "e2e_report", "algorithm": "gcra", "capacity": 1000, "rate": PER_HOUR})
    proxy, port = start_slow_proxy(backend.decision_port, 0.3)
    envoy = start_envoy(tmp, port, report_period_ms=300, timeout_ms=100)
    try:
        before = filter_counts(backend, "e2e_report")
        key = {"x-user": user()}
        for _ in range(4):
            r = requests.get(envoy.url("LISTEN_OPEN_PORT") + "/report/x", headers=key, timeout=10)
            assert r.status_code == 200 and r.headers["x-sluice-failure"] == "timeout"
        r = requests.get(envoy.url("LISTEN_CLOSED_PORT") + "/report/x", headers=key, timeout=10)
        assert r.status_code == 503 and r.headers["x-sluice-failure"] == "timeout"

        def arrived():
            now = filter_counts(backend, "e2e_report")
            return {k: now[k] - before[k] for k in now} == {
                "leased": 0, "cached_denied": 0, "passed_unchecked": 4, "timeout": 5, "error": 0}

        wait_for(arrived, "4 passed unchecked and 5 timeouts in the backend's metrics", 15)
    finally:
        envoy.stop()
        proxy.close()
