"""Bad input on both listeners: malformed JSON, wrong types, huge numbers, zero and negative
rates, durations "0s" and "99999999h", 10 KB keys, non-UTF-8, control characters, unknown fields,
broken HTTP. Every refusal is a 4xx (JSON naming the field where there is one), never a 5xx, and
the server stays up and keeps deciding. Odd but valid keys are decided and limited like any other."""

import json
import socket
import time

import pytest
import requests

import rstack

RULE = {"action": "bad_in", "algorithm": "gcra", "capacity": 3, "rate": {"count": 1, "period": "1h"}}
TEN_KB = "k" * 10240


@pytest.fixture(scope="module")
def backend(tmp, redis):
    yield from rstack.running_backend(tmp, redis, RULE)


def rule(**overrides):
    r = {"action": "r1", "algorithm": "gcra", "capacity": 5, "rate": {"count": 10, "period": "1m"}}
    r.update(overrides)
    return json.dumps(r).encode()


# (name, path, body, field): every one a 4xx; `field` is what the JSON error must name.
DECISION = [
    ("truncated JSON", "/v1/throttle", b'{"action":', "body"),
    ("not JSON", "/v1/throttle", b"action=bad_in&key=k", "body"),
    ("empty body", "/v1/throttle", b"", "body"),
    ("array", "/v1/throttle", b"[]", "body"),
    ("deep nesting", "/v1/throttle", b"[" * 30000 + b"]" * 30000, "body"),
    ("non-UTF-8 bytes", "/v1/throttle", b'{"action":"bad_in","key":"\xff\xfe\xc3("}', "body"),
    ("raw control character", "/v1/throttle", b'{"action":"bad_in","key":"a\x01b"}', "body"),
    ("lone surrogate", "/v1/throttle", b'{"action":"bad_in","key":"\\ud800"}', "body"),
    ("action a number", "/v1/throttle", b'{"action":7,"key":"k"}', "action"),
    ("action null", "/v1/throttle", b'{"action":null,"key":"k"}', "action"),
    ("action missing", "/v1/throttle", b'{"key":"k"}', "action"),
    ("action with NUL", "/v1/throttle", b'{"action":"bad\\u0000in","key":"k"}', "action"),
    ("action 10 KB", "/v1/throttle", json.dumps({"action": "a" * 10240, "key": "k"}).encode(), "action"),
    ("key an object", "/v1/throttle", b'{"action":"bad_in","key":{"a":1}}', "key"),
    ("key missing", "/v1/throttle", b'{"action":"bad_in"}', "key"),
    ("quantity negative", "/v1/throttle", b'{"action":"bad_in","key":"k","quantity":-1}', "quantity"),
    ("quantity fraction", "/v1/throttle", b'{"action":"bad_in","key":"k","quantity":0.5}', "quantity"),
    ("quantity a string", "/v1/throttle", b'{"action":"bad_in","key":"k","quantity":"1"}', "quantity"),
    ("quantity huge", "/v1/throttle", b'{"action":"bad_in","key":"k","quantity":18446744073709551616}', "quantity"),
    ("quantity 1e400", "/v1/throttle", b'{"action":"bad_in","key":"k","quantity":1e400}', "body"),
    ("unknown field", "/v1/throttle", b'{"action":"bad_in","key":"k","priority":9}', "priority"),
    ("body over 64 KiB", "/v1/throttle", json.dumps({"action": "bad_in", "key": "k" * 70000}).encode(), "body"),
    ("all: no checks", "/v1/throttle/all", b'{"checks":[]}', "checks"),
    ("all: checks missing", "/v1/throttle/all", b'{}', "checks"),
    ("all: nine checks", "/v1/throttle/all",
     json.dumps({"checks": [{"action": "bad_in", "key": "k"}] * 9}).encode(), "checks"),
    ("all: bad action", "/v1/throttle/all", b'{"checks":[{"action":"bad_in","key":"k"},{"action":"a b","key":"k"}]}',
     "checks[1].action"),
    ("all: action 10 KB", "/v1/throttle/all", json.dumps({"checks": [{"action": "a" * 10240, "key": "k"}]}).encode(),
     "checks[0].action"),
    ("all: a lease", "/v1/throttle/all", b'{"checks":[{"action":"bad_in","key":"k","lease":true}]}', "checks[0].lease"),
    ("all: quantity huge", "/v1/throttle/all", b'{"checks":[{"action":"bad_in","key":"k","quantity":1000000001}]}',
     "checks[0].quantity"),
    ("all: a check not an object", "/v1/throttle/all", b'{"checks":[7]}', "checks[0]"),
    ("cell count zero", "/v1/cl.throttle", b'{"key":"k","max_burst":1,"count":0,"period":60}', "count"),
    ("cell period zero", "/v1/cl.throttle", b'{"key":"k","max_burst":1,"count":1,"period":0}', "period"),
    ("cell negative burst", "/v1/cl.throttle", b'{"key":"k","max_burst":-1,"count":1,"period":60}', "max_burst"),
    ("cell u64 max", "/v1/cl.throttle",
     b'{"key":"k","max_burst":18446744073709551615,"count":18446744073709551615,"period":18446744073709551615}',
     "max_burst"),
    ("cell burst too long to drain", "/v1/cl.throttle", b'{"key":"k","max_burst":1000000,"count":1,"period":7776000}',
     "max_burst"),
    ("cell period a string", "/v1/cl.throttle", b'{"key":"k","max_burst":1,"count":1,"period":"60s"}', "period"),
    ("cell unknown field", "/v1/cl.throttle", b'{"key":"k","max_burst":1,"count":1,"period":60,"x":1}', "x"),
]

