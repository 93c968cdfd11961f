"""A cost route's client-controlled inputs, sent through a real Envoy as a client would
(docs/cost-budgets.md): the reservation header (`x-max-tokens`, default 500, min 100, max 1000)
in every odd shape, and a forged `x-sluice-cost-id`. Runs on both filter builds.

What is asserted is the reservation the backend holds: the upstream here reports no usage unless
asked (`x-use`), so the reservation is kept (nothing committed) and the key's level right after
the 200 is exactly what was reserved. The question for each input is whether any of them reserves
less than the route's floor, or nothing: that would be a free pass (a client admitted on a spent
budget, its whole usage debited afterwards, beyond the budget). A route written with no `min` (as
envoy/e2e_cost.yaml's are) has a floor of one unit, so a spent budget refuses every shape of the
header on both routes."""

import uuid

import pytest
import requests

import cost_stack
import stack

ACTION = "cost_reserve"
DEFAULT, MIN, MAX = 500, 100, 1000
WRITTEN = '"reserve": {"header": "x-max-tokens", "default": 500, "max": 1000}'
WITH_MIN = f'"reserve": {{"header": "x-max-tokens", "default": {DEFAULT}, "min": {MIN}, "max": {MAX}}}'
COST_ID = "x-sluice-cost-id"


@pytest.fixture(scope="module")
def edge(tmp, backend):
    """Envoy with e2e_cost.yaml, its grpc_stream listener's /reserve route given `min` (the http
    listener's keeps the file's route, without one, for the comparison below)."""
    server, upstream_port = cost_stack.start_upstream()
    backend.put_rule({"action": ACTION, **cost_stack.BUDGET_RULE})

    def with_min(text):
        assert text.count(WRITTEN) == 2, "envoy/e2e_cost.yaml's /reserve routes changed: update WRITTEN"
        return text.replace(WRITTEN, WITH_MIN, 1)

    envoy = cost_stack.start_envoy(tmp, backend, upstream_port, edit=with_min)
    yield envoy
    envoy.stop()
    server.shutdown()
    server.server_close()


def fresh_key():
    return f"edge-{uuid.uuid4().hex[:12]}"


def send(envoy, listener, key, lines):
    """One POST /reserve with the exact header lines `lines` ((name, bytes) pairs) besides the key."""
    return stack.raw_request(envoy.ports[listener], "POST", b"/reserve", [("x-tenant", key.encode()), *lines])


# The reservation header as a client may send it, and what docs/cost-budgets.md says it reserves:
# one decimal number, raised to min and capped at max (a number of any length above max is max);
# anything else (absent, empty, signed, a float, not UTF-8, repeated) the default. Envoy strips
# the spaces around a value before the filter sees it.
RESERVE_CASES = [
    ("absent", [], DEFAULT),
    ("empty", [b""], DEFAULT),
    ("zero", [b"0"], MIN),
    ("one", [b"1"], MIN),
    ("cap+1", [b"1001"], MAX),
    ("1e30 as digits", [b"1" + b"0" * 30], MAX),
    ("negative", [b"-5"], DEFAULT),
    ("exponent", [b"1e3"], DEFAULT),
    ("spaces", [b" 7 "], MIN),
    ("not utf-8", [b"\xff\xfe7"], DEFAULT),
    ("two lines", [b"0", b"1000"], DEFAULT),
    ("60 KB of digits", [b"9" * 60_000], MAX),
]


@pytest.mark.parametrize("lines,reserved", [(c[1], c[2]) for c in RESERVE_CASES],
                         ids=[c[0] for c in RESERVE_CASES])
def test_the_reservation_header_reserves_what_the_docs_say(backend, edge, lines, reserved):
    key = fresh_key()
    r = send(edge, "LISTEN_OPEN_PORT", key, [("x-max-tokens", v) for v in lines])
    assert r.status == 200, (r.status, r.body[:200])
    # No usage reported: the reservation is kept, so the level is exactly the reservation.
    assert cost_stack.level(backend, ACTION, key) == pytest.approx(reserved, abs=0.1)
    assert reserved >= MIN, "a client-controlled value reserved less than the floor"


def spend_all(backend, key):
    r = requests.post(f"{backend.decision_url}/v1/throttle",
                      json={"action": ACTION, "key": key, "quantity": cost_stack.BUDGET}, timeout=5)
    assert r.status_code == 200 and r.json()["allowed"], r.text


