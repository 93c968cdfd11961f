"""Cost budgets through Envoy's own ratelimit filter: a real Envoy (envoy/rls_cost.yaml, no wasm
module) asks a real `sluice` on a real redis-server. A request reserves 100 units of its tenant's
monthly budget (a fixed_window rule with a calendar month); the upstream reports what it cost in
an x-usage response header; Envoy's stream-done descriptor carries that cost, the request's id
and the units reserved, and sluice commits it (sluice_core::rls_commit): the unused part comes
back, a cost above the reservation is debited, and a commit replayed with the same id counts
once."""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

import stack

LISTENER = "RLS_OPEN_PORT"
BUDGET = 1000


class _Usage(BaseHTTPRequestHandler):
    """An upstream that reports the cost the client asked it to (x-cost) as x-usage."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"request_id": self.headers.get("x-request-id")}).encode()
        self.send_response(200)
        self.send_header("x-usage", self.headers.get("x-cost", "0"))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def cost(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rls_cost")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Usage)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rule = {"action": "tokens", "algorithm": "fixed_window", "capacity": BUDGET, "calendar": {"unit": "month"}}
    try:
        with stack.rls_stack(tmp, "rls_cost.yaml", server.server_address[1], [LISTENER],
                             rules=[rule]) as (envoy, backend):
            yield envoy, backend
    finally:
        server.shutdown()


def call(envoy, tenant, cost, request_id=None):
    headers = {"x-tenant": tenant, "x-cost": str(cost)}
    if request_id:
        headers["x-request-id"] = request_id
    return requests.get(envoy.url(LISTENER) + "/llm", headers=headers, timeout=10)


def remaining(backend, tenant):
    r = requests.post(f"{backend.decision_url}/v1/throttle",
                      json={"action": "tokens", "key": tenant, "quantity": 0}, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()["remaining"]


def duplicates(backend):
    """sluice_commit_duplicates_total (a series without labels)."""
    text = requests.get(f"{backend.decision_url}/metrics", timeout=5).text
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("sluice_commit_duplicates_total "))


def test_a_reservation_is_committed_at_its_cost(cost):
    envoy, backend = cost
    tenant = uuid.uuid4().hex[:10]
    refunded = backend.metric("sluice_commit_refunded_units_total", action="tokens")
    r = call(envoy, tenant, 30)
    assert r.status_code == 200, r.text
    # 100 reserved on the way in (the answer's remaining says so), 70 back when the stream is done.
    assert r.headers["x-ratelimit-remaining"] == str(BUDGET - 100)
    stack.wait_until(lambda: remaining(backend, tenant) == BUDGET - 30, "the commit's refund", timeout=5)
    assert backend.metric("sluice_commit_refunded_units_total", action="tokens") == refunded + 70
    # A cost above the reservation is debited in full.
    assert call(envoy, tenant, 250).status_code == 200
    stack.wait_until(lambda: remaining(backend, tenant) == BUDGET - 280, "the overshoot's debit", timeout=5)


def test_the_budget_denies_a_reservation_that_no_longer_fits(cost):
    envoy, backend = cost
    tenant = uuid.uuid4().hex[:10]
    assert call(envoy, tenant, 950).status_code == 200
    stack.wait_until(lambda: remaining(backend, tenant) == BUDGET - 950, "950 spent", timeout=5)
    # 50 left: a request reserving 100 is denied, and costs nothing.
    r = call(envoy, tenant, 1)
    assert r.status_code == 429
    assert remaining(backend, tenant) == 50


def test_a_commit_replayed_with_the_same_id_counts_once(cost):
    envoy, backend = cost
    tenant = uuid.uuid4().hex[:10]
    rid = str(uuid.uuid4())
    before = duplicates(backend)
    assert call(envoy, tenant, 10, rid).status_code == 200
    stack.wait_until(lambda: remaining(backend, tenant) == BUDGET - 10, "the first commit", timeout=5)
    # The same id again (as a retried stream-done call would carry it): the new request's
    # reservation of 100 is taken, its commit is the first one's duplicate and gives nothing back.
    assert call(envoy, tenant, 10, rid).status_code == 200
    stack.wait_until(lambda: duplicates(backend) == before + 1,
                     "the duplicate counted", timeout=5)
    assert remaining(backend, tenant) == BUDGET - 110
