"""Helpers for the lease and report end-to-end tests: an Envoy from envoy/e2e_lease.yaml, a bounded
concurrent load run, and the filter's counters from Envoy's stats."""

import socket
import threading
import time

import requests

import stack

TIMEOUT_MS = 250
LISTENERS = ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]
# A burst of C and one more unit per hour: no refill during a test, so "at most C" is exact.
PER_HOUR = {"count": 1, "period": "1h"}


def start_envoy(tmp, backend_port, concurrency=2, report_period_ms=1000, timeout_ms=TIMEOUT_MS):
    """An Envoy from envoy/e2e_lease.yaml; its upstream is a direct_response listener of its own."""
    return stack.Envoy(tmp, "e2e_lease.yaml",
                       {"BACKEND_PORT": backend_port, "TIMEOUT_MS": timeout_ms, "REPORT_PERIOD_MS": report_period_ms},
                       LISTENERS + ["UPSTREAM_PORT"], concurrency=concurrency).start()


def hammer(urls, headers, total, threads=8, limit_s=60.0):
    """Sends `total` requests spread round-robin over `urls` from `threads` threads, each with a
    keep-alive session per URL (so the connections land on both Envoy workers). Bounded by `total`
    and by `limit_s` seconds. Returns the status codes per URL index."""
    lock = threading.Lock()
    sent = [0]
    codes = [[] for _ in urls]
    deadline = time.monotonic() + limit_s

    def worker():
        sessions = [requests.Session() for _ in urls]
        try:
            while time.monotonic() < deadline:
                with lock:
                    i = sent[0]
                    if i >= total:
                        return
                    sent[0] += 1
                at = i % len(urls)
                r = sessions[at].get(urls[at], headers=headers, timeout=10)
                with lock:
                    codes[at].append(r.status_code)
        finally:
            for s in sessions:
                s.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(limit_s + 15)
    assert sum(map(len, codes)) == total, f"load run not finished within {limit_s}s"
    return codes


def counters(envoy):
    stats = envoy.stats("wasmcustom")
    return {k.removeprefix("wasmcustom.sluice."): v for k, v in stats.items()}


def delta(after, before, name):
    return after.get(name, 0) - before.get(name, 0)


def start_slow_proxy(target_port, delay_s):
    """A TCP proxy on 127.0.0.1 in front of `target_port` that holds every chunk of the answers for
    `delay_s` before passing it on: a backend slower than the filter's callout timeout but faster
    than its report timeout. Returns (listener, port); close the listener to stop accepting."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def pipe(src, dst, delay):
        try:
            while chunk := src.recv(65536):
                if delay:
                    time.sleep(delay)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def accept():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            threading.Thread(target=pipe, args=(client, upstream, 0), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client, delay_s), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]
