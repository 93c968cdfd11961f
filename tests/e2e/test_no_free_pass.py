"""No input a client controls turns into a free pass: every request the filter meters gets a
decision from the backend (never a backend 4xx that fail-open lets through), and what Envoy itself
refuses never reaches the upstream. Keys, paths, query strings, header counts and odd bytes, each
through the real Envoy, backend and Redis."""

import uuid

import pytest

import stack

LOGIN = {"action": "e2e_login", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}
PATH_RULE = {"action": "e2e_path", "algorithm": "sliding_log", "capacity": 3, "window": "60s"}


def tag():
    return uuid.uuid4().hex[:12].encode()


def send(envoy, method, target, header_lines):
    return stack.raw_request(envoy.ports["LISTEN_OPEN_PORT"], method, target, header_lines)


def assert_metered(responses, capacity, what):
    """Exactly `capacity` admitted, the rest 429, and no backend failure on any of them."""
    codes = [r.status for r in responses]
    assert codes == [200] * capacity + [429] * (len(codes) - capacity), (what, codes)
    failures = {r.headers.get("x-sluice-failure") for r in responses} - {None}
    assert not failures, (what, failures)
    assert responses[0].headers["x-ratelimit-remaining"] == str(capacity - 1), what


def long_keys():
    return {
        # Each invalid byte becomes %XX: 90 KB of key, past the backend's 64 KiB body limit.
        "30k_non_utf8": tag() + b"\xff" * 30_000,
        # JSON doubles each quote: 100 KB of body.
        "50k_quotes": tag() + b'"' * 50_000,
    }


@pytest.mark.parametrize("variant", ["30k_non_utf8", "50k_quotes"])
def test_a_huge_key_gets_exactly_capacity_then_429s(envoy, backend, variant):
    # Before the key bound, both got 30 x 200 with x-sluice-failure: status_413.
    backend.put_rule(LOGIN)
    key = long_keys()[variant]
    responses = [send(envoy, "POST", b"/login", [("x-user-id", key)]) for _ in range(30)]
    assert_metered(responses, 5, variant)
    # A second huge key differing in its last byte is a bucket of its own.
    other = key[:-1] + b"!"
    assert send(envoy, "POST", b"/login", [("x-user-id", other)]).status == 200


# (what, header lines): keys Envoy passes to the filter, each with a fresh tag.
ODD_KEYS = {
    "tab inside": lambda t: [("x-user-id", t + b"a\tb")],
    "json and redis specials": lambda t: [("x-user-id", t + b'{}"\\/h:%00%')],
    "emoji and line separator": lambda t: [("x-user-id", t + "\U0001f600\u2028".encode())],
    "digest lookalike": lambda t: [("x-user-id", b"sha256:" + t)],
    "90 repeated 600 byte headers": lambda t: [("x-user-id", t + b"v" * 600)] * 90,
}


@pytest.mark.parametrize("what", sorted(ODD_KEYS))
def test_odd_keys_are_metered(envoy, backend, what):
    backend.put_rule(LOGIN)
    lines = ODD_KEYS[what](tag())
    responses = [send(envoy, "POST", b"/login", lines) for _ in range(7)]
    assert_metered(responses, 5, what)


# Bytes Envoy's HTTP/1 codec refuses itself (400, or 431 past the header count limit): never a
# free pass, since the request goes nowhere.
REFUSED_BY_ENVOY = {
    "control byte in a header": lambda t: (b"/login", [("x-user-id", t + b"\x01")]),
    "DEL in a header": lambda t: (b"/login", [("x-user-id", t + b"\x7f")]),
    "NUL in a header": lambda t: (b"/login", [("x-user-id", t + b"\x00")]),
    "non-ASCII path": lambda t: (b"/pathkey/" + t + b"\xff", []),
    "fragment in the target": lambda t: (b"/login#" + t, [("x-user-id", t)]),
    "over 100 headers": lambda t: (b"/login", [("x-user-id", t)] * 101),
    "headers over 60 KiB": lambda t: (b"/login", [("x-user-id", t + b"k" * 70_000)]),
}


@pytest.mark.parametrize("what", sorted(REFUSED_BY_ENVOY))
def test_what_envoy_refuses_never_reaches_the_upstream(envoy, backend, what):
    backend.put_rule(LOGIN)
    target, lines = REFUSED_BY_ENVOY[what](tag())
    r = send(envoy, "POST", target, lines)
    assert r.status in (400, 431), (what, r.status)
    assert b'"path"' not in r.body, "the upstream answered"


def test_path_keys_are_bounded_and_the_query_string_does_not_escape(envoy, backend):
    backend.put_rule(PATH_RULE)
    cases = {
        "40 KB path": lambda t: [b"/pathkey/" + t + b"p" * 40_000] * 5,
        "percent escapes": lambda t: [b"/pathkey/" + t + b"%FF%25%41"] * 5,
        "query varies": lambda t: [b"/pathkey/" + t + b"?n=" + str(i).encode() + b"q" * 50_000
                                   for i in range(5)],
    }
    for what, targets in cases.items():
        responses = [send(envoy, "GET", target, []) for target in targets(tag())]
        assert_metered(responses, 3, what)


@pytest.mark.parametrize("target", [b"//login", b"/./login", b"/x/../login", b"/%6Cogin", b"/login?next=/"])
def test_spellings_of_a_path_share_its_route(envoy, backend, target):
    # e2e.yaml sets normalize_path and merge_slashes: without them, each of these missed the
    # `path: /login` route and passed unmetered.
    backend.put_rule(LOGIN)
    key = tag()
    responses = [send(envoy, "POST", b"/login", [("x-user-id", key)]) for _ in range(4)]
    responses += [send(envoy, "POST", target, [("x-user-id", key)]) for _ in range(3)]
    assert_metered(responses, 5, target)


def test_a_request_without_the_key_header_is_limited_by_client_ip(envoy, backend):
    # The route's on_missing is client_ip: dropping the header is not a way out. All test clients
    # share 127.0.0.1, so this runs on its own rule: a fresh window per session.
    backend.put_rule(dict(LOGIN, capacity=1000))
    before = backend.decisions("e2e_login")
    first = send(envoy, "POST", b"/login", [])
    second = send(envoy, "POST", b"/login", [])
    for r in (first, second):
        assert r.status == 200 and "x-sluice-failure" not in r.headers
        assert r.headers["ratelimit-policy"].startswith('"e2e_login";q=1000;')
    assert int(second.headers["x-ratelimit-remaining"]) < int(first.headers["x-ratelimit-remaining"])
    assert backend.decisions("e2e_login") == before + 2
