"""What the cost-budget test (test_cost.py) and bench (benches/envoy/cost.py) share: an upstream
that reports a usage, Envoy with envoy/e2e_cost.yaml, and one run of N concurrent clients against
a fresh budget, read back from the backend (its level, its overshoot counter) and from Envoy's
stats; the burst of clients alone (`burst`) for the bench's rows through Envoy's ratelimit
filter. Loopback only; everything it starts is stopped by its caller (the fixtures, or the bench)."""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

import stack

BUDGET = 10_000
# A budget that barely refills within a run: token_bucket of 10,000 refilling 1,000 per 7 days
# (0.0017 units/s; a full bucket drains in 70 days, within the 90 days a rule may take).
BUDGET_RULE = {"algorithm": "token_bucket", "capacity": BUDGET, "rate": {"count": 1000, "period": "7d"}}
USAGE = "x-usage-total-tokens"


class _UsageUpstream(BaseHTTPRequestHandler):
    """200 after `x-delay-ms`, reporting the usage the client asked for in `x-use`: as the response
    header x-usage-total-tokens, or (path /stream) as a trailer of a chunked response. `|` in
    `x-use` splits it into several lines of that header (or trailer), for the odd-value tests;
    `x-no-trailer` ends a stream without its trailer. The
    body echoes the x-sluice-cost-id the filter sent (`cost_id`, and `cost_ids`: every line)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        time.sleep(int(self.headers.get("x-delay-ms") or 0) / 1000)
        use = self.headers.get("x-use", "")
        # Every line of x-sluice-cost-id, not one: a client's forged line beside the filter's shows.
        ids = self.headers.get_all("x-sluice-cost-id") or []
        body = json.dumps({"cost_id": ids[0] if ids else None, "cost_ids": ids}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if self.path.startswith("/stream"):
            self.send_header("transfer-encoding", "chunked")
            self.send_header("trailer", USAGE)
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
            lines = "".join(f"{USAGE}: {u}\r\n" for u in use.split("|"))
            if self.headers.get("x-no-trailer"):
                lines = ""
            self.wfile.write(f"0\r\n{lines}\r\n".encode())
        else:
            if use:
                for u in use.split("|"):
                    self.send_header(USAGE, u)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    do_GET = do_POST = _answer


class _Server(ThreadingHTTPServer):
    # 64 clients connect at once: the default backlog of 5 would reset some (Envoy's 503).
    request_queue_size = 256


def start_upstream():
    return stack.serve_http(_UsageUpstream, _Server)


def start_envoy(tmp, backend, upstream_port, edit=None):
    """Envoy with envoy/e2e_cost.yaml; `edit` (text -> text) changes the rendered config first."""
    envoy = stack.Envoy(tmp, "e2e_cost.yaml",
                        {"RLS_PORT": backend.grpc_port, "BACKEND_PORT": backend.decision_port,
                         "UPSTREAM_PORT": upstream_port, "TIMEOUT_MS": 1000},
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])
    if edit is not None:
        envoy.config.write_text(edit(envoy.config.read_text()))
    return envoy.start()


def level(backend, action, key):
    """The key's level now (a throttle of quantity 0 changes nothing)."""
    r = requests.post(f"{backend.decision_url}/v1/throttle", json={"action": action, "key": key, "quantity": 0},
                      timeout=5)
    assert r.status_code == 200, r.text
    return r.json()["level"]


def commits(envoy):
    return envoy.stats().get("wasmcustom.sluice.cost_commits", 0)


def burst(url, path, key, uses, delay_ms=300, headers=None):
    """One POST to `url` + `path` per entry of `uses` (the usage each reports), all at once (a
    barrier), as tenant `key`. Returns (the uses of the admitted requests, how many were denied);
    anything but 200 or 429 fails."""
    barrier = threading.Barrier(len(uses))
    statuses = [None] * len(uses)

    def client(i):
        h = {"x-tenant": key, "x-use": str(uses[i]), "x-delay-ms": str(delay_ms), **(headers or {})}
        barrier.wait(timeout=10)
        statuses[i] = requests.post(f"{url}{path}", headers=h, timeout=20).status_code

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(uses))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(s in (200, 429) for s in statuses), statuses
    return [u for u, s in zip(uses, statuses) if s == 200], statuses.count(429)


def run(backend, envoy, url, path, action, uses, delay_ms=300, headers=None):
    """One request per entry of `uses` (the actual cost each reports), all at once, against a
    fresh key of `action`; waits until every admitted request's commit is accepted. Returns a
    dict: admitted (their uses), denied, level, overshoot (the backend's counter for the run)."""
    key = f"tenant-{uuid.uuid4().hex[:12]}"
    before = {"commits": commits(envoy),
              "overshoot": backend.metric("sluice_commit_overshoot_units_total", action=action)}
    admitted, denied = burst(url, path, key, uses, delay_ms, headers)
    stack.wait_until(lambda: commits(envoy) - before["commits"] >= len(admitted), "every commit accepted",
                     timeout=15)
    return {"key": key, "admitted": admitted, "denied": denied,
            "level": level(backend, action, key),
            "overshoot": backend.metric("sluice_commit_overshoot_units_total", action=action) - before["overshoot"]}
