"""A drop-in for envoyproxy/ratelimit: its README's configuration examples
(tests/e2e/ratelimit_config/, unchanged in its format) loaded by a real `sluice
--ratelimit-config` on a real redis-server, asked by a real Envoy whose native ratelimit filter is
configured as for that service (envoy/ratelimit_compat.yaml). Each test is one of the README's
request sequences, written as 200s and 429s; then the token-quota pattern (a check with
hits_addend 0, a debit with apply_on_stream_done), 64 concurrent clients on one descriptor, a file
change in force within a second, a bad file refused naming the field, and `sluice rules check`."""

import collections
import concurrent.futures
import shutil
import subprocess
import time
import uuid

import pytest
import requests

import stack
from test_rls import client_ip, get_from

FIXTURE = stack.ROOT / "tests" / "e2e" / "ratelimit_config"
LISTENER = "RLS_OPEN_PORT"


def uid():
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def compat(tmp_path_factory, upstream):
    """(envoy, backend, config dir): sluice on its own redis-server with a copy of the fixture
    directory (tests edit the copy)."""
    tmp = tmp_path_factory.mktemp("ratelimit_compat")
    config = tmp / "config"
    shutil.copytree(FIXTURE, config)
    with stack.rls_stack(tmp, "ratelimit_compat.yaml", upstream, [LISTENER],
                         ["--ratelimit-config", str(config)]) as (envoy, backend):
        yield envoy, backend, config


def get(envoy, path, headers=None, session=None):
    s = session or requests
    return s.get(envoy.url(LISTENER) + path, headers=headers or {}, timeout=10)


def statuses(envoy, path, n, headers=None):
    with requests.Session() as s:
        return [get(envoy, path, headers, s).status_code for _ in range(n)]


@pytest.mark.smoke
def test_example_2_nested_descriptors_and_a_key_without_a_value(compat):
    envoy, _, _ = compat
    number = {"x-to-number": uid()}
    assert statuses(envoy, "/marketing", 6, number) == [200] * 5 + [429]
    r = get(envoy, "/marketing", number)
    assert r.status_code == 429 and r.headers["x-envoy-ratelimited"] == "true"
    assert r.headers["x-ratelimit-limit"].startswith("5, 5;w=86400"), r.headers
    assert r.headers["x-ratelimit-remaining"] == "0"
    # Another number has its own bucket.
    assert get(envoy, "/marketing", {"x-to-number": uid()}).status_code == 200


def test_example_3_the_most_specific_match(compat):
    envoy, _, _ = compat
    ip = client_ip()
    assert [get_from(envoy, ip, "/ip", listener=LISTENER).status_code for _ in range(11)] == [200] * 10 + [429]
    assert get_from(envoy, "127.9.9.9", "/ip", listener=LISTENER).status_code == 429


def test_example_5_unlimited(compat):
    envoy, _, _ = compat
    assert statuses(envoy, "/ldap", 25) == [200] * 25


def test_example_6_shadow_mode_never_refuses(compat):
    envoy, _, _ = compat
    assert statuses(envoy, "/service", 12, {"x-user-id": "user-a"}) == [200] * 12
    b = statuses(envoy, "/service", 21, {"x-user-id": "user-b"})
    assert b == [200] * 20 + [429]
    assert statuses(envoy, "/service", 25, {"x-user-id": f"user-{uid()}"}) == [200] * 25, "no limit for others"


def test_example_7_replaces(compat):
    envoy, _, _ = compat
    # bkthomps is the README's user; this test runs once per fresh redis-server.
    got = statuses(envoy, "/replaces", 11, {"x-user-id": "bkthomps"})
    assert got == [200] * 10 + [429], "the replacing 10/day applies, not the replaced 5/day"