ADMIN = [
    ("malformed JSON", "/v1/rules/r1", b'{"action":"r1",', "body"),
    ("non-UTF-8 bytes", "/v1/rules/r1", b'{"action":"r1","description":"\xff"}', "body"),
    ("rule is null", "/v1/rules/r1", b"null", "rule"),
    ("rule is a string", "/v1/rules/r1", b'"gcra"', "rule"),
    ("zero rate", "/v1/rules/r1", rule(rate={"count": 0, "period": "1m"}), "rate.count"),
    ("negative rate", "/v1/rules/r1", rule(rate={"count": -5, "period": "1m"}), "rate.count"),
    ("zero capacity", "/v1/rules/r1", rule(capacity=0), "capacity"),
    ("negative capacity", "/v1/rules/r1", rule(capacity=-1), "capacity"),
    ("huge capacity", "/v1/rules/r1", rule(capacity=18446744073709551615), "capacity"),
    ("capacity 1e300", "/v1/rules/r1", rule(capacity=1e300), "capacity"),
    ("capacity a string", "/v1/rules/r1", rule(capacity="5"), "capacity"),
    ("period 0s", "/v1/rules/r1", rule(rate={"count": 1, "period": "0s"}), "rate.period"),
    ("period 99999999h", "/v1/rules/r1", rule(rate={"count": 1, "period": "99999999h"}), "rate.period"),
    ("period negative", "/v1/rules/r1", rule(rate={"count": 1, "period": "-5s"}), "rate.period"),
    ("period a number", "/v1/rules/r1", rule(rate={"count": 1, "period": 60}), "rate.period"),
    ("period with NUL", "/v1/rules/r1", rule(rate={"count": 1, "period": "1\u0000s"}), "rate.period"),
    ("window 0s", "/v1/rules/r1", rule(algorithm="fixed_window", rate=None, window="0s"), None),
    ("window 99999999h", "/v1/rules/r1",
     json.dumps({"action": "r1", "algorithm": "sliding_log", "capacity": 5, "window": "99999999h"}).encode(), "window"),
    ("window for gcra", "/v1/rules/r1", rule(window="1m"), None),
    ("unknown algorithm", "/v1/rules/r1", rule(algorithm="nope"), "algorithm"),
    ("unknown field", "/v1/rules/r1", rule(priority=1), "priority"),
    ("unknown nested field", "/v1/rules/r1", rule(rate={"count": 1, "period": "1m", "burst": 2}), "rate.burst"),
    ("bad mode", "/v1/rules/r1", rule(mode="maybe"), "mode"),
    ("description 10 KB", "/v1/rules/r1", rule(description="d" * 10240), "description"),
    ("action differs from path", "/v1/rules/r1", rule(action="r2"), "action"),
    ("path action with space", "/v1/rules/a%20b", rule(action="a b"), "action"),
    ("path action with NUL", "/v1/rules/a%00b", rule(), "action"),
    ("path action 10 KB", "/v1/rules/" + "a" * 10240, rule(), "action"),
    ("path action non-UTF-8", "/v1/rules/%FF%FE", rule(), "action"),
]

# Every state-changing endpoint takes only this type (docs/security.md).
JSON = {"content-type": "application/json"}


def assert_clear_4xx(r, field, what):
    assert 400 <= r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"
    if r.status_code in (404, 405) and not r.content:
        return
    body = r.json()
    assert body["error"] and body["message"], f"{what}: {body}"
    if field is not None:
        assert body.get("field") == field, f"{what}: expected field {field!r}: {body}"


