"""No key a client controls turns into a free pass on the two kinds of route test_no_free_pass.py
does not attack: routes with all-or-nothing checks (`checks`, all or nothing, one
`POST /v1/throttle/all`) and leased routes (a rule with `lease`: admissions from the lease table
in shared data and the workers' pockets, with no callout). Keys at odd sizes and bytes (empty,
1 byte, 128 and 129 bytes around the digest bound, 40 KB, non-UTF-8, quotes, backslashes, JSON
specials, `sha256:` lookalikes, a key equal to another check's key) go through real Envoys
(`--concurrency 2`), the real backend and a real redis-server, over both JSON callouts
(`grpc_stream`, the default, and `http`).

Every listener here runs `failure_mode: allow`, so a backend 4xx or 5xx on an odd key would be a
200 with `x-sluice-failure`: a free pass. The filter configurations are this file's own (written
into the rendered templates envoy/e2e_lease.yaml and envoy/e2e_grpc.yaml, whose clusters and
upstreams are reused), with action names fresh per run, so no other test's rules or keys count."""

import concurrent.futures
import hashlib
import json
import re
import socket
import uuid

import pytest
import requests

import stack
from lease_stack import PER_HOUR, counters, delta
from test_all import reset

TIMEOUT_MS = 1000  # exact counts are under test, not latency: no callout timeout on a busy machine
RUN = uuid.uuid4().hex[:6]
USER_CAP, ORG_CAP = 3, 5  # the multi route's checks: per user (x-user), per org (x-org)
LEASE_CAP, LEASE_MAX, LEASE_TTL = 40, 24, "10s"  # grants of 19 and less: pockets form at >= 16
EXTRA = 30  # requests past the capacity, then as many again once the backend is empty (spend_all)


def actions(proto):
    p = proto[0]
    return {"user": f"np_{RUN}_{p}_user", "org": f"np_{RUN}_{p}_org", "lease": f"np_{RUN}_{p}_lease",
            "crowded": f"np_{RUN}_{p}_crowded"}


# --- the key the filter sends, as documented in filter/src/key.rs ---------------------------------

def sent_key(raw):
    """The backend key for header bytes `raw`: UTF-8 kept with `%` as `%25`, each invalid byte as
    `%XX`; over 128 bytes, or starting with `sha256:`, the `sha256:` digest of the raw bytes. An
    empty header falls back to the default key `anonymous` (no `on_missing` here)."""
    if raw == b"":
        return "anonymous"
    out = []
    for ch in raw.decode("utf-8", "surrogateescape"):
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"%{o - 0xDC00:02X}")
        else:
            out.append("%25" if ch == "%" else ch)
    encoded = "".join(out)
    if len(encoded.encode()) > 128 or encoded.startswith("sha256:"):
        return "sha256:" + hashlib.sha256(raw).hexdigest()
    return encoded


def digest_spelled(raw):
    return b"sha256:" + hashlib.sha256(raw).hexdigest().encode()


def test_the_key_model_matches_the_filters_own_vectors():
    # filter/src/key.rs's unit tests, so a wrong model here fails here and not as a bucket mismatch.
    assert sent_key(b"caf\xc3\xa9\xff\xfe%") == "café%FF%FE%25"
    assert sent_key(b"k" * 128) == "k" * 128
    assert len(sent_key(b"\xff" * 42)) == 126
    assert sent_key(b"\xff" * 43).startswith("sha256:")
    assert sent_key(b"sha256:") != "sha256:"


def tag():
    return uuid.uuid4().hex[:12].encode()


