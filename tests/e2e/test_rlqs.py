"""sluice as Envoy's Rate Limit Quota Service (RLQS): two real stock Envoy 1.40 processes
(envoy/rlqs.yaml: Envoy's own envoy.filters.http.rate_limit_quota filter, no sluice filter)
against one backend on Redis. Envoy decides every request itself from the token-bucket share
sluice assigned it; sluice prepays every share from the store (docs/rlqs.md).

One load of LOAD_S seconds: key `shared` hit on both Envoys, key `solo` on one only. Printed per
key: admissions per Envoy, the bound, and what sluice post-debited. Asserted: the shared key's
admissions stay within the rule's bound over the run (plus two ticks of refill paid in arrears
and the units post-debited for Envoy's no-assignment windows), and the solo key gets nearly the
whole limit on its one Envoy. Then a rule change (capacity and rate halved) on a key both Envoys
hold: in force on both within PUSH_S (well within Envoy's 5 s report interval plus a second),
since sluice pushes it on its tick. An override and a reset likewise (the reset refills both
Envoys' buckets at once). Then the windows where a part goes away: an Envoy restarted mid-load,
and Redis unresponsive (SIGSTOP) mid-load: over each window the key's admissions stay within the
rule's bound (docs/rlqs.md "Restarts and outages"). The Redis test runs last: it stops the
module's Redis for a while."""

import os
import signal
import threading
import time

import pytest
import requests

import stack

CAPACITY = 20
RATE_PER_S = 10
LOAD_S = 30
TICK_S = 1.0
# Each load thread pauses this long between requests: far above the rule's rate, light on CPU.
PAUSE_S = 0.01
RULE = {"action": "user", "algorithm": "token_bucket", "capacity": CAPACITY,
        "rate": {"count": RATE_PER_S, "period": "1s"}}