@pytest.mark.parametrize("name,path,body,field", DECISION, ids=[c[0] for c in DECISION])
def test_decision_listener_refuses_bad_input_with_a_4xx(backend, name, path, body, field):
    # Declared JSON: an undeclared body is refused (415) before it is read (issue 40).
    r = requests.post(backend.decision_url + path, data=body, headers=JSON, timeout=10)
    assert_clear_4xx(r, field, name)


@pytest.mark.parametrize("name,path,body,field", ADMIN, ids=[c[0] for c in ADMIN])
def test_admin_listener_refuses_bad_input_with_a_4xx(backend, name, path, body, field):
    r = backend.admin("PUT", path, data=body, headers=JSON, timeout=10)
    assert_clear_4xx(r, field, name)
    assert backend.admin("GET", "/v1/rules/r1").status_code == 404, "nothing was stored"


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("segment", ["%FF%FE", "a%00b", "a%20b", "a" * 10240])
def test_bad_path_actions_are_a_json_400_naming_action(backend, method, segment):
    assert_clear_4xx(backend.admin(method, "/v1/rules/" + segment), "action", segment[:20])


@pytest.mark.parametrize("query,field", [
    ("limit=-1", "limit"), ("limit=0", "limit"), ("limit=99999999999999999999", "limit"), ("limit=abc", "limit"),
    ("action=%FF", None), ("action=a%20b", "action"),
])
def test_levels_query_refuses_bad_input(backend, query, field):
    assert_clear_4xx(backend.admin("GET", "/v1/levels?" + query), field, query)


@pytest.mark.parametrize("body,field", [
    (b"", "body"), (b"\xff", "body"), (b'{"token": 1}', "token"), (b'{"token": "x", "extra": 1}', None),
    (json.dumps({"token": "t" * 10240}).encode(), None),
])
def test_login_refuses_bad_input(backend, body, field):
    r = requests.post(backend.admin_url + "/v1/session", data=body, headers=JSON, timeout=10)
    assert_clear_4xx(r, field, body[:40])


@pytest.mark.parametrize("key", [TEN_KB, "a\u0000b\u0007c\u001b[31m", "ünïcødé ✓ 🚦", "", " ", "{tag}", "h:abc",
                                 "x" * 128, "x" * 129, "\u2028\u2029", "../../etc/passwd"])
def test_odd_but_valid_keys_are_decided_and_limited(backend, key):
    """A key is any string: odd ones (10 KB, control characters, braces that would move a Cluster
    hash tag, the digest prefix) are limited like any other, each its own bucket."""
    tag = rstack.user("odd")
    answers = [backend.throttle("bad_in", tag + key) for _ in range(4)]
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    assert [r.json()["allowed"] for r in answers] == [True, True, True, False]
    deadline = time.monotonic() + 5  # activity reaches the levels in batches of 200 ms
    while True:
        levels = backend.admin("GET", "/v1/levels?action=bad_in&limit=1000").json()
        seen = [k for k in levels["actions"][0]["keys"] if k["key"] == tag + key]
        if seen or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert seen and seen[0]["remaining"] == 0, "the key is stored and shown exactly as sent"


RAW = [
    ("not HTTP", b"GARBAGE\r\n\r\n"),
    ("binary", bytes(range(256)) * 4),
    ("request line 100 KB", b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("headers 200 KB", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"p" * 200_000 + b"\r\n\r\n"),
    ("non-UTF-8 header", b"GET /v1/rules HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n"),
    ("content-length lies", b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}"),
    ("bad chunk", b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n"),
    ("two content-lengths", b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
]


def raw_exchange(port, payload):
    """Sends raw bytes; returns the status of the first response line, or None if the server
    closed without one (also fine: it refused to parse)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return None
        data = b""
        try:
            while len(data) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize("listener", ["decision", "admin"])
@pytest.mark.parametrize("name,payload", RAW, ids=[c[0] for c in RAW])
def test_broken_http_gets_no_5xx(backend, listener, name, payload):
    port = backend.decision_port if listener == "decision" else backend.admin_port
    status = raw_exchange(port, payload)
    # Closing without an answer is a refusal too; a big but well-formed request may be served.
    assert status is None or status < 500, f"{name}: {status}"
    if name != "headers 200 KB":
        assert status is None or status >= 400, f"{name}: {status}"


def test_the_server_is_still_up_and_deciding_after_all_of_it(backend):
    """Runs last in this module (pytest keeps file order)."""
    assert backend.proc.alive()
    for url in (backend.decision_url, backend.admin_url):
        assert requests.get(url + "/healthz", timeout=5).status_code == 200
    who = rstack.user("after")
    assert [backend.throttle("bad_in", who).json()["allowed"] for _ in range(4)] == [True, True, True, False]
    assert "panicked" not in backend.log_text()