def test_examples_9_and_11_wildcards_sharing_a_threshold(compat):
    envoy, _, _ = compat
    assert statuses(envoy, "/files", 5, {"x-file": "files/a.pdf"}) == [200] * 5
    assert statuses(envoy, "/files", 5, {"x-file": "files/b.csv"}) == [200] * 5
    assert get(envoy, "/files", {"x-file": "files/c.txt"}).status_code == 429
    assert statuses(envoy, "/files", 12, {"x-file": "other/x"}) == [200] * 12


def test_quota_mode_across_two_descriptors(compat):
    envoy, _, _ = compat
    user, org = uid(), uid()
    both = {"x-user-id": user, "x-org": org}
    assert statuses(envoy, "/quota", 3, both) == [200, 200, 429], "over only when both quotas are"
    # The organisation is over, a fresh user is not: the request passes.
    assert get(envoy, "/quota", {"x-user-id": uid(), "x-org": org}).status_code == 200


def remaining(r):
    return int(r.headers["x-ratelimit-remaining"])


@pytest.mark.smoke
def test_the_token_quota_pattern(compat):
    envoy, _, _ = compat
    user = uid()

    def check():
        return get(envoy, "/tokens", {"x-user-id": user, "x-tokens": "0"})

    r = check()
    assert r.status_code == 200 and remaining(r) == 100
    assert get(envoy, "/tokens", {"x-user-id": user, "x-tokens": "60"}).status_code == 200
    # The debit lands when the stream is done (Envoy sends it after the response).
    stack.wait_until(lambda: remaining(check()) == 40, "60 tokens debited", timeout=5)
    # 40 left: the check passes; the stream uses 60, more than is left: the counter goes past
    # the limit (the peer's semantics, the default), so the next check is over.
    assert get(envoy, "/tokens", {"x-user-id": user, "x-tokens": "60"}).status_code == 200
    stack.wait_until(lambda: check().status_code == 429, "the quota spent", timeout=5)
    assert get(envoy, "/tokens", {"x-user-id": uid(), "x-tokens": "0"}).status_code == 200


def ratelimit_stats(envoy):
    """Envoy's ratelimit filter's own counts of the service's answers (for the upstream cluster)."""
    stats = envoy.stats("cluster.upstream.ratelimit.")
    return {k: stats.get(f"cluster.upstream.ratelimit.{k}", 0) for k in ("ok", "over_limit", "error", "failure_mode_allowed")}


def test_64_concurrent_clients_on_one_descriptor_are_admitted_exactly(compat):
    envoy, _, _ = compat

    def burst():
        hot = {"x-hot": uid()}

        def client(_):
            with requests.Session() as s:
                return [get(envoy, "/hot", hot, s).status_code for _ in range(2)]

        with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
            return [c for codes in pool.map(client, range(64)) for c in codes]

    # The limit is 20 per day, in windows aligned to UTC days: a burst across midnight may
    # rightly admit 20 in each. Then (and only then) it is run once more on a fresh descriptor.
    for _ in range(2):
        day, before = time.gmtime().tm_yday, ratelimit_stats(envoy)
        codes = burst()
        if time.gmtime().tm_yday == day:
            break
    after = ratelimit_stats(envoy)
    # Exact: every admission is the upstream's 200 (no retries on the route, so none is counted
    # twice, and a 503 from the upstream or Envoy's circuit breakers is a failure, not an
    # admission), every refusal the filter's 429, and the service answered each request once.
    assert collections.Counter(codes) == {200: 20, 429: 108}, collections.Counter(codes)
    assert {k: after[k] - before[k] for k in after} == {"ok": 20, "over_limit": 108, "error": 0,
                                                        "failure_mode_allowed": 0}, (before, after)


