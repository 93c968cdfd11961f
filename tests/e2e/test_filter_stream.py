"""The sluice filter's exchange stream (`backend.protocol: grpc_stream`) through a real Envoy
(two workers) to the real backend's RLS listener on a real redis-server: the decision API's JSON
as messages on one long-lived gRPC stream per worker. Exactly capacity admitted, with the HTTP
callout's headers; requests really ride the stream (not one upstream request each); concurrent
requests stay exact; odd keys never pass free; a backend paused, killed or restarted follows the
failure mode and the stream comes back.

envoy/e2e_grpc.yaml is rendered with PROTOCOL grpc_stream; a second Envoy from e2e.yaml on the
same backend gives the HTTP callout to compare with."""

import concurrent.futures
import contextlib
import os
import re
import signal
import socket
import time
import uuid

import pytest
import requests

import stack
from test_filter_grpc import RlsBackend, shape

TIMEOUT_MS = 250
HOUR = {"count": 1, "period": "1h"}
LISTENERS = ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]


def stream_envoy(tmp, rls_port, upstream):
    return stack.Envoy(tmp, "e2e_grpc.yaml",
                       {"RLS_PORT": rls_port, "UPSTREAM_PORT": upstream, "TIMEOUT_MS": TIMEOUT_MS,
                        "PROTOCOL": "grpc_stream"}, LISTENERS)


@pytest.fixture(scope="module")
def stream_stack(tmp, upstream):
    redis, redis_port = stack.start_redis(tmp)
    backend = RlsBackend(tmp, redis_port).start()
    envoy = stream_envoy(tmp, backend.rls_port, upstream).start()
    http = stack.Envoy(tmp, "e2e.yaml",
                       {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream, "TIMEOUT_MS": TIMEOUT_MS},
                       LISTENERS).start()
    yield backend, envoy, http
    for proc in (http, envoy, backend):
        proc.stop()
    redis.stop()


def user():
    return f"s-{uuid.uuid4().hex[:12]}"


def get(envoy, path, who, listener="LISTEN_OPEN_PORT"):
    return requests.get(envoy.url(listener) + path, headers={"x-user": who}, timeout=10)


def log_of(envoy):
    return envoy.proc.log_path.read_text(errors="replace")


def stat(envoy, suffix):
    return sum(v for k, v in envoy.stats().items() if k.endswith(suffix))


@pytest.mark.smoke
def test_exactly_capacity_then_429s_with_the_same_headers_as_the_http_callout(stream_stack):
    backend, envoy, http = stream_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 5, "rate": HOUR})
    via_stream = [get(envoy, "/limited/x", who) for who in [user()] for _ in range(8)]
    via_http = [get(http, "/limited/x", who) for who in [user()] for _ in range(8)]
    assert [r.status_code for r in via_stream] == [200] * 5 + [429] * 3
    assert [r.status_code for r in via_http] == [200] * 5 + [429] * 3
    assert [r.headers["x-ratelimit-remaining"] for r in via_stream[:5]] == ["4", "3", "2", "1", "0"]
    for s, h in zip(via_stream, via_http):
        assert shape(s) == shape(h), (s.headers, h.headers)
        assert "x-sluice-failure" not in s.headers
    assert via_stream[5].json()["action"] == "e2e_limited"
    assert via_stream[6].headers.get("x-sluice-cache") == "hit"


def test_decisions_ride_the_open_stream_not_a_request_each(stream_stack):
    backend, envoy, _ = stream_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 1000, "rate": HOUR})
    who = user()
    assert get(envoy, "/limited/w", who).status_code == 200
    rq_before = stat(envoy, "cluster.sluice_rls.upstream_rq_total")
    reports_before = stat(envoy, "sluice.reports_sent") + stat(envoy, "sluice.reports_failed")
    callouts_before = stat(envoy, "sluice.callouts")
    decided_before = backend.decisions("e2e_limited")
    for _ in range(40):
        r = get(envoy, "/limited/w", who)
        assert r.status_code == 200 and "x-sluice-failure" not in r.headers, r.headers
    assert stat(envoy, "sluice.callouts") - callouts_before == 40
    assert backend.decisions("e2e_limited") - decided_before == 40
    # Each worker's stream is one upstream request for its whole life; unary calls (the
    # fallback) would show here as more. Count reports (unary exchanges, one per root context
    # and second at most, only when there is something to report) are taken out.
    reports = stat(envoy, "sluice.reports_sent") + stat(envoy, "sluice.reports_failed") - reports_before
    opened = stat(envoy, "cluster.sluice_rls.upstream_rq_total") - rq_before - reports
    assert opened <= 2, f"{opened} upstream requests for 40 decisions"


