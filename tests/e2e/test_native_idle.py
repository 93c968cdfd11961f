"""An idle Envoy with the native filter leaves its main thread asleep (docs/filter.md, "The native
build: what is the same, what differs"): the exchange stream's deadline timer and the reports/commits timer wake Envoy's main
thread only while there is work for it (decisions waiting, a reopen due, reports or commits
pending), not on a fixed cadence. Native build only (the wasm build's ticks are Envoy's own).

Measured as what the kernel counts: the voluntary context switches (each one a sleep that ended in
a wake-up) of Envoy's main thread (the process's first thread, /proc/PID/task/PID/status) over a
window after the last request has settled, and those of the filter's timer threads
(`sluice-stream`, `sluice-reports`), which wake only to commit a turn on the main thread. Loopback
only; every process started here is stopped by PID."""

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
import requests

import cost_stack
import stack
from test_filter_grpc import RlsBackend

pytestmark = pytest.mark.skipif(stack.FILTER_BUILD != "native", reason="native build only")

# The default decision timeout: the stream's old fixed tick was 25 / 4 = 6 ms (~160 turns/s).
TIMEOUT_MS = 25
WINDOW_S = 3.0
LISTENERS = ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]
# Envoy's main thread wakes on its own too (13-14 per second with no sluice filter at all: Envoy
# 1.40 with envoy/rls.yaml); the filter's old fixed ticks alone were ~160 per second per
# configuration (two configurations here), so the bound leaves room for Envoy's own and none for a
# tick that keeps running while idle.
MAX_MAIN_WAKES_PER_S = 40
# The timer threads sleep until asked (0 in every run so far); a few stray wakes in the window, a
# report answered late on a loaded machine, stay far below the old fixed ticks (~330 per second).
MAX_TIMER_WAKES_PER_S = 5


def switches(pid, tid):
    """Voluntary context switches of thread `tid` of process `pid`: its wake-ups."""
    text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return sum(int(line.split()[-1]) for line in text.splitlines() if line.startswith("voluntary_ctxt_switches:"))


def threads(pid, prefix):
    out = []
    for comm in sorted(Path(f"/proc/{pid}/task").glob("*/comm")):
        if comm.read_text().strip().startswith(prefix):
            out.append(int(comm.parent.name))
    return out


def idle_wakes(envoy):
    """(main thread's switches per second, the sluice timer threads' per second) over WINDOW_S."""
    pid = envoy.proc.popen.pid
    timers = threads(pid, "sluice-")
    before = [switches(pid, t) for t in [pid] + timers]
    time.sleep(WINDOW_S)
    after = [switches(pid, t) for t in [pid] + timers]
    rates = [(a - b) / WINDOW_S for a, b in zip(after, before)]
    main, timer = rates[0], sum(rates[1:])
    names = [Path(f"/proc/{pid}/task/{t}/comm").read_text().strip() for t in timers]
    print(f"idle {envoy.config.name}: main thread {main:.1f} wake-ups/s, "
          f"{len(timers)} sluice timer threads {timer:.1f}/s "
          f"({', '.join(f'{n} {r:.1f}' for n, r in zip(names, rates[1:]))})")
    return main, timer


def settle(envoy):
    """Waits until the filter's timer threads have had nothing to do for half a second: the last
    counts go out at most a report period (1 s) after they were counted, and their answer's turn
    a period later; then nothing is pending. A timer that keeps ticking never settles (fails)."""
    pid = envoy.proc.popen.pid
    timers = threads(pid, "sluice-")
    assert timers, "the native filter's timer threads are running"

    def quiet():
        before = [switches(pid, t) for t in timers]
        time.sleep(0.5)
        return [switches(pid, t) for t in timers] == before
    stack.wait_until(quiet, "the sluice timer threads idle", timeout=20)


@contextlib.contextmanager
def grpc_stream_stack(tmp, upstream):
    """A redis-server, a backend and an Envoy (e2e_grpc.yaml, two grpc_stream configurations,
    reports on, the default 25 ms timeout), all stopped by PID after the block."""
    redis, redis_port = stack.start_redis(tmp)
    backend = RlsBackend(tmp, redis_port).start()
    try:
        envoy = stack.Envoy(tmp, "e2e_grpc.yaml",
                            {"RLS_PORT": backend.rls_port, "UPSTREAM_PORT": upstream, "TIMEOUT_MS": TIMEOUT_MS,
                             "PROTOCOL": "grpc_stream"}, LISTENERS).start()
        try:
            yield backend, envoy
        finally:
            envoy.stop()
    finally:
        backend.stop()
        redis.stop()


def test_an_idle_envoy_with_the_stream_and_reports_leaves_its_main_thread_asleep(tmp, upstream):
    with grpc_stream_stack(tmp, upstream) as (backend, envoy):
        backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 5,
                          "rate": {"count": 1, "period": "1h"}})
        who = f"idle-{uuid.uuid4().hex[:12]}"
        codes = [requests.get(envoy.url("LISTEN_OPEN_PORT") + "/limited/x", headers={"x-user": who},
                              timeout=10).status_code for _ in range(8)]
        assert codes == [200] * 5 + [429] * 3
        settle(envoy)
        main, timers = idle_wakes(envoy)
        assert main < MAX_MAIN_WAKES_PER_S
        assert timers < MAX_TIMER_WAKES_PER_S
        # Still working after the quiet: a decision on the stream, no failure.
        r = requests.get(envoy.url("LISTEN_OPEN_PORT") + "/limited/x", headers={"x-user": who + "-2"}, timeout=10)
        assert r.status_code == 200 and "x-sluice-failure" not in r.headers, r.headers
        assert sum(v for k, v in envoy.stats().items() if k.endswith("exchange_streams_opened")) == 2