# (what, key from a fresh tag): every odd key sent through Envoy. Untagged ones ("empty", "1 byte")
# are the same bytes each time: each case resets their buckets first.
ODD = {
    "empty": lambda t: b"",
    "1 byte": lambda t: b"q",
    "1 non-UTF-8 byte": lambda t: b"\xfe",
    "128 bytes, at the bound": lambda t: t + b"k" * (128 - len(t)),
    "129 bytes, just past it": lambda t: t + b"k" * (129 - len(t)),
    "40 KB of non-UTF-8, quotes, backslashes": lambda t: t + b'\xff"\\' * 13_333,
    "non-UTF-8": lambda t: t + b"\xc3\x28\xa0\xa1\xed\xa0\x80\xff",
    "quotes and backslashes": lambda t: t + b'"\\"\\\\\'"',
    "JSON specials": lambda t: t + b'","action":"x","quantity":0,"key":"\\u0000}]',
    "percent escapes": lambda t: t + b"%FF%25%",
    "sha256 lookalike": lambda t: b"sha256:" + t,
    "sha256 of another key, spelled out": lambda t: digest_spelled(t + b"k" * 200),
}


def neighbour(key):
    """Another user's key, one byte away (the empty key's neighbour is any other user)."""
    if not key:
        return b"e"
    return key[:-1] + bytes([key[-1] ^ 1])


# --- the stacks -------------------------------------------------------------------------------------

def filter_config(proto, names, crowded=False):
    cluster = "sluice_backend" if proto == "http" else "sluice_rls"
    backend = {"cluster": cluster, "protocol": proto, "timeout_ms": TIMEOUT_MS}
    if proto == "http":
        backend["authority"] = "sluice"
    routes = [{"match": {"path_prefix": "/lease/"}, "action": names["crowded" if crowded else "lease"],
               "key": {"source": "header", "name": "x-user"}}]
    if not crowded:
        routes.insert(0, {"match": {"path_prefix": "/multi/"}, "checks": [
            {"action": names["user"], "key": {"source": "header", "name": "x-user"}},
            {"action": names["org"], "key": {"source": "header", "name": "x-org"}}]})
    return {"backend": backend, "failure_mode": "allow",
            "denial_cache": {"enabled": True, "max_ttl_ms": 600},
            # One slot: every key's lease contends for the same entry, so only the identity
            # stored in it tells two keys apart.
            "lease": {"enabled": True, "slots": 1} if crowded else {"enabled": True},
            "routes": routes}


def rewrite_filters(path, configs):
    """Replaces, in order, each wasm filter's `vm_id` and configuration (the `value: |` block) of
    the rendered Envoy config at `path` with `configs` ([(vm_id, dict)])."""
    lines = path.read_text().split("\n")
    out, i, vm, value = [], 0, 0, 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.strip().startswith("vm_id:"):
            line = line[:line.index("vm_id:")] + f"vm_id: {configs[vm][0]}"
            vm += 1
        out.append(line)
        if line.strip() == "value: |":
            indent = len(line) - len(line.lstrip()) + 2
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) >= indent):
                i += 1
            out += [" " * indent + s for s in json.dumps(configs[value][1], indent=2).split("\n")]
            value += 1
    assert vm == value == len(configs), (vm, value)
    path.write_text("\n".join(out))


@pytest.fixture(scope="module", params=["grpc_stream", "http"])
def edge(request, tmp, rls_backend, upstream):
    """(protocol, backend, envoy, action names): one Envoy whose open listener has the multi route
    and the leased route (default slots) and whose closed listener (failure_mode allow as well,
    its own VM) has a leased route on a one-slot lease table."""
    proto = request.param
    names = actions(proto)
    if proto == "http":
        e = stack.Envoy(tmp, "e2e_lease.yaml", {"BACKEND_PORT": rls_backend.decision_port, "TIMEOUT_MS": TIMEOUT_MS,
                                                "REPORT_PERIOD_MS": 1000},
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT", "UPSTREAM_PORT"])
    else:
        e = stack.Envoy(tmp, "e2e_grpc.yaml", {"RLS_PORT": rls_backend.rls_port, "UPSTREAM_PORT": upstream,
                                               "TIMEOUT_MS": TIMEOUT_MS, "PROTOCOL": proto},
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])
    rewrite_filters(e.config, [("np_main", filter_config(proto, names)),
                               ("np_crowded", filter_config(proto, names, crowded=True))])
    e.start()
    for action, cap in ((names["user"], USER_CAP), (names["org"], ORG_CAP)):
        rls_backend.put_rule({"action": action, "algorithm": "gcra", "capacity": cap, "rate": PER_HOUR})
    for action in (names["lease"], names["crowded"]):
        rls_backend.put_rule({"action": action, "algorithm": "gcra", "capacity": LEASE_CAP, "rate": PER_HOUR,
                              "lease": {"max": LEASE_MAX, "ttl": LEASE_TTL}})
    yield proto, rls_backend, e, names
    e.stop()


