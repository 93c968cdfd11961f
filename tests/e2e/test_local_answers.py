"""Routes Envoy answers itself, behind the sluice filter (issue 28 0a), through a real Envoy, the
real backend and Redis, on both builds: a direct response, a redirect, no route, a cluster with
no healthy host, an upstream that resets and another filter's local reply (RBAC after sluice),
with the exchange stream
and with an HTTP callout, on `--concurrency` 1 and 2.

Every such request is metered and decided: the first `CAPACITY` of a user get Envoy's own answer
(with the rate-limit headers of the allowed decision), the next get the filter's 429. Envoy's
admin answers throughout, and Envoy stops on SIGTERM (the native build once blocked a worker,
then the main thread, on the first such answer: nothing answered and only SIGKILL stopped it).

Also here, the request body while a decision is pending (issue 28 0d): uploads of 2 MB and
50 MB, past Envoy's 1 MiB buffer limit, pass a metered route when allowed and get the 429 when
not, with the backend stopped until Envoy holds a full buffer of the body."""

import os
import signal
import socket
import struct
import threading
import time
import uuid

import pytest
import requests

import stack

TIMEOUT_MS = 1000
# Long enough for a decision held back while a large body arrives.
UPLOAD_TIMEOUT_MS = 20000
CAPACITY = 2
LISTENERS = ["LISTEN_STREAM_PORT", "LISTEN_HTTP_PORT", "LISTEN_UPLOAD_PORT"]
# Envoy's default per-connection buffer limit: what the body tests must get past.
BUFFER_LIMIT = 1024 * 1024

# (path, Envoy's own answer once allowed).
LOCAL_ANSWERS = [
    ("/direct/health", 200),
    ("/redirect/old", 301),
    ("/nohost/x", 503),
    ("/rbac/secret", 403),
    ("/reset/x", 503),
    ("/nowhere/x", 404),
    ("/up/x", 200),
]


def rule(action, capacity):
    return {"action": action, "algorithm": "gcra", "capacity": capacity,
            "rate": {"count": capacity, "period": "1h"}}


def start_resetter():
    """A TCP server that resets every connection it accepts (SO_LINGER 0, then close): an upstream
    that fails mid-deploy. Returns (socket, port); close the socket to stop it."""

    def reset(conn):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    return stack.serve_tcp(reset)


@pytest.fixture(scope="module")
def resetter():
    listener, port = start_resetter()
    yield port
    listener.close()


@pytest.fixture(scope="module")
def backend(tmp, redis):
    """This module's own backend on the session's redis-server, with a 1 s Redis timeout: every
    answer's status is asserted here, not latency, so one slow EVALSHA on a loaded machine must
    not turn an admission into a failure (503 under `deny`)."""
    b = stack.Backend(tmp, redis, extra_args=["--redis-timeout-ms", "1000"]).start()
    yield b
    b.stop()


@pytest.fixture(scope="module", params=[1, 2], ids=["concurrency1", "concurrency2"])
def local_envoy(request, tmp, backend, upstream, resetter):
    backend.put_rule(rule("e2e_local", CAPACITY))
    backend.put_rule(rule("e2e_upload", CAPACITY))
    e = stack.Envoy(tmp, "e2e_local.yaml",
                    {"BACKEND_PORT": backend.decision_port, "GRPC_PORT": backend.grpc_port,
                     "UPSTREAM_PORT": upstream, "RESET_PORT": resetter, "TIMEOUT_MS": TIMEOUT_MS,
                     "UPLOAD_TIMEOUT_MS": UPLOAD_TIMEOUT_MS},
                    LISTENERS, concurrency=request.param).start()
    yield e
    # Stops on SIGTERM, by itself: a worker or main thread blocked for good would not.
    os.kill(e.proc.popen.pid, signal.SIGTERM)
    try:
        e.proc.popen.wait(timeout=15)
    finally:
        e.stop()
    assert e.proc.popen.returncode is not None


def admin_answers(envoy):
    r = requests.get(f"http://127.0.0.1:{envoy.admin_port}/ready", timeout=2)
    assert r.status_code == 200