def test_sluice_rules_check_lists_every_error(tmp_path):
    ok = subprocess.run([stack.SLUICE, "rules", "check", str(FIXTURE)], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 domain(s)" in ok.stdout
    (tmp_path / "a.yaml").write_text("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
    (tmp_path / "b.yaml").write_text("domain: b\ndescriptors:\n  - key: k\n    rate_limits: {unit: second}\n")
    bad = subprocess.run([stack.SLUICE, "rules", "check", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0
    assert f"{tmp_path}/a.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'" in bad.stdout, bad.stdout
    assert f"{tmp_path}/b.yaml: descriptors[0].rate_limits: unknown key" in bad.stdout, bad.stdout


def test_a_bad_file_is_refused_naming_the_field_and_the_last_good_stays(compat):
    envoy, backend, config = compat
    (config / "broken.yaml").write_text("domain: broken\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
    try:
        stack.wait_until(lambda: "broken.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit" in backend.proc.tail(200),
                         "the refusal in sluice's log", timeout=5)
        assert "keeping the last good configuration" in backend.proc.tail(200)
        assert statuses(envoy, "/ldap", 3) == [200] * 3
        assert get(envoy, "/marketing", {"x-to-number": uid()}).status_code == 200
    finally:
        (config / "broken.yaml").unlink()


def test_a_file_change_is_in_force_within_a_second(compat):
    envoy, _, config = compat
    path = config / "messaging.yaml"
    before = path.read_text()
    unlimited = "  - key: ldap\n    rate_limit:\n      unlimited: true\n"
    assert unlimited in before
    path.write_text(before.replace(unlimited, "  - key: ldap\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n"))
    written = time.monotonic()
    try:
        with requests.Session() as s:
            while get(envoy, "/ldap", session=s).status_code != 429:
                assert time.monotonic() - written < 3, "the change was not applied within 3 s"
                time.sleep(0.02)
        took = time.monotonic() - written
        print(f"file change in force after {took:.3f} s")
        assert took < 1.0, f"in force after {took:.3f} s"
    finally:
        path.write_text(before)


def test_units_month_and_year_are_epoch_aligned_windows_of_30_and_365_days(compat):
    """The peer's month (30 days) and year (365 days): requests_per_unit, then 429 with the reset
    at the epoch-aligned boundary (divider - now % divider seconds, as the peer's
    utilities.go computes it)."""
    envoy, _, config = compat
    path = config / "messaging.yaml"
    before = path.read_text()
    parent = "  - key: service\n    descriptors:\n"
    assert parent in before
    month, year = f"month-{uid()}", f"year-{uid()}"
    added = (f"      - key: user\n        value: {month}\n        rate_limit: {{unit: month, requests_per_unit: 3}}\n"
             f"      - key: user\n        value: {year}\n        rate_limit: {{unit: year, requests_per_unit: 4}}\n")
    path.write_text(before.replace(parent, parent + added))
    try:
        # In force once a month user's request is counted (before, nothing matches: no headers).
        first = []
        stack.wait_until(lambda: first.append(get(envoy, "/service", {"x-user-id": month}))
                         or "x-ratelimit-remaining" in first[-1].headers, "the month descriptor in force", timeout=5)
        assert first[-1].status_code == 200 and first[-1].headers["x-ratelimit-remaining"] == "2", first[-1].headers
        for user, n, divider in ((month, 3, 30 * 86400), (year, 4, 365 * 86400)):
            t0 = int(time.time())
            done = 1 if user == month else 0
            got = statuses(envoy, "/service", n - done, {"x-user-id": user})
            assert got == [200] * (n - done), (user, got)
            r = get(envoy, "/service", {"x-user-id": user})
            t1 = int(time.time())
            assert r.status_code == 429, (user, r.status_code)
            assert r.headers["x-ratelimit-limit"].startswith(f"{n}, {n};w={divider}"), r.headers
            assert r.headers["x-ratelimit-remaining"] == "0"
            reset = int(r.headers["x-ratelimit-reset"])
            # Seconds to the next multiple of the divider since the epoch (Envoy shows whole seconds).
            assert divider - t1 % divider - 1 <= reset <= divider - t0 % divider, (user, reset, t0, t1)
    finally:
        path.write_text(before)