def send(envoy, path, lines, listener="LISTEN_OPEN_PORT"):
    """stack.raw_request's exact bytes, but read only up to the end of the answer's body
    (Content-Length), not to Envoy's close: after a local reply to a `connection: close` request
    Envoy waits up to its delayed-close timeout (1 s) for the client to close first, which made
    every cached denial take a second here."""
    head = b"GET " + path + b" HTTP/1.1\r\nhost: e2e\r\n"
    for name, value in lines:
        head += name.encode() + b": " + value + b"\r\n"
    head += b"content-length: 0\r\nconnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", envoy.ports[listener]), timeout=10) as conn:
        conn.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < body_length(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return stack.RawResponse(int(status_line.split()[1]), headers, body)


def body_length(data):
    """The Content-Length of the answer whose head `data` starts with (0 without one)."""
    m = re.search(rb"\r\ncontent-length:\s*(\d+)", data.partition(b"\r\n\r\n")[0], re.IGNORECASE)
    return int(m.group(1)) if m else 0


def peek(backend, action, raw):
    """What the bucket the filter uses for header bytes `raw` has left (a quantity-0 peek)."""
    r = requests.post(f"{backend.decision_url}/v1/throttle",
                      json={"action": action, "key": sent_key(raw), "quantity": 0}, timeout=5)
    assert r.status_code == 200, r.text
    return r.json()["remaining"]


def forget(backend, names, *raws):
    for raw in raws:
        for action in names.values():
            reset(backend, action, sent_key(raw))


def no_failure(responses, what):
    failures = [r.headers["x-sluice-failure"] for r in responses if "x-sluice-failure" in r.headers]
    assert not failures, (what, failures)


# --- all-or-nothing checks -------------------------------------------------------------------------------

def multi(envoy, user, org):
    return send(envoy, b"/multi/x", [("x-user", user), ("x-org", org)])


def assert_denied_by(response, action, what):
    assert response.status == 429, (what, response.status, response.body[:200])
    assert response.json()["action"] == action, (what, response.body[:200])


@pytest.mark.parametrize("what", list(ODD))
def test_an_odd_user_key_gets_the_tightest_limit_and_its_own_buckets(edge, what):
    proto, backend, envoy, names = edge
    key, org = ODD[what](tag()), b"o-" + tag()
    forget(backend, names, key, neighbour(key))
    responses = [multi(envoy, key, org) for _ in range(USER_CAP + 2)]
    assert [r.status for r in responses] == [200] * USER_CAP + [429] * 2, (what, [r.status for r in responses])
    no_failure(responses, what)
    assert_denied_by(responses[-1], names["user"], what)
    # The user's bucket is the one the filter's key names, and the org's was spent exactly once per
    # admission (not by the denials: all or nothing).
    assert peek(backend, names["user"], key) == 0, what
    assert peek(backend, names["org"], org) == ORG_CAP - USER_CAP, what
    # A user one byte away has a bucket of its own.
    r = multi(envoy, neighbour(key), b"o-" + tag())
    assert r.status == 200 and "x-sluice-failure" not in r.headers, (what, r.status, r.headers)
    assert r.headers["x-ratelimit-remaining"] == str(USER_CAP - 1), (what, r.headers)


@pytest.mark.parametrize("what", list(ODD))
def test_an_odd_org_key_is_spent_exactly_across_users(edge, what):
    proto, backend, envoy, names = edge
    org, users = ODD[what](tag()), [b"u-" + tag() for _ in range(ORG_CAP - 1)]
    forget(backend, names, org)
    # Two admissions each for two users spend four of the org's five.
    first = [multi(envoy, u, org) for u in users[:2] for _ in range(2)]
    assert [r.status for r in first] == [200] * 4, (what, [r.status for r in first])
    # A third user is still under its own limit: the org's is the tightest now.
    last = [multi(envoy, users[2], org) for _ in range(3)]
    assert [r.status for r in last] == [200, 429, 429], (what, [r.status for r in last])
    no_failure(first + last, what)
    assert_denied_by(last[-1], names["org"], what)
    assert peek(backend, names["org"], org) == 0, what
    assert [peek(backend, names["user"], u) for u in users[:3]] == [USER_CAP - 2, USER_CAP - 2, USER_CAP - 1], what


@pytest.mark.parametrize("what", list(ODD))
def test_one_key_in_both_checks_fills_two_distinct_buckets(edge, what):
    proto, backend, envoy, names = edge
    key = ODD[what](tag())[:25_000]  # twice 40 KB is past Envoy's 60 KiB of headers
    forget(backend, names, key)
    responses = [multi(envoy, key, key) for _ in range(USER_CAP + 2)]
    assert [r.status for r in responses] == [200] * USER_CAP + [429] * 2, (what, [r.status for r in responses])
    no_failure(responses, what)
    assert_denied_by(responses[-1], names["user"], what)
    assert (peek(backend, names["user"], key), peek(backend, names["org"], key)) == (0, ORG_CAP - USER_CAP), what


def test_an_empty_key_shares_the_default_keys_bucket(edge):
    # Documented (filter/src/config.rs DEFAULT_MISSING_KEY): an empty or absent header without
    # `on_missing` is metered under the key `anonymous`, so it is never free; a user whose id is
    # literally `anonymous` shares that bucket.
    proto, backend, envoy, names = edge
    forget(backend, names, b"anonymous")
    org = b"o-" + tag()
    codes = [multi(envoy, b"", org).status for _ in range(2)]
    codes += [send(envoy, b"/multi/x", [("x-org", org)]).status]
    codes += [multi(envoy, b"anonymous", org).status for _ in range(2)]
    assert codes == [200, 200, 200, 429, 429], codes


# --- leased routes --------------------------------------------------------------------------------

def hammer(envoy, keys, per_key, listener="LISTEN_OPEN_PORT", threads=6):
    """`per_key` requests for each of `keys`, interleaved, from `threads` threads, each on a fresh
    connection (so they land on both of Envoy's workers). Returns the responses per key."""
    order = [k for _ in range(per_key) for k in range(len(keys))]

    def one(k):
        return k, send(envoy, b"/lease/x", [("x-user", keys[k])], listener)

    before = worker_connections(envoy, listener)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(one, order, timeout=60))
    after = worker_connections(envoy, listener)
    spread = [after.get(w, 0) - before.get(w, 0) for w in range(envoy.concurrency)]
    assert min(spread) > 0, f"connections per worker: {spread}"
    return [[r for k, r in done if k == i] for i in range(len(keys))]