def test_concurrent_requests_on_both_workers_admit_exactly_capacity(stream_stack):
    backend, envoy, _ = stream_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 25, "rate": HOUR})
    who = user()

    def one(_):
        # A fresh connection each: Envoy spreads them over its two workers (two streams).
        return requests.get(envoy.url("LISTEN_OPEN_PORT") + "/limited/c",
                            headers={"x-user": who, "connection": "close"}, timeout=10)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(60)))
    # Admitted = not 429 (the test upstream may answer an admitted request 503 under this load;
    # the filter's headers on it show it was admitted).
    admitted = [r for r in responses if r.status_code != 429]
    assert len(admitted) == 25, [r.status_code for r in responses]
    assert all("x-ratelimit-remaining" in r.headers for r in admitted)
    assert sorted(int(r.headers["x-ratelimit-remaining"]) for r in admitted) == list(range(25))
    assert not any("x-sluice-failure" in r.headers for r in responses)


# Keys a client controls, at odd sizes and bytes; each must be metered (capacity 1: the second
# request is a 429), never passed because the exchange failed.
ODD_KEYS = {
    "one byte": b"k",
    "non-UTF-8": b"\xff\xfe\x80",
    "quotes and backslashes": b'"\\"\\\\\'',
    "json specials": b'{}[]"\\/u0000',
    "8 KB": b"k" * 8000,
    "40 KB non-UTF-8": b"\xff" * 40_000,
}


@pytest.mark.parametrize("what", sorted(ODD_KEYS))
def test_odd_keys_are_metered_over_the_stream(stream_stack, what):
    backend, envoy, _ = stream_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 1, "rate": HOUR})
    key = uuid.uuid4().hex[:8].encode() + ODD_KEYS[what]
    port = envoy.ports["LISTEN_OPEN_PORT"]
    responses = [stack.raw_request(port, "GET", b"/limited/k", [("x-user", key)]) for _ in range(3)]
    assert [r.status for r in responses] == [200, 429, 429], what
    assert not any(r.headers.get("x-sluice-failure") for r in responses), what


@pytest.mark.smoke
def test_a_paused_backend_times_out_into_the_failure_mode_then_recovers(stream_stack):
    backend, envoy, _ = stream_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 1000, "rate": HOUR})
    who = user()
    assert get(envoy, "/limited/p", who).status_code == 200
    stack.pause(backend.proc.popen.pid)
    try:
        for listener, status in (("LISTEN_OPEN_PORT", 200), ("LISTEN_CLOSED_PORT", 503)):
            started = time.monotonic()
            r = get(envoy, "/limited/p", who, listener)
            elapsed = time.monotonic() - started
            assert r.status_code == status, r.text
            assert r.headers.get("x-sluice-failure") == "timeout", r.headers
            # The root's tick answers an overdue request at most a quarter timeout late.
            assert elapsed < TIMEOUT_MS / 1000 + 1.0, elapsed
    finally:
        os.kill(backend.proc.popen.pid, signal.SIGCONT)
    stack.wait_until(lambda: "x-sluice-failure" not in get(envoy, "/limited/p", who).headers,
                     "decisions again after SIGCONT", timeout=10)


def test_a_body_sent_while_the_decision_is_pending_does_not_pass_the_request(stream_stack):
    """The module exports no body callback (Envoy then continues the body itself): a body that
    arrives while the filter waits for its answer must not carry the request upstream."""
    backend, envoy, _ = stream_stack
    backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 1000, "rate": HOUR})
    head = (b"POST /limited/b HTTP/1.1\r\nhost: e2e\r\nx-user: " + user().encode() +
            b"\r\ncontent-length: 5\r\nconnection: close\r\n\r\n")
    stack.pause(backend.proc.popen.pid)
    try:
        with socket.create_connection(("127.0.0.1", envoy.ports["LISTEN_CLOSED_PORT"]), timeout=10) as conn:
            conn.sendall(head)
            time.sleep(0.05)  # the callout is in flight (the backend is stopped)
            conn.sendall(b"hello")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
    finally:
        os.kill(backend.proc.popen.pid, signal.SIGCONT)
    # failure_mode deny: the timed-out decision answers 503; the upstream never saw it.
    assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
    assert b"x-sluice-failure: timeout" in answer
    assert b'"path"' not in answer, "the upstream answered"


@contextlib.contextmanager
def limited_stream(tmp, upstream):
    """A redis-server, an RlsBackend with e2e_limited at 100 an hour, and a stream_envoy to it:
    yields (backend, envoy), then stops all three."""
    redis, redis_port = stack.start_redis(tmp)
    b = RlsBackend(tmp, redis_port).start()
    e = stream_envoy(tmp, b.rls_port, upstream).start()
    try:
        b.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 100, "rate": HOUR})
        yield b, e
    finally:
        stack.stop_all(e, b, redis)


