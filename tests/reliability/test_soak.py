"""A bounded soak through a real Envoy with mixed users: heavy users (far past their limit), light
users (under it) and a stream of one-request users, on three algorithms at once, at a bounded
request rate. Checks that every user's allowed count is exactly the algorithm's bound and that
backend and Envoy resident memory stay flat (printed before and after).

SLUICE_SOAK_SECONDS (default 20, below 3600 so that the 1-per-hour rates never refill) sets the
length, SLUICE_SOAK_RPS (default 150) the request rate."""

import os
import random
import threading
import time
from collections import Counter, defaultdict

import pytest
import requests

import rstack
import stack

SECONDS = float(os.environ.get("SLUICE_SOAK_SECONDS", "20"))
RPS = float(os.environ.get("SLUICE_SOAK_RPS", "150"))
THREADS = 4
HOUR = {"count": 1, "period": "1h"}
# path -> (rule, capacity): with one unit per hour and a soak under an hour, the bound of each
# algorithm for one user over the soak is exactly its capacity.
ACTIONS = {
    "/limited/x": {"action": "e2e_limited", "algorithm": "gcra", "capacity": 40, "rate": HOUR},
    "/rule/x": {"action": "e2e_rule", "algorithm": "sliding_log", "capacity": 25, "window": "1h"},
    "/keys/x": {"action": "e2e_keys", "algorithm": "token_bucket", "capacity": 30, "rate": HOUR},
}
HEAVY, LIGHT = 4, 4  # users per action
# Memory may grow this much during the soak (allocator warm-up, caches up to their bounds).
RSS_SLACK_KIB = 64 * 1024


@pytest.fixture(scope="module")
def soak_stack(tmp, upstream):
    assert 0 < SECONDS < 3600, "SLUICE_SOAK_SECONDS must be below one hour (the rules refill hourly)"
    redis = rstack.Redis(tmp).start()
    # A generous Redis timeout too (the default 50 ms is for production latency budgets): on a
    # loaded 2-core machine one slow EVALSHA would otherwise fail open and spoil the exact count.
    backend = rstack.Backend(tmp, redis.url, ["--redis-timeout-ms", "1000"]).start()
    for rule in ACTIONS.values():
        backend.put_rule(rule)
    # A generous callout timeout: this run is about exact counts and memory, not latency.
    envoy = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream,
                                          "TIMEOUT_MS": 2000}, ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]).start()
    yield backend, envoy
    envoy.stop()
    backend.stop()
    redis.stop()


class Soak:
    def __init__(self, envoy):
        self.envoy = envoy
        self.heavy = {p: [rstack.user(f"heavy{i}") for i in range(HEAVY)] for p in ACTIONS}
        self.light = {p: {rstack.user(f"light{i}"): ACTIONS[p]["capacity"] - 1 - i for i in range(LIGHT)}
                      for p in ACTIONS}
        self.counts = defaultdict(Counter)  # (path, user) -> Counter of outcomes
        self.latencies = []
        self.errors = []
        self.failure_reasons = []  # x-sluice-failure values, for the report
        self.lock = threading.Lock()

    def pick(self, rnd):
        path = rnd.choice(list(ACTIONS))
        roll = rnd.random()
        with self.lock:
            if roll < 0.25:
                budget = self.light[path]
                open_users = [u for u, left in budget.items() if left > 0]
                if open_users:
                    u = rnd.choice(open_users)
                    budget[u] -= 1
                    return path, u, "light"
            if roll < 0.45:
                return path, rstack.user("once"), "once"
        return path, rnd.choice(self.heavy[path]), "heavy"

    def worker(self, seed, until, per_thread_rps):
        rnd = random.Random(seed)
        session = requests.Session()
        url = self.envoy.url("LISTEN_OPEN_PORT")
        gap = 1.0 / per_thread_rps
        next_at = time.monotonic()
        while time.monotonic() < until:
            path, who, kind = self.pick(rnd)
            start = time.monotonic()
            try:
                r = session.get(url + path, headers={"x-user": who}, timeout=10)
                outcome = "failure" if "x-sluice-failure" in r.headers else str(r.status_code)
                if outcome == "failure":
                    with self.lock:
                        self.failure_reasons.append(r.headers["x-sluice-failure"])
            except requests.RequestException as e:
                outcome = "error"
                with self.lock:
                    self.errors.append(repr(e))
            took = time.monotonic() - start
            with self.lock:
                self.counts[(path, who, kind)][outcome] += 1
                self.latencies.append(took)
            next_at += gap
            time.sleep(max(0.0, next_at - time.monotonic()))

    def run(self, seconds):
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=self.worker, args=(i, until, RPS / THREADS), daemon=True)
                   for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 60)


def rss(backend, envoy):
    return rstack.rss_kib(backend.pid), rstack.rss_kib(envoy.proc.popen.pid)


def test_soak_exact_bounds_and_flat_memory(soak_stack):
    backend, envoy = soak_stack
    # Warm-up (connections, allocator, script cache, Wasm VMs) on other users, then measure.
    warm = Soak(envoy)
    warm.run(min(3.0, SECONDS / 4))
    before = rss(backend, envoy)
    soak = Soak(envoy)
    samples = [before]
    started = time.monotonic()
    runner = threading.Thread(target=soak.run, args=(SECONDS,), daemon=True)
    runner.start()
    while runner.is_alive() and time.monotonic() - started < SECONDS + 60:
        runner.join(timeout=min(5.0, SECONDS / 4))
        samples.append(rss(backend, envoy))
    elapsed = time.monotonic() - started
    after = rss(backend, envoy)
    total = sum(sum(c.values()) for c in soak.counts.values())
    lat = sorted(soak.latencies)
    print(f"\nsoak: {total} requests in {elapsed:.1f}s ({total / elapsed:.0f}/s, bound {RPS:.0f}/s), "
          f"{len(soak.counts)} users; latency p50 {lat[len(lat) // 2] * 1000:.1f} ms, "
          f"p99 {lat[int(len(lat) * 0.99)] * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    print(f"soak: backend RSS {before[0]} -> {after[0]} KiB ({after[0] - before[0]:+d}), "
          f"Envoy RSS {before[1]} -> {after[1]} KiB ({after[1] - before[1]:+d})")
    print("soak: RSS samples (backend, envoy) KiB: " + " ".join(f"{b}/{e}" for b, e in samples))

    assert not soak.errors, soak.errors[:5]
    assert total >= RPS * SECONDS * 0.3, f"the soak ran at a fraction of its rate: {total}"
    for (path, who, kind), c in soak.counts.items():
        sent = sum(c.values())
        cap = ACTIONS[path]["capacity"]
        assert c["failure"] == 0, (
                f"backend failures during the soak: {path} {who} {c}; reasons {soak.failure_reasons}")
        assert set(c) <= {"200", "429"}, (path, who, c)
        if kind == "heavy":
            assert sent > cap, f"a heavy user sent too little to test the bound: {sent}"
            assert c["200"] == cap, f"{ACTIONS[path]['algorithm']}: {who} allowed {c['200']} of {sent}, bound {cap}"
        else:
            assert c["200"] == sent, f"{kind} user under the limit was denied: {path} {who} {c}"
    for i, name in enumerate(("backend", "Envoy")):
        assert after[i] <= before[i] + RSS_SLACK_KIB, f"{name} RSS grew {before[i]} -> {after[i]} KiB"
    assert backend.proc.alive() and envoy.proc.alive()