HALVED = dict(RULE, capacity=CAPACITY // 2, rate={"count": RATE_PER_S // 2, "period": "1s"})
WARM_S = 3
# Envoy 1.40 reports every 5 s whatever its reporting_interval says (docs/rlqs.md).
ENVOY_REPORT_S = 5
PUSH_S = 2
CHANGED_S = 10


@pytest.fixture(scope="module")
def rlqs_stack(tmp, upstream):
    redis, redis_port = stack.start_redis(tmp)
    backend = stack.Backend(tmp, redis_port, extra_args=["--redis-timeout-ms", "1000"])
    envoys = []
    try:
        backend.start()
        backend.put_rule(RULE)
        for _ in range(2):
            envoys.append(stack.Envoy(tmp, "rlqs.yaml",
                                      {"SLUICE_GRPC_PORT": backend.grpc_port, "UPSTREAM_PORT": upstream},
                                      ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"], concurrency=1).start())
        backend.redis = redis
        yield backend, envoys
    finally:
        stack.stop_all(*envoys, backend, redis)


def scalar(backend, name):
    """An unlabelled Prometheus series of the backend (`Backend.metric` reads labelled ones)."""
    text = requests.get(f"{backend.decision_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no series {name}")


def hammer(url, user, until, counts, key):
    """Requests `url` as `user` until `until` (monotonic), counting answers by status."""
    session = requests.Session()
    allowed = denied = other = 0
    while time.monotonic() < until:
        try:
            status = session.get(url, headers={"x-user-id": user}, timeout=2).status_code
        except requests.RequestException:
            status = None
        if status == 200:
            allowed += 1
        elif status == 429:
            denied += 1
        else:
            other += 1
        time.sleep(PAUSE_S)
    counts[key] = (allowed, denied, other)


def test_two_envoys_share_one_limit_and_a_solo_key_gets_it_all(rlqs_stack):
    backend, (e1, e2) = rlqs_stack
    shared, solo = "rlqs-shared", "rlqs-solo"
    counts = {}
    start = time.monotonic()
    until = start + LOAD_S
    threads = [
        threading.Thread(target=hammer, args=(e1.url("LISTEN_OPEN_PORT"), shared, until, counts, "shared@1")),
        threading.Thread(target=hammer, args=(e2.url("LISTEN_OPEN_PORT"), shared, until, counts, "shared@2")),
        threading.Thread(target=hammer, args=(e1.url("LISTEN_OPEN_PORT"), solo, until, counts, "solo@1")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=LOAD_S + 30)
    elapsed = time.monotonic() - start
    post_debited = scalar(backend, "sluice_rlqs_post_debited_units_total")
    unpaid = scalar(backend, "sluice_rlqs_unpaid_units_total")
    assigned = {k: backend.metric("sluice_rlqs_assignments_total", kind=k)
                for k in ("allow_all", "deny_all", "token_bucket", "abandon")}
    streams = scalar(backend, "sluice_rlqs_streams")
    buckets = scalar(backend, "sluice_rlqs_buckets")

    # What the rule admits over the run (a token bucket: C, then the rate), the refill paid in
    # arrears (at most two ticks), and every unit post-debited (no-assignment windows, both keys).
    rule_bound = CAPACITY + RATE_PER_S * elapsed
    bound = rule_bound + RATE_PER_S * 2 * TICK_S + post_debited
    shared_total = counts["shared@1"][0] + counts["shared@2"][0]
    solo_total = counts["solo@1"][0]
    print(f"\nrlqs: {elapsed:.1f} s, rule token_bucket C={CAPACITY} {RATE_PER_S}/s: "
          f"the rule admits {rule_bound:.0f}; bound {bound:.0f} "
          f"(+{RATE_PER_S * 2 * TICK_S:.0f} refill in arrears, +{post_debited:.0f} post-debited)")
    for key in ("shared@1", "shared@2", "solo@1"):
        a, d, o = counts[key]
        print(f"rlqs:   {key}: admitted {a}, denied {d}, other {o}")
    print(f"rlqs: shared admitted {shared_total} of bound {bound:.0f}; solo admitted {solo_total} "
          f"({100 * solo_total / rule_bound:.1f}% of what the rule admits)")
    print(f"rlqs: assignments {assigned}, unpaid refill {unpaid:.0f}, "
          f"streams open {streams:.0f}, buckets {buckets:.0f}")

    assert all(o == 0 for _, _, o in counts.values()), counts
    assert streams == 2, "one stream per Envoy (one domain each used)"
    assert buckets == 3, "shared on both Envoys, solo on one"
    assert assigned["token_bucket"] > 0
    # Both Envoys were saturated: each saw denials, so neither was handed the whole limit.
    assert counts["shared@1"][1] > 0 and counts["shared@2"][1] > 0, counts
    assert shared_total <= bound, (shared_total, bound)
    # Two Envoys each enforcing the whole limit would admit about twice the rule: the bound is
    # the test's teeth. The shared key still gets most of its limit between the two.
    assert shared_total >= 0.75 * rule_bound, (shared_total, rule_bound)
    assert solo_total <= bound, (solo_total, bound)
    assert solo_total >= 0.9 * rule_bound, (solo_total, rule_bound)


def load(targets, seconds):
    """Hammers each (url, user, name) of `targets` for `seconds`; returns {name: (allowed, denied, other)}."""
    counts = {}
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=hammer, args=(url, user, until, counts, name)) for url, user, name in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 30)
    return counts


def test_a_rule_change_is_in_force_on_both_envoys_within_a_push(rlqs_stack):
    backend, (e1, e2) = rlqs_stack
    key = "rlqs-change"
    both = [(e1.url("LISTEN_OPEN_PORT"), key, "at1"), (e2.url("LISTEN_OPEN_PORT"), key, "at2")]
    backend.put_rule(RULE)
    warm = load(both, WARM_S)
    assert warm["at1"][0] > 0 and warm["at2"][0] > 0, warm
    backend.put_rule(HALVED)
    time.sleep(PUSH_S)
    post_before = scalar(backend, "sluice_rlqs_post_debited_units_total")
    start = time.monotonic()
    after = load(both, CHANGED_S)
    elapsed = time.monotonic() - start
    post = scalar(backend, "sluice_rlqs_post_debited_units_total") - post_before
    admitted = after["at1"][0] + after["at2"][0]
    new_rule = HALVED["capacity"] + HALVED["rate"]["count"] * elapsed
    # The new rule over the window, two ticks of its refill in arrears, the tokens the Envoys'
    # buckets still held from before the change (at most the old burst), and any post-debit.
    bound = new_rule + HALVED["rate"]["count"] * 2 * TICK_S + CAPACITY + post
    old_rate = RATE_PER_S * elapsed
    print(f"\nrlqs change: capacity {CAPACITY}->{HALVED['capacity']}, {RATE_PER_S}/s->{HALVED['rate']['count']}/s; "
          f"{elapsed:.1f} s measured from {PUSH_S} s after the change: admitted {after['at1'][0]} + {after['at2'][0]} "
          f"= {admitted}; bound {bound:.0f} (new rule {new_rule:.0f}); the old rate alone would admit {old_rate:.0f}; "
          f"idle buckets abandoned so far: {backend.metric('sluice_rlqs_assignments_total', kind='abandon'):.0f}")
    assert all(o == 0 for _, _, o in after.values()), after
    assert after["at1"][1] > 0 and after["at2"][1] > 0, after
    assert admitted <= bound, (admitted, bound)
    assert admitted < old_rate, (admitted, old_rate)
    # Still served: at least 60% of what the new rule refills over the window. Not of `new_rule`:
    # its capacity is not there to admit at the change (the warm load spent the key, and a
    # lowered rule does not refill it), so a floor of 0.6 x (capacity + refill) asked 36 of the
    # ~50 the rule can give here, and the stack's ticks in arrears left 37-40 on a busy machine
    # (33 once: issue 38). The bound above is the safety property; this one is availability.
    refill = HALVED["rate"]["count"] * elapsed
    assert admitted >= 0.6 * refill, (admitted, refill)


def test_the_closed_listener_denies_until_the_first_assignment_then_admits(rlqs_stack):
    backend, (e1, _) = rlqs_stack
    backend.put_rule(RULE)
    url, user = e1.url("LISTEN_CLOSED_PORT"), "rlqs-closed"
    # no_assignment_behavior DENY_ALL: Envoy decides a new bucket's first request before any
    # answer, so it is denied; sluice's assignment (a prepaid share) then admits.
    first = requests.get(url, headers={"x-user-id": user}, timeout=2)
    assert first.status_code == 429 and first.headers.get("x-sluice-rlqs") == "denied", first.status_code
    statuses = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and 200 not in statuses:
        statuses.append(requests.get(url, headers={"x-user-id": user}, timeout=2).status_code)
        time.sleep(0.05)
    print(f"\nrlqs closed listener: first request 429, then {len(statuses)} requests until the first 200")
    assert 200 in statuses, statuses


def admin(method, backend, path, body=None):
    r = requests.request(method, f"{backend.admin_url}{path}", json=body,
                         headers={"authorization": f"Bearer {stack.TOKEN}"}, timeout=5)
    assert r.status_code in (200, 204), (path, r.status_code, r.text)


def first_admitted(url, user, within):
    """Seconds until `url` first admits `user` (polled every 20 ms), or None within `within`."""
    start = time.monotonic()
    session = requests.Session()
    while time.monotonic() - start < within:
        if session.get(url, headers={"x-user-id": user}, timeout=2).status_code == 200:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


# An override for one key: 6 requests, then one a minute (a rate this low keeps the key spent, so
# a reset is what admits again).
OVERRIDE = {"action": "user", "algorithm": "token_bucket", "capacity": 6, "rate": {"count": 1, "period": "1m"}}


SMALL_WINDOW = {"action": "user", "algorithm": "fixed_window", "capacity": 10, "window": "60s"}
SMALL_WINDOW_S = 8


def test_a_small_window_rule_gives_both_envoys_a_usable_share(rlqs_stack):
    """Issue 39: "10 per minute" on two Envoys. The rule's Envoy burst is max(1, C / 10) = 1;
    split equally the second Envoy's was 0, answered DENY_ALL tick after tick: every request it
    saw denied while the key had capacity. Now the burst grows to one unit per holder (within
    C). On the closed listener (no post-debit) both Envoys admit, and together no more than C."""
    backend, (e1, e2) = rlqs_stack
    key = "rlqs-small-window"
    backend.put_rule(SMALL_WINDOW)
    try:
        both = [(e1.url("LISTEN_CLOSED_PORT"), key, "at1"), (e2.url("LISTEN_CLOSED_PORT"), key, "at2")]
        counts = load(both, SMALL_WINDOW_S)
    finally:
        backend.put_rule(RULE)
    admitted = counts["at1"][0] + counts["at2"][0]
    print(f"\nrlqs small window: 10 per 60 s on both Envoys' closed listeners, {SMALL_WINDOW_S} s: "
          f"admitted {counts['at1'][0]} + {counts['at2'][0]} = {admitted} (denied {counts['at1'][1]} + {counts['at2'][1]})")
    assert all(o == 0 for _, _, o in counts.values()), counts
    assert counts["at1"][0] >= 1 and counts["at2"][0] >= 1, counts
    assert admitted <= SMALL_WINDOW["capacity"], counts


def test_an_override_and_a_reset_are_in_force_on_both_envoys_within_a_push(rlqs_stack):
    backend, (e1, e2) = rlqs_stack
    backend.put_rule(RULE)
    key = "rlqs-override"
    both = [(e1.url("LISTEN_OPEN_PORT"), key, "at1"), (e2.url("LISTEN_OPEN_PORT"), key, "at2")]
    warm = load(both, 1)
    assert warm["at1"][0] > 0 and warm["at2"][0] > 0, warm
    admin("PUT", backend, f"/v1/rules/user/overrides/{key}", OVERRIDE)
    time.sleep(PUSH_S)
    post_before = scalar(backend, "sluice_rlqs_post_debited_units_total")
    spent = load(both, 2)
    post = scalar(backend, "sluice_rlqs_post_debited_units_total") - post_before
    # The override's burst (Envoy's replaced buckets keep their fill fraction, so at most the new
    # bursts), its rate over the window (nil), two ticks in arrears, and post-debits.
    override_bound = OVERRIDE["capacity"] + 2 + post
    admitted = spent["at1"][0] + spent["at2"][0]
    print(f"\nrlqs override: C 20 -> 6, 10/s -> 1/min, measured 2 s from {PUSH_S} s after the PUT: "
          f"admitted {spent['at1'][0]} + {spent['at2'][0]} = {admitted} (bound {override_bound:.0f}; the rule "
          f"alone would admit {RATE_PER_S * 2})")
    assert admitted <= override_bound, (admitted, override_bound)
    assert spent["at1"][1] > 0 and spent["at2"][1] > 0, spent

    # The key is spent on both Envoys. A reset empties its state, and sluice refills both Envoys'
    # buckets at once (DENY_ALL then a fresh token bucket, paid from the emptied state).
    admin("DELETE", backend, f"/v1/keys?action=user&key={key}")
    after = [first_admitted(url, key, ENVOY_REPORT_S + 1) for url, _, _ in both]
    print(f"rlqs reset: first admission after the reset on each Envoy after {after} s "
          f"(Envoy's report interval is {ENVOY_REPORT_S} s)")
    assert all(t is not None for t in after), after
    post_before = scalar(backend, "sluice_rlqs_post_debited_units_total")
    refilled = load(both, 2)
    post = scalar(backend, "sluice_rlqs_post_debited_units_total") - post_before
    again = refilled["at1"][0] + refilled["at2"][0] + len(after)
    print(f"rlqs reset: admitted {again} after the reset (bound {OVERRIDE['capacity'] + 2 + post:.0f})")
    assert again <= OVERRIDE["capacity"] + 2 + post, (again, refilled)



def test_an_envoy_restarted_mid_load_keeps_the_key_within_its_bound(rlqs_stack):
    backend, (e1, e2) = rlqs_stack
    backend.put_rule(RULE)
    key = "rlqs-envoy-restart"
    post_before = scalar(backend, "sluice_rlqs_post_debited_units_total")
    counts = {}
    start = time.monotonic()
    run_s = 12
    until = start + run_s
    first = threading.Thread(target=hammer, args=(e1.url("LISTEN_OPEN_PORT"), key, until, counts, "at1"))
    first.start()
    before = load([(e2.url("LISTEN_OPEN_PORT"), key, "at2")], 3)
    e2.stop()
    e2.start()
    restarted_at = time.monotonic() - start
    after = load([(e2.url("LISTEN_OPEN_PORT"), key, "at2")], max(0.0, until - time.monotonic()))
    first.join(timeout=run_s + 30)
    elapsed = time.monotonic() - start
    post = scalar(backend, "sluice_rlqs_post_debited_units_total") - post_before
    rule_bound = CAPACITY + RATE_PER_S * elapsed
    bound = rule_bound + RATE_PER_S * 2 * TICK_S + post
    admitted = counts["at1"][0] + before["at2"][0] + after["at2"][0]
    print(f"\nrlqs envoy restart at {restarted_at:.1f} s of {elapsed:.1f} s: admitted envoy1 {counts['at1'][0]}, "
          f"envoy2 {before['at2'][0]} before + {after['at2'][0]} after its restart = {admitted}; "
          f"bound {bound:.0f} (rule {rule_bound:.0f}, +{RATE_PER_S * 2 * TICK_S:.0f} arrears, +{post:.0f} post-debited)")
    assert admitted <= bound, (admitted, bound)
    # The restarted Envoy's first requests pass (no assignment yet, ALLOW_ALL) and are post-debited.
    assert after["at2"][0] > 0, after
    assert all(o == 0 for _, _, o in counts.values()), counts


# What a client controls is the x-user-id header. Each odd value, through the real Envoy on the
# shipped configuration: none may be a free pass. The matcher takes 1 to 256 printable ASCII
# characters as a user; anything else goes to the client-address bucket.
ODD_USER_IDS = {
    "empty": b"", "one byte": b"a", "quotes and backslashes": b'"q\\"\\', "not utf-8": b"\xff\xfe\x80",
    "8000 bytes": b"h" * 8000, "257 bytes": b"g" * 257, "pipe and percent": b"a|b%c", "utf-8 letters": "é".encode(),
    "space inside": b"a b",
}
TIGHT = {"algorithm": "token_bucket", "capacity": 3, "rate": {"count": 1, "period": "1m"}}


def statuses(port, value, n, pause_s=0.15):
    out = []
    for _ in range(n):
        out.append(stack.raw_request(port, "GET", b"/", [("x-user-id", value)], timeout=5).status)
        time.sleep(pause_s)
    return out


def test_no_client_value_is_a_free_pass_and_a_non_utf8_bucket_cannot_end_the_stream(rlqs_stack, tmp, upstream):
    backend, (e1, _) = rlqs_stack
    backend.put_rule(dict(TIGHT, action="user"))
    backend.put_rule(dict(TIGHT, action="user_anonymous"))
    try:
        port = e1.ports["LISTEN_OPEN_PORT"]
        seen = {}
        threads = [threading.Thread(target=lambda n=name, v=value: seen.__setitem__(n, statuses(port, v, 12)))
                   for name, value in ODD_USER_IDS.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for name, got in seen.items():
            print(f"\nrlqs client value {name}: {got}", end="")
        # Every value is limited once its bucket's assignment has arrived (one round trip after
        # its first request): a 429 among its last requests, none of them anything but 200/429.
        for name, got in seen.items():
            assert set(got) <= {200, 429}, (name, got)
            assert 429 in got[-6:], (name, got)

        # A configuration that puts the raw header in the bucket id (regex ".+"): Envoy then
        # reports a bucket id that is not UTF-8. sluice leaves that bucket out (it cannot be
        # assigned anything) and keeps the stream: another user on the same Envoy is still limited.
        permissive = tmp / "rlqs-permissive.yaml"
        permissive.write_text((stack.ROOT / "envoy" / "rlqs.yaml").read_text().replace('regex: "[!-~]{1,256}"', 'regex: ".+"'))
        assert '".+"' in permissive.read_text()
        e3 = stack.Envoy(tmp, str(permissive), {"SLUICE_GRPC_PORT": backend.grpc_port, "UPSTREAM_PORT": upstream},
                         ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"], concurrency=1).start()
        try:
            p3 = e3.ports["LISTEN_OPEN_PORT"]
            before = scalar(backend, "sluice_rlqs_buckets_not_utf8_total")
            bad = statuses(p3, b"\xff\xfe", 3, pause_s=0.3)
            deadline = time.monotonic() + ENVOY_REPORT_S + 3
            while scalar(backend, "sluice_rlqs_buckets_not_utf8_total") <= before and time.monotonic() < deadline:
                time.sleep(0.2)
            left_out = scalar(backend, "sluice_rlqs_buckets_not_utf8_total") - before
            good = statuses(p3, b"after-a-bad-one", 12)
            print(f"\nrlqs permissive matcher: non-utf-8 user {bad}, buckets left out {left_out:.0f}; "
                  f"then a plain user on the same Envoy {good}")
            assert left_out >= 1
            assert 429 in good[-6:], good
        finally:
            e3.stop()
    finally:
        backend.put_rule(RULE)
        backend.delete_rule("user_anonymous")


OUTAGE_S = 6
# Shares are raised again on sluice's tick once the owed refill is paid: no report needed.
RECOVERY_S = 5


def test_redis_unresponsive_mid_load_keeps_the_key_within_its_bound_and_recovers(rlqs_stack):
    """Runs last: stops the module's Redis (SIGSTOP: connections stay open, nothing answers)."""
    backend, (e1, e2) = rlqs_stack
    backend.put_rule(RULE)
    key = "rlqs-outage"
    both = [(e1.url("LISTEN_OPEN_PORT"), key, "at1"), (e2.url("LISTEN_OPEN_PORT"), key, "at2")]
    warm = load(both, 2)
    assert warm["at1"][0] > 0 and warm["at2"][0] > 0, warm
    post_before = scalar(backend, "sluice_rlqs_post_debited_units_total")
    unpaid_before = scalar(backend, "sluice_rlqs_unpaid_units_total")
    redis_pid = backend.redis.popen.pid
    start = time.monotonic()
    stack.pause(redis_pid)
    try:
        during = load(both, OUTAGE_S)
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    resumed = time.monotonic()
    # Back: sluice pays what it owes and raises the shares again; both Envoys admit again.
    recovered = load(both, RECOVERY_S)
    elapsed = time.monotonic() - start
    post = scalar(backend, "sluice_rlqs_post_debited_units_total") - post_before
    unpaid = scalar(backend, "sluice_rlqs_unpaid_units_total") - unpaid_before
    admitted_during = during["at1"][0] + during["at2"][0]
    admitted = admitted_during + recovered["at1"][0] + recovered["at2"][0]
    rule_bound = CAPACITY + RATE_PER_S * elapsed
    bound = rule_bound + RATE_PER_S * 2 * TICK_S + post
    print(f"\nrlqs redis outage {resumed - start:.1f} s then {RECOVERY_S} s back: admitted {admitted_during} "
          f"during ({during}), {admitted - admitted_during} after; total {admitted} of bound {bound:.0f} "
          f"(rule {rule_bound:.0f}); refill left unpaid {unpaid:.0f}, post-debited {post:.0f}")
    assert admitted <= bound, (admitted, bound)
    # During the outage the rates halve every tick (refill cannot be paid): fewer than the rule
    # admits over the outage.
    assert admitted_during < CAPACITY + RATE_PER_S * OUTAGE_S, during
    assert recovered["at1"][0] > 0 and recovered["at2"][0] > 0, recovered