@pytest.mark.parametrize("listener", ["LISTEN_STREAM_PORT", "LISTEN_HTTP_PORT"], ids=["grpc_stream", "http"])
@pytest.mark.parametrize("path,status", LOCAL_ANSWERS, ids=[p.split("/")[1] for p, _ in LOCAL_ANSWERS])
def test_a_route_envoy_answers_itself_is_metered_and_answered(local_envoy, listener, path, status):
    user = f"local-{uuid.uuid4().hex[:10]}"
    url = local_envoy.url(listener) + path
    answers = [requests.get(url, headers={"x-user": user}, timeout=5, allow_redirects=False)
               for _ in range(CAPACITY + 2)]
    for r in answers[:CAPACITY]:
        assert r.status_code == status, (r.status_code, r.text[:200])
        assert "x-ratelimit-limit" in r.headers, f"the allowed decision's headers on Envoy's {status}"
    assert [r.headers["x-ratelimit-remaining"] for r in answers[:CAPACITY]] == \
        [str(CAPACITY - 1 - i) for i in range(CAPACITY)]
    for r in answers[CAPACITY:]:
        assert r.status_code == 429, (r.status_code, r.text[:200])
        assert r.headers.get("retry-after")
        assert r.json()["action"] == "e2e_local"
    admin_answers(local_envoy)


@pytest.mark.smoke
def test_concurrent_requests_to_local_answers_all_get_answers(local_envoy):
    """Many users at once, every kind of local answer on both listeners: each request answered
    (Envoy's status or the 429), none left hanging, the admin still answering."""
    jobs = [(listener, path, status, f"many-{i}-{uuid.uuid4().hex[:6]}")
            for i in range(4)
            for listener in ("LISTEN_STREAM_PORT", "LISTEN_HTTP_PORT")
            for path, status in LOCAL_ANSWERS]
    results = []
    lock = threading.Lock()

    def run(job):
        listener, path, status, user = job
        answers = [requests.get(local_envoy.url(listener) + path, headers={"x-user": user}, timeout=10,
                                allow_redirects=False) for _ in range(CAPACITY + 1)]
        codes = [(r.status_code, r.headers.get("x-sluice-failure")) for r in answers]
        with lock:
            results.append((status, codes))

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a request was left without an answer"
    assert len(results) == len(jobs)
    for status, codes in results:
        assert [c for c, _ in codes] == [status] * CAPACITY + [429], (status, codes)
    admin_answers(local_envoy)


def upload(port, user, size, timeout=60):
    """POST `size` bytes to /upload/ over a raw connection, the body sent by a thread (Envoy may
    answer before it has read it all); returns the status code Envoy answered."""
    head = (f"POST /upload/file HTTP/1.1\r\nhost: e2e\r\nx-user: {user}\r\n"
            f"content-type: application/octet-stream\r\ncontent-length: {size}\r\n"
            f"connection: close\r\n\r\n").encode()
    conn = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    chunk = b"u" * (256 * 1024)

    def send():
        try:
            conn.sendall(head)
            left = size
            while left > 0:
                n = min(left, len(chunk))
                conn.sendall(chunk[:n])
                left -= n
        except OSError:
            pass  # answered (and closed) before the whole body went

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while b"\r\n" not in data:
            part = conn.recv(4096)
            if not part:
                break
            data += part
    finally:
        sender.join(timeout=timeout)
        conn.close()
    return int(data.split(b"\r\n", 1)[0].split()[1])


def rx_bytes(envoy):
    stats = requests.get(f"http://127.0.0.1:{envoy.admin_port}/stats?filter=local_upload.downstream_cx_rx_bytes_total",
                         timeout=5).text
    return sum(int(line.rsplit(": ", 1)[1]) for line in stats.splitlines()
               if line.startswith("http.local_upload.downstream_cx_rx_bytes_total"))


@pytest.mark.parametrize("size", [2_000_000, 50_000_000], ids=["2MB", "50MB"])
def test_a_large_body_waits_for_its_decision_and_passes_when_allowed(local_envoy, backend, size):
    user = f"upload-{uuid.uuid4().hex[:10]}"
    port = local_envoy.ports["LISTEN_UPLOAD_PORT"]
    before = rx_bytes(local_envoy)
    # The backend stands still until Envoy holds a full buffer of the body: the decision is
    # pending while the body passes Envoy's limit.
    stack.pause(backend.proc.popen.pid)
    result = {}
    try:
        t = threading.Thread(target=lambda: result.setdefault("status", upload(port, user, size)))
        t.start()
        stack.wait_until(lambda: rx_bytes(local_envoy) - before >= BUFFER_LIMIT,
                         "Envoy holding a full buffer of the body", timeout=15, every=0.01)
        assert "status" not in result, f"answered {result.get('status')} before the decision"
    finally:
        os.kill(backend.proc.popen.pid, signal.SIGCONT)
    t.join(timeout=60)
    assert result.get("status") == 200
    statuses = [upload(port, user, size) for _ in range(CAPACITY)]
    assert statuses == [200] * (CAPACITY - 1) + [429]
    admin_answers(local_envoy)