def test_a_restarted_backend_gets_a_new_stream(tmp, upstream):
    with limited_stream(tmp, upstream) as (b, e):
        who = user()
        r = get(e, "/limited/z", who)
        assert r.status_code == 200 and "x-sluice-failure" not in r.headers
        # One stream per worker and listener's plugin at least, opened on the roots' first ticks.
        stack.wait_until(lambda: stat(e, "sluice.exchange_streams_opened") >= 2, "streams opened")
        opened = stat(e, "sluice.exchange_streams_opened")
        assert stat(e, "sluice.exchange_streams_closed") == 0
        b.stop()
        r = get(e, "/limited/z", who)
        assert r.status_code == 200 and r.headers.get("x-sluice-failure") in ("unavailable", "timeout"), r.headers
        assert get(e, "/limited/z", who, "LISTEN_CLOSED_PORT").status_code == 503
        # Envoy's stats say what happened: the streams closed, and requests went as unary calls
        # (while the stream is down as unreachable, only probes: one per backoff interval).
        stack.wait_until(lambda: stat(e, "sluice.exchange_streams_closed") >= 2, "streams seen closed")
        # The two requests above may have gone on a stream not yet seen closed (the native build's
        # stream is closed on Envoy's main thread, which can lag under load): one more, now that
        # both are known down, goes as a unary probe (or fails at once, a probe having gone).
        r = get(e, "/limited/z", who)
        assert r.status_code == 200 and r.headers.get("x-sluice-failure") in ("unavailable", "timeout"), r.headers
        assert stat(e, "sluice.exchange_unary") >= 1
        # And Envoy's log says why, naming the cluster.
        stack.wait_until(lambda: re.search(r'sluice: unreachable: .*cluster "sluice_rls"', log_of(e)),
                         "the unreachable line in Envoy's log", timeout=5)
        b.start()
        stack.wait_until(lambda: "x-sluice-failure" not in get(e, "/limited/z", who).headers,
                         "the filter back on the restarted backend", timeout=10)
        # Decisions went as unary probes (or failed at once) until a tick reopened the stream (an
        # answered probe brings the reopen forward; the backoff is at most 5 s); then they ride it
        # again: no upstream request per decision.
        def on_the_stream():
            before = stat(e, "cluster.sluice_rls.upstream_rq_total")
            assert "x-sluice-failure" not in get(e, "/limited/z", who).headers
            return stat(e, "cluster.sluice_rls.upstream_rq_total") == before
        # Four in a row: each a new connection, so both workers' streams are back.
        stack.wait_until(lambda: all(on_the_stream() for _ in range(4)), "decisions back on a stream",
                         timeout=10)
        before = stat(e, "cluster.sluice_rls.upstream_rq_total")
        for _ in range(20):
            assert "x-sluice-failure" not in get(e, "/limited/z", who).headers
        assert stat(e, "cluster.sluice_rls.upstream_rq_total") - before <= 2
        assert stat(e, "sluice.exchange_streams_opened") > opened


def test_stopping_envoy_while_the_backend_is_up_logs_no_failure(tmp, upstream):
    # At shutdown Envoy resets the exchange stream itself (the native build's reset reason
    # LocalReset) before the filter's configuration goes: that is no failure of the backend, and a
    # warning at every deploy would teach operators to ignore the real ones.
    with limited_stream(tmp, upstream) as (b, e):
        r = get(e, "/limited/z", user())
        assert r.status_code == 200 and "x-sluice-failure" not in r.headers, r.headers
        stack.wait_until(lambda: stat(e, "sluice.exchange_streams_opened") >= 2, "streams opened")
    failures = [line for line in log_of(e).splitlines() if "sluice: " in line and "[warning]" in line]
    assert not failures, failures


def test_an_unknown_cluster_fails_at_dispatch_and_the_vm_lives_on(tmp, upstream):
    """Opening the stream and the unary fallback both fail; neither may panic the VM."""
    e = stream_envoy(tmp, stack.free_port(), upstream)
    e.config.write_text(e.config.read_text().replace('"cluster": "sluice_rls"', '"cluster": "no_such_cluster"'))
    e.start()
    try:
        for _ in range(3):
            r = get(e, "/limited/x", user())
            assert r.status_code == 200 and r.headers.get("x-sluice-failure"), r.headers
            time.sleep(0.3)  # across several ticks, each trying to open the stream
        r = get(e, "/limited/x", user(), "LISTEN_CLOSED_PORT")
        assert r.status_code == 503 and r.headers.get("x-sluice-failure")
        # Named in Envoy's log, with the fix.
        stack.wait_until(lambda: re.search(r'sluice: cluster_missing: .*cluster "no_such_cluster"', log_of(e)),
                         "the cluster_missing line in Envoy's log", timeout=5)
    finally:
        e.stop()
