"""sluice as Envoy's Rate Limit Quota Service (RLQS): two real stock Envoy 1.40 processes
(envoy/rlqs.yaml: Envoy's own envoy.filters.http.rate_limit_quota filter, no sluice filter)
against one backend on Redis. Envoy decides every request itself from the token-bucket share
sluice assigned it; sluice prepays every share from the store (docs/rlqs.md).

One load of LOAD_S seconds: key `shared` hit on both Envoys, key `solo` on one only. Printed per
key: admissions per Envoy, the bound, and what sluice post-debited. Asserted: the shared key's
admissions stay within the rule's bound over the run (plus two ticks of refill paid in arrears
and the units post-debited for Envoy's no-assignment windows), and the solo key gets nearly the
whole limit on its one Envoy."""

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
                for k in ("allow_all", "deny_all", "token_bucket")}
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
