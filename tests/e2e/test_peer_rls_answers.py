"""The answers of sluice's rate limit service, descriptor by descriptor, to the peer's own examples.

envoyproxy/ratelimit's README, section "Examples" (1 to 11): each example's configuration, taken
from the peer's README unchanged (tests/e2e/peer_example/README.peer.txt, sha256-checked with the
other peer files by test_peer_examples.py), loaded by a real `sluice --ratelimit-config`, and the
requests the README describes asked of its rate limit service directly over gRPC, as the README
writes them (domain, descriptors of (key, value) entries): no Envoy can send these, since the
peer's example Envoy configuration names one domain and fixed keys. Asserted: the overall code and
every descriptor's code, current limit and remaining count the peer answers, on memory and on a
real redis-server. What the README says about statistics (examples 8, 10, 11's metric keys) is
not tested: sluice has no statsd, and counts per limit, not per value.

Then the peer's example configuration directory with the descriptors its example Envoy
configuration sends on the routes of the integration scripts quota.sh, token-quota.sh and
multiservice-tokenquota.sh: every descriptor's code and remaining count, which Envoy does not
show (test_peer_examples.py plays the same sequences through Envoy)."""

import re
import time

import pytest
import requests

import rls_wire
import stack
from test_peer_examples import PEER, SLUICE_SEMANTICS

MAX_UINT32 = 4294967295
UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}

# Envoy's own ratelimit filter is not used here, and no Envoy at all: the native pass would run
# the same thing twice.
pytestmark = pytest.mark.skipif(stack.FILTER_BUILD == "native",
                                reason="loads no sluice filter: runs in the wasm pass only")


def readme_examples():
    """{example number: [its YAML blocks, in order]} from the README's "### Examples" section."""
    text = (PEER / "README.peer.txt").read_text()
    section = text[text.index("### Examples\n"):text.index("## Loading Configuration")]
    parts = re.split(r"^#### Example (\d+)\n", section, flags=re.M)
    return {int(n): re.findall(r"```yaml\n(.*?)```", body, flags=re.S) for n, body in zip(parts[1::2], parts[2::2])}


EXAMPLES = readme_examples()


def test_the_readme_has_the_examples_these_tests_play():
    assert {n: len(blocks) for n, blocks in EXAMPLES.items()} == {
        1: 1, 2: 1, 3: 1, 4: 2, 5: 1, 6: 1, 7: 1, 8: 1, 9: 3, 10: 2, 11: 2}


_counter = iter(range(10**6))


@pytest.fixture(params=["memory", "redis"])
def rls(request, tmp_path):
    """`rls(*blocks, args=())`: a fresh sluice serving those configuration blocks (one file each) with
    `args` (SLUICE_SEMANTICS, say), its own
    keys (on the session's redis-server, under a key prefix of its own); returns a
    rls_wire.Client. Each is stopped at the end of the test."""
    procs, clients = [], []

    def start(*blocks, args=()):
        n = next(_counter)
        config = tmp_path / f"config-{n}"
        config.mkdir()
        for i, block in enumerate(blocks):
            (config / f"block{i}.yaml").write_text(block)
        grpc_port, admin_port = stack.free_port(), stack.free_port()
        args = [stack.SLUICE, "--ratelimit-config", str(config), "--grpc-listen", f"127.0.0.1:{grpc_port}",
                "--decision-listen", f"127.0.0.1:{stack.free_port()}", "--admin-listen", f"127.0.0.1:{admin_port}",
                "--admin-token", stack.TOKEN, *args]
        if request.param == "redis":
            redis_port = request.getfixturevalue("redis")
            args += ["--redis-url", f"redis://127.0.0.1:{redis_port}/", "--redis-timeout-ms", "1000",
                     "--key-prefix", f"peer-readme-{n}-{time.time_ns()}:"]
        proc = stack.Proc(args, tmp_path / f"sluice-{n}.log")
        procs.append(proc)

        def ready():
            if not proc.alive():
                raise RuntimeError(f"sluice exited:\n{proc.tail()}")
            return requests.get(f"http://127.0.0.1:{admin_port}/readyz", timeout=1).status_code == 200

        stack.wait_until(ready, "sluice")
        clients.append(rls_wire.Client(grpc_port))
        return clients[-1]

    yield start
    for client in clients:
        client.close()
    stack.stop_all(*reversed(procs))