def spend_all(envoy, keys, listener="LISTEN_OPEN_PORT"):
    """Hammers `keys` past their capacity, then once more: units can still sit in the lease table or
    a worker's pocket when the first pass ends (a grant stored after that worker's last requests
    were already on their way: to the empty backend, or answered from the denial cache; seen in CI
    as 38 admitted and 0 lost of 40). The backend is empty by then, so no new grant forms, and the
    second pass, on both workers again, spends what is left. Responses per key."""
    first = hammer(envoy, keys, LEASE_CAP + EXTRA, listener)
    second = hammer(envoy, keys, EXTRA, listener)
    return [a + b for a, b in zip(first, second)]


def worker_connections(envoy, listener):
    """Connections each of Envoy's workers accepted on `listener` so far, by worker number."""
    prefix = f"listener.127.0.0.1_{envoy.ports[listener]}.worker_"
    return {int(name[len(prefix):].split(".")[0]): n for name, n in envoy.stats(prefix).items()
            if name.startswith(prefix) and name.endswith(".downstream_cx_total")}


def admitted(responses, what):
    statuses = {r.status for r in responses}
    assert statuses <= {200, 429}, (what, sorted(statuses))
    no_failure(responses, what)
    return sum(r.status == 200 for r in responses)


@pytest.mark.parametrize("what", list(ODD))
def test_an_odd_key_on_a_leased_route_gets_exactly_the_capacity(edge, what):
    proto, backend, envoy, names = edge
    key = ODD[what](tag())
    forget(backend, names, key)
    before = counters(envoy)
    [responses] = spend_all(envoy, [key])
    after = counters(envoy)
    # Every unit debited for the key (each callout's own and its lease's) is admitted once or
    # counted lost (sluice.lease_units_lost: debited, never spent, e.g. a grant that could not be
    # stored), whichever worker spent it; never more than the capacity (no free pass).
    assert "lease_units_lost" in after, "the filter defines sluice.lease_units_lost"
    count, lost = admitted(responses, what), delta(after, before, "lease_units_lost")
    print(f"{proto} {what!r}: admitted {count}, lease units lost {lost}")
    assert count <= LEASE_CAP, (what, count, lost)
    assert count + lost == LEASE_CAP, (what, count, lost, [r.status for r in responses])
    assert peek(backend, names["lease"], key) == 0, what
    assert delta(after, before, "lease_hits") > 0, f"{what}: no admission came from a lease"