# The route as envoy/e2e_cost.yaml (and the docs' example) writes it, with no `min`: the floor is
# one unit (docs/filter.md), so `0` reserves 1; everything else as with min.
NO_MIN_CASES = [
    ("zero", [b"0"], 1),
    ("one", [b"1"], 1),
    ("two", [b"2"], 2),
    ("negative", [b"-1"], DEFAULT),
    ("absent", [], DEFAULT),
]


@pytest.mark.parametrize("lines,reserved", [(c[1], c[2]) for c in NO_MIN_CASES], ids=[c[0] for c in NO_MIN_CASES])
def test_without_min_a_reservation_is_never_below_one_unit(backend, edge, lines, reserved):
    key = fresh_key()
    r = send(edge, "LISTEN_CLOSED_PORT", key, [("x-max-tokens", v) for v in lines])
    assert r.status == 200, (r.status, r.body[:200])
    assert cost_stack.level(backend, ACTION, key) == pytest.approx(reserved, abs=0.1)


# Whatever a client sends as its reservation, on a spent budget: each must be refused.
SPENT_CASES = [
    ("zero", [b"0"]),
    ("minus one", [b"-1"]),
    ("empty", [b""]),
    ("junk", [b"junk"]),
    ("absent", []),
    ("huge", [b"9" * 400]),
    ("not utf-8", [b"\xff\xfe0"]),
    ("two zeros", [b"0", b"0"]),
]


@pytest.mark.parametrize("lines", [c[1] for c in SPENT_CASES], ids=[c[0] for c in SPENT_CASES])
def test_a_spent_budget_refuses_every_reservation_header(backend, edge, lines):
    """Both listeners: the http one's /reserve route is the file's, with no `min` (the floor of one
    unit is the default), the grpc_stream one's is given min. Denied: 429, nothing reserved,
    nothing committed, the upstream never asked (its usage would have been debited beyond the
    budget)."""
    key = fresh_key()
    spend_all(backend, key)
    before = cost_stack.commits(edge)
    header = [("x-max-tokens", v) for v in lines] + [("x-use", b"700")]
    for listener in ("LISTEN_CLOSED_PORT", "LISTEN_OPEN_PORT"):
        r = send(edge, listener, key, header)
        assert r.status == 429, (listener, r.status, r.body[:200])
        assert r.json()["status"] == 429
        assert cost_stack.level(backend, ACTION, key) == pytest.approx(cost_stack.BUDGET, abs=1)
    # A 200 would have queued a commit of 700 within 20 ms; none may come.
    assert cost_stack.commits(edge) == before


def test_a_client_cost_id_never_reaches_the_upstream_nor_picks_the_commit(backend, edge):
    key = fresh_key()
    first = send(edge, "LISTEN_OPEN_PORT", key, [("x-max-tokens", b"200"), ("x-use", b"50")])
    assert first.status == 200
    [earlier] = first.json()["cost_ids"]
    # 200 reserved, 50 used: 150 given back once the commit lands.
    stack.wait_until(lambda: cost_stack.level(backend, ACTION, key) == pytest.approx(50, abs=0.1),
                     "the first commit")
    forged = [(COST_ID, earlier.encode()), (COST_ID, b"client-chosen"), ("x-max-tokens", b"300"), ("x-use", b"70")]
    second = send(edge, "LISTEN_OPEN_PORT", key, forged)
    assert second.status == 200
    ids = second.json()["cost_ids"]
    # One id upstream, the filter's own: neither the earlier request's nor the client's.
    assert len(ids) == 1 and ids[0] not in (earlier, "client-chosen"), ids
    # Its commit is its own: 300 reserved, 70 used -> 120 in all. Had it carried the earlier id,
    # the backend would have taken it for a retry of the first (duplicate) and kept 300: 350.
    stack.wait_until(lambda: cost_stack.level(backend, ACTION, key) == pytest.approx(120, abs=0.1),
                     "the second request's own commit")
    # The earlier commit was neither replayed nor undone.
    copy = {"action": ACTION, "key": key, "reserved": 200, "actual": 50, "id": earlier, "reserved_at_ms": 0}
    answer = requests.post(f"{backend.decision_url}/v1/commit", json=copy, timeout=5).json()
    assert answer["duplicate"] is True, answer
    assert cost_stack.level(backend, ACTION, key) == pytest.approx(120, abs=0.1)