def within_one_window(unit, margin):
    """Waits for the next window of `unit` (clock-aligned, as the peer's) when fewer than `margin`
    seconds are left in this one; returns the window's index."""
    seconds = UNIT_SECONDS[unit]
    left = seconds - time.time() % seconds
    if left < margin:
        time.sleep(left + 0.01)
    return int(time.time() // seconds)


def in_one_window(unit, sequence, tries=5):
    """`sequence()` within one window of `unit`: started with at least 60% of a second (or 5 s of
    a longer window) left, and again when it ran past the window's end. Only for sequences whose
    counters are new in every window (per-second limits, or values used once)."""
    for _ in range(tries):
        window = within_one_window(unit, 0.6 if unit == "SECOND" else 5.0)
        got = sequence()
        if int(time.time() // UNIT_SECONDS[unit]) == window:
            return got
    raise AssertionError(f"{tries} tries, none within one {unit.lower()}")


def ok(limit, remaining):
    """A descriptor the peer counted and passed: (code, (requests_per_unit, unit, name), remaining)."""
    return ("OK", limit, remaining)


NO_LIMIT = ("OK", None, 0)  # no descriptor of the configuration matches
UNLIMITED = ("OK", None, MAX_UINT32)


def answer(client, domain, *descriptors):
    """(overall code, [(code, limit, remaining)]) of one request."""
    overall, statuses = client.ask(domain, list(descriptors))
    return overall, [(s.code, s.limit, s.remaining) for s in statuses]


def test_example_1_two_values_of_one_key(rls):
    client = rls(*EXAMPLES[1])
    users = (500, "SECOND", "")
    assert answer(client, "mongo_cps", [("database", "users")]) == ("OK", [ok(users, 499)])
    assert answer(client, "mongo_cps", [("database", "default")]) == ("OK", [ok(users, 499)])
    assert answer(client, "mongo_cps", [("database", "other")]) == ("OK", [NO_LIMIT])


MARKETING = [("message_type", "marketing"), ("to_number", "2061111111")]
NUMBER = [("to_number", "2061111111")]
FIVE_A_DAY, HUNDRED_A_DAY = (5, "DAY", ""), (100, "DAY", "")


def test_example_2_nested_descriptors_and_several_in_one_request(rls):
    """The README's request: two descriptors, each limit applies; the answer is their OR."""
    client = rls(*EXAMPLES[2])

    def sequence():
        got = [answer(client, "messaging", MARKETING, NUMBER) for _ in range(5)]
        assert got == [("OK", [ok(FIVE_A_DAY, 4 - i), ok(HUNDRED_A_DAY, 99 - i)]) for i in range(5)]
        overall, statuses = answer(client, "messaging", MARKETING, NUMBER)
        assert overall == "OVER_LIMIT" and statuses[0] == ("OVER_LIMIT", FIVE_A_DAY, 0)
        # Each number has its own limits.
        other = [("message_type", "marketing"), ("to_number", "2062222222")]
        assert answer(client, "messaging", other, [("to_number", "2062222222")]) == (
            "OK", [ok(FIVE_A_DAY, 4), ok(HUNDRED_A_DAY, 99)])

    in_one_window("DAY", sequence, tries=1)


def test_example_2_a_refused_request_counts_its_other_descriptors(rls):
    """The peer increments every descriptor of a request, refused or not: after 5 admitted
    requests, the 6th (refused by the 5 a day) leaves the 100 a day at 94."""
    client = rls(*EXAMPLES[2])

    def sequence():
        for _ in range(5):
            answer(client, "messaging", MARKETING, NUMBER)
        assert answer(client, "messaging", MARKETING, NUMBER)[1][1] == ok(HUNDRED_A_DAY, 94)

    in_one_window("DAY", sequence, tries=1)


def test_example_2_under_sluice_semantics_a_refused_request_counts_nothing(rls):
    """sluice's semantics: the refused 6th request leaves the 100 a day where the 5th left it."""
    client = rls(*EXAMPLES[2], args=SLUICE_SEMANTICS)

    def sequence():
        for _ in range(5):
            answer(client, "messaging", MARKETING, NUMBER)
        assert answer(client, "messaging", MARKETING, NUMBER) == (
            "OVER_LIMIT", [("OVER_LIMIT", FIVE_A_DAY, 0), ok(HUNDRED_A_DAY, 95)])

    in_one_window("DAY", sequence, tries=1)


def test_example_3_the_most_specific_match(rls):
    client = rls(*EXAMPLES[3])
    ten = (10, "SECOND", "")

    def sequence():
        return [answer(client, "edge_proxy_per_ip", [("remote_address", "50.0.0.1")]) for _ in range(11)]

    got = in_one_window("SECOND", sequence)
    assert got == [("OK", [ok(ten, 9 - i)]) for i in range(10)] + [("OVER_LIMIT", [("OVER_LIMIT", ten, 0)])]
    # The blocked address: its own value matches before the key alone.
    assert answer(client, "edge_proxy_per_ip", [("remote_address", "50.0.0.5")]) == (
        "OVER_LIMIT", [("OVER_LIMIT", (0, "SECOND", ""), 0)])


def test_example_4_a_limit_applies_at_its_own_depth(rls):
    request = [("key", "value"), ("subkey", "subvalue")]
    first, second = EXAMPLES[4]
    assert answer(rls(first), "example4", request) == ("OK", [NO_LIMIT]), "two entries, a limit at depth one"
    assert answer(rls(second), "example4", request) == ("OK", [ok((300, "SECOND", ""), 299)])


def test_example_5_unlimited(rls):
    client = rls(*EXAMPLES[5])
    assert [answer(client, "internal", [("ldap", "cn=a")]) for _ in range(3)] == [("OK", [UNLIMITED])] * 3
    assert answer(client, "internal", [("azure", "x")]) == ("OK", [ok((100, "MINUTE", ""), 99)])


def test_example_6_shadow_mode(rls):
    """user-a: 10 a second in shadow mode, never refused (the 11th is over, answered OK with
    nothing remaining); user-b: 20 a second."""
    client = rls(*EXAMPLES[6])
    ten, twenty = (10, "SECOND", ""), (20, "SECOND", "")

    def user(name, n):
        return lambda: [answer(client, "example6", [("service", "auth-service"), ("user", name)]) for _ in range(n)]

    a = in_one_window("SECOND", user("user-a", 11))
    assert a == [("OK", [ok(ten, 9 - i)]) for i in range(10)] + [("OK", [ok(ten, 0)])]
    b = in_one_window("SECOND", user("user-b", 21))
    assert b == [("OK", [ok(twenty, 19 - i)]) for i in range(20)] + [("OVER_LIMIT", [("OVER_LIMIT", twenty, 0)])]


def test_example_7_replaces(rls):
    """With both descriptors, the limit named specific_limit (5 a second) is dropped: not applied
    and not counted (its status has no limit); the replacing 10 a second applies. Alone, the 5 a
    second is untouched."""
    client = rls(*EXAMPLES[7])
    first, second = [("key_1", "value_1"), ("user", "bkthomps")], [("key_2", "value_2"), ("user", "bkthomps")]
    ten = (10, "SECOND", "")

    def sequence():
        both = [answer(client, "example7", first, second) for _ in range(11)]
        alone = answer(client, "example7", first)
        return both, alone

    both, alone = in_one_window("SECOND", sequence)
    assert both == [("OK", [NO_LIMIT, ok(ten, 9 - i)]) for i in range(10)] + [
        ("OVER_LIMIT", [NO_LIMIT, ("OVER_LIMIT", ten, 0)])]
    assert alone == ("OK", [ok((5, "SECOND", "specific_limit"), 4)])


def test_example_8_a_key_without_a_value_and_a_value(rls):
    client = rls(*EXAMPLES[8])

    def sequence():
        return [answer(client, "example8", [("key1", v)]) for v in ("unspecified_value", "unspecified_value2",
                                                                   "value1", "unspecified_value")]

    assert in_one_window("MINUTE", sequence, tries=1) == [
        ("OK", [ok((10, "MINUTE", ""), 9)]), ("OK", [ok((10, "MINUTE", ""), 9)]),
        ("OK", [ok((20, "MINUTE", ""), 19)]), ("OK", [ok((10, "MINUTE", ""), 8)])]


def test_example_9_wildcards(rls):
    trailing, middle, multiple = EXAMPLES[9]
    twenty = (20, "MINUTE", "")

    def sequence():
        t = rls(trailing)
        got = [answer(t, "example9", [("key1", v)])[1][0] for v in ("value1", "value2", "valueXYZ", "value1", "other")]
        assert got == [ok(twenty, 19)] * 3 + [ok(twenty, 18), NO_LIMIT], "each matching value its own threshold"
        m = rls(middle)
        got = [answer(m, "example9", [("path", v)])[1][0] for v in ("/api/123/action", "/api/user-id/action",
                                                                  "/api/123/other")]
        assert got == [ok(twenty, 19), ok(twenty, 19), NO_LIMIT]
        x = rls(multiple)
        got = [answer(x, "example9", [("route", v)])[1][0] for v in (
            "/api/v1/resource/123/action", "/api/v2/resource/456/action", "/api/v1/resource/123/other")]
        assert got == [ok(twenty, 19), ok(twenty, 19), NO_LIMIT]

    in_one_window("MINUTE", sequence, tries=1)


def test_example_10_nested_keys_without_values(rls):
    plain, wildcard = EXAMPLES[10]
    client = rls(plain, wildcard)

    def sequence():
        assert answer(client, "example10", [("route", "api"), ("http_method", "GET"), ("subject_id", "123")]) == (
            "OK", [ok((60, "MINUTE", ""), 59)])
        assert answer(client, "example10", [("route", "web"), ("http_method", "POST"), ("subject_id", "456")]) == (
            "OK", [ok((60, "MINUTE", ""), 59)])
        read = [("user", "alice"), ("action", "readfile"), ("resource", "documents")]
        assert answer(client, "example10_wildcard", read) == ("OK", [ok((100, "MINUTE", ""), 99)])
        write = [("user", "alice"), ("action", "writefile"), ("resource", "documents")]
        assert answer(client, "example10_wildcard", write) == ("OK", [NO_LIMIT])

    in_one_window("MINUTE", sequence, tries=1)


def test_example_11_share_threshold(rls):
    """files/*: one threshold of 10 an hour for every match (5 for a.pdf and 5 for b.csv leave
    c.txt refused); files_no_share/*: 10 an hour for each value."""
    shared, _ = EXAMPLES[11]
    client = rls(shared)
    ten = (10, "HOUR", "")

    def sequence():
        def files(key, value, n):
            return [answer(client, "example11", [(key, value)])[1][0] for _ in range(n)]

        assert files("files", "files/a.pdf", 5) + files("files", "files/b.csv", 5) == [ok(ten, 9 - i) for i in range(10)]
        assert files("files", "files/c.txt", 1) == [("OVER_LIMIT", ten, 0)]
        assert files("files_no_share", "files_no_share/a.pdf", 11) == [ok(ten, 9 - i) for i in range(10)] + [
            ("OVER_LIMIT", ten, 0)]
        assert files("files_no_share", "files_no_share/b.csv", 1) == [ok(ten, 9)]

    in_one_window("HOUR", sequence, tries=1)


def test_example_11_share_threshold_with_a_nested_key(rls):
    _, with_metrics = EXAMPLES[11]
    client = rls(with_metrics)
    assert answer(client, "example11_metrics", [("route", "api/v1"), ("method", "GET")]) == (
        "OK", [ok((60, "MINUTE", ""), 59)])


# The peer's example configuration directory (peer_example/ratelimit/config/), asked with the
# descriptors its example Envoy configuration sends on the integration scripts' routes: what
# Envoy shows of the answer (test_peer_examples.py) is the status and one descriptor's counts;
# here is every descriptor's code and remaining count.
SERVICE_1, SERVICE_2 = [("service", "service_1")], [("service", "service_2")]
ONE_A_MINUTE, TWO_A_MINUTE = (1, "MINUTE", ""), (2, "MINUTE", "")


def example_config(rls, args=()):
    config = PEER / "ratelimit" / "config"
    return rls(*[(config / name).read_text() for name in ("config.yaml", "example.yaml")], args=args)


def over(limit):
    return ("OVER_LIMIT", limit, 0)


def test_quota_answers(rls):
    """quota.sh's /quota: (service, service_1) and (service, service_2), both quota_mode, each
    request counted in both. A quota descriptor over its limit answers OVER_LIMIT; the request is
    over only when every quota descriptor is."""
    client = example_config(rls)

    def sequence():
        return [answer(client, "rl", SERVICE_1, SERVICE_2) for _ in range(3)]

    assert in_one_window("MINUTE", sequence, tries=1) == [
        ("OK", [ok(ONE_A_MINUTE, 0), ok(TWO_A_MINUTE, 1)]),
        ("OK", [over(ONE_A_MINUTE), ok(TWO_A_MINUTE, 0)]),
        ("OVER_LIMIT", [over(ONE_A_MINUTE), over(TWO_A_MINUTE)])]


def check_then_debit(client, checks, debit):
    """Envoy's token-quota pattern: the check (descriptors with hits_addend 0) on the request,
    then, when the stream is done, the debit (one descriptor with hits_addend 1)."""
    checked = answer(client, "rl", *[(d, 0) for d in checks])
    debited = answer(client, "rl", (debit, 1))
    return checked, debited


def test_token_quota_answers(rls):
    """token-quota.sh's /tokenquota: a check of (service, service_2) at 2 a minute passes while
    the counter is not over 2, so the third passes at exactly 2 and its debit takes it to 3."""
    client = example_config(rls)

    def sequence():
        return [check_then_debit(client, [SERVICE_2], SERVICE_2) for _ in range(3)] + [
            answer(client, "rl", (SERVICE_2, 0))]

    assert in_one_window("MINUTE", sequence, tries=1) == [
        (("OK", [ok(TWO_A_MINUTE, 2)]), ("OK", [ok(TWO_A_MINUTE, 1)])),
        (("OK", [ok(TWO_A_MINUTE, 1)]), ("OK", [ok(TWO_A_MINUTE, 0)])),
        (("OK", [ok(TWO_A_MINUTE, 0)]), ("OVER_LIMIT", [over(TWO_A_MINUTE)])),
        ("OVER_LIMIT", [over(TWO_A_MINUTE)])]


def test_multiservice_tokenquota_answers(rls):
    """multiservice-tokenquota.sh's checks of both services (hits_addend 0) and the debit of the
    service that served (service_1 while its check passes, then service_2): service_1 passes two
    checks at 1 a minute, service_2 three at 2, the sixth request is over in both."""
    client = example_config(rls)

    def sequence():
        return [check_then_debit(client, [SERVICE_1, SERVICE_2], served)
                for served in (SERVICE_1, SERVICE_1, SERVICE_2, SERVICE_2, SERVICE_2)] + [
            answer(client, "rl", (SERVICE_1, 0), (SERVICE_2, 0))]

    assert in_one_window("MINUTE", sequence, tries=1) == [
        (("OK", [ok(ONE_A_MINUTE, 1), ok(TWO_A_MINUTE, 2)]), ("OK", [ok(ONE_A_MINUTE, 0)])),
        (("OK", [ok(ONE_A_MINUTE, 0), ok(TWO_A_MINUTE, 2)]), ("OVER_LIMIT", [over(ONE_A_MINUTE)])),
        (("OK", [over(ONE_A_MINUTE), ok(TWO_A_MINUTE, 2)]), ("OK", [ok(TWO_A_MINUTE, 1)])),
        (("OK", [over(ONE_A_MINUTE), ok(TWO_A_MINUTE, 1)]), ("OK", [ok(TWO_A_MINUTE, 0)])),
        (("OK", [over(ONE_A_MINUTE), ok(TWO_A_MINUTE, 0)]), ("OVER_LIMIT", [over(TWO_A_MINUTE)])),
        ("OVER_LIMIT", [over(ONE_A_MINUTE), over(TWO_A_MINUTE)])]


def test_token_quota_answers_under_sluice_semantics(rls):
    """sluice's semantics: the check at exactly the limit is over (nothing left)."""
    client = example_config(rls, SLUICE_SEMANTICS)

    def sequence():
        return [check_then_debit(client, [SERVICE_2], SERVICE_2) for _ in range(2)] + [
            answer(client, "rl", (SERVICE_2, 0))]

    assert in_one_window("MINUTE", sequence, tries=1) == [
        (("OK", [ok(TWO_A_MINUTE, 2)]), ("OK", [ok(TWO_A_MINUTE, 1)])),
        (("OK", [ok(TWO_A_MINUTE, 1)]), ("OK", [ok(TWO_A_MINUTE, 0)])),
        ("OVER_LIMIT", [over(TWO_A_MINUTE)])]