# Pairs of keys a sloppy identity would merge: each must get its own capacity while both are spent
# at once (if one spent the other's lease, it would get more): at most the capacity each, and
# exactly both capacities once the units counted lost (sluice.lease_units_lost, one count for the
# Envoy, so summed over the pair) are added.
PAIRS = {
    "last byte \\xff vs \\xfe": lambda t: (t + b"\xff", t + b"\xfe"),
    "%FF spelled vs the byte": lambda t: (t + b"%FF", t + b"\xff"),
    "a long key vs its digest spelled out": lambda t: (t + b"L" * 200, digest_spelled(t + b"L" * 200)),
    "129 bytes differing in the last": lambda t: (t + b"k" * (128 - len(t)) + b"a", t + b"k" * (128 - len(t)) + b"b"),
    "40 KB differing in the last byte": lambda t: (t + b"x" * 40_000 + b"\xff", t + b"x" * 40_000 + b"\xfe"),
}


@pytest.mark.parametrize("what", list(PAIRS))
def test_two_close_keys_never_spend_each_others_lease(edge, what):
    proto, backend, envoy, names = edge
    keys = PAIRS[what](tag())
    before = counters(envoy)
    per_key = spend_all(envoy, keys)
    after = counters(envoy)
    counts, lost = [admitted(r, what) for r in per_key], delta(after, before, "lease_units_lost")
    print(f"{proto} {what!r}: admitted {counts}, lease units lost {lost}")
    assert all(c <= LEASE_CAP for c in counts), (what, counts, lost)
    assert sum(counts) + lost == 2 * LEASE_CAP, (what, counts, lost)
    assert delta(after, before, "lease_hits") > 0, f"{what}: no admission came from a lease"


@pytest.mark.parametrize("what", list(PAIRS))
def test_two_close_keys_in_one_lease_slot_never_over_admit(edge, what):
    # One slot: each key's lease evicts the other's (units lost: under-admission, allowed), and only
    # the identity in the entry and in the pockets tells them apart.
    proto, backend, envoy, names = edge
    keys = PAIRS[what](tag())
    per_key = hammer(envoy, keys, LEASE_CAP + EXTRA, listener="LISTEN_CLOSED_PORT")
    counts = [admitted(r, what) for r in per_key]
    assert all(1 <= c <= LEASE_CAP for c in counts), (what, counts)
    # An evicted lease's units go back to the backend (a commit of its grant), so the backend may
    # hold some again; but no unit is both admitted and given back.
    left = [peek(backend, names["crowded"], k) for k in keys]
    assert all(c + n <= LEASE_CAP for c, n in zip(counts, left)), (what, counts, left)