def test_an_idle_envoy_with_cost_routes_leaves_its_main_thread_asleep(tmp):
    redis, redis_port = stack.start_redis(tmp)
    backend = RlsBackend(tmp, redis_port).start()
    server, upstream_port = cost_stack.start_upstream()
    envoy = cost_stack.start_envoy(tmp, backend, upstream_port)
    try:
        backend.put_rule(dict(cost_stack.BUDGET_RULE, action="cost_check"))
        tenant = f"idle-{uuid.uuid4().hex[:12]}"
        for _ in range(3):
            r = requests.get(envoy.url("LISTEN_OPEN_PORT") + "/check",
                             headers={"x-tenant": tenant, "x-use": "5"}, timeout=10)
            assert r.status_code == 200, r.text
        stack.wait_until(lambda: cost_stack.commits(envoy) >= 3, "three commits")
        settle(envoy)
        main, timers = idle_wakes(envoy)
        assert main < MAX_MAIN_WAKES_PER_S
        assert timers < MAX_TIMER_WAKES_PER_S
        # A commit after the quiet still goes out (the tick comes back when there is work).
        before = cost_stack.commits(envoy)
        r = requests.get(envoy.url("LISTEN_OPEN_PORT") + "/check",
                         headers={"x-tenant": tenant, "x-use": "5"}, timeout=10)
        assert r.status_code == 200, r.text
        stack.wait_until(lambda: cost_stack.commits(envoy) == before + 1, "the commit after the quiet")
    finally:
        envoy.stop()
        backend.stop()
        server.shutdown()
        server.server_close()
        redis.stop()


def stat(envoy, suffix):
    return sum(v for k, v in envoy.stats().items() if k.endswith(suffix))


def test_deadlines_and_reopens_still_come_without_a_fixed_tick(tmp, upstream):
    """After a quiet: a decision whose backend does not answer still fails at its deadline; a
    backend that goes away while nobody asks is retried on the backoff alone (no fixed tick); once
    it is back the stream reopens with no request to prompt it, and decisions ride it."""
    with grpc_stream_stack(tmp, upstream) as (backend, envoy):
        backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 1000,
                          "rate": {"count": 1, "period": "1h"}})
        who = f"idle-{uuid.uuid4().hex[:12]}"
        url = envoy.url("LISTEN_CLOSED_PORT") + "/limited/d"
        assert requests.get(url, headers={"x-user": who}, timeout=10).status_code == 200
        settle(envoy)
        # A deadline after the quiet: the backend stopped, the decision fails as a timeout (503 on
        # the fail-closed listener) within its 25 ms and a tick, plus the client's own time.
        stack.pause(backend.proc.popen.pid)
        try:
            started = time.monotonic()
            r = requests.get(url, headers={"x-user": who}, timeout=10)
            elapsed = time.monotonic() - started
        finally:
            os.kill(backend.proc.popen.pid, signal.SIGCONT)
        print(f"a decision with no answer failed after {elapsed * 1000:.0f} ms (timeout {TIMEOUT_MS} ms)")
        assert r.status_code == 503 and r.headers.get("x-sluice-failure") == "timeout", r.headers
        assert elapsed < TIMEOUT_MS / 1000 + 1.0, elapsed
        stack.wait_until(lambda: requests.get(url, headers={"x-user": who}, timeout=10).status_code == 200,
                         "decisions again after SIGCONT", timeout=10)
        # The backend goes away with nobody asking: both streams close, and are retried on the
        # backoff (100 ms doubling to 5 s), each retry one turn: the main thread stays near idle.
        closed = stat(envoy, "sluice.exchange_streams_closed")
        backend.stop()
        stack.wait_until(lambda: stat(envoy, "sluice.exchange_streams_closed") >= closed + 2, "streams closed")
        time.sleep(6.5)  # past 100 + 200 + ... + 3200 ms: the backoff is at its 5 s cap
        main, _ = idle_wakes(envoy)
        assert main < MAX_MAIN_WAKES_PER_S
        # Back, and no request: a reopen on the backoff alone brings the streams back (within 5 s).
        backend.start()

        def both_open():
            s = envoy.stats()
            opened = sum(v for k, v in s.items() if k.endswith("sluice.exchange_streams_opened"))
            closed = sum(v for k, v in s.items() if k.endswith("sluice.exchange_streams_closed"))
            return opened - closed == 2
        time.sleep(0.2)
        stack.wait_until(both_open, "both streams reopened with no request", timeout=15)
        # Decisions ride them: no upstream request per decision (a unary call would be one).
        before = stat(envoy, "cluster.sluice_rls.upstream_rq_total")
        for _ in range(5):
            r = requests.get(url, headers={"x-user": who}, timeout=10)
            assert r.status_code == 200 and "x-sluice-failure" not in r.headers, r.headers
        assert stat(envoy, "cluster.sluice_rls.upstream_rq_total") == before
