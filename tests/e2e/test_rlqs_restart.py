"""A backend restart under RLQS load: two stock Envoy 1.40 processes (envoy/rlqs.yaml, Envoy's own
quota filter, no sluice filter; the stack of test_rlqs.py) against one backend on Redis, both hit
on one key. Mid-run the backend is killed (SIGKILL: no goodbye) and started again on the same
ports: a new replica id. The Envoys keep enforcing their shares, disconnected, until their TTL;
the restarted backend finds the old process's share record in Redis stale, takes it over and
pays its refill from the old process's last payment until the shares' expiry
(`ShareStore`, docs/rlqs-design.md "Restarts and outages"). Printed: each Envoy's admissions
before and after the kill, the bound and its terms. Asserted: admissions over the whole run stay
within the rule's bound, and the restarted backend took the old shares over. The price, visible
in the figures: after the restart the key admits well under the rule for about two TTLs (the old
shares are paid until they expire although the reconnected Envoys were reassigned, and their
reconnect reports are post-debited again)."""

import os
import signal
import time

from test_rlqs import CAPACITY, RATE_PER_S, TICK_S, load, rlqs_stack, scalar  # noqa: F401 (a fixture)

LOAD_S = 26
KILL_AT_S = 8
KEY = "rlqs-restart"


def kill_and_restart(backend):
    """SIGKILL the backend, then start it again on the same ports; returns the seconds it was down."""
    down = time.monotonic()
    os.kill(backend.proc.popen.pid, signal.SIGKILL)
    backend.proc.popen.wait(timeout=5)
    backend.proc.log.close()
    backend.start()
    return time.monotonic() - down


def test_a_backend_restart_keeps_the_bound(rlqs_stack):
    backend, (e1, e2) = rlqs_stack
    targets = [(e1.url("LISTEN_OPEN_PORT"), KEY, "at1"), (e2.url("LISTEN_OPEN_PORT"), KEY, "at2")]
    start = time.monotonic()
    before = load(targets, KILL_AT_S)
    post_before = scalar(backend, "sluice_rlqs_post_debited_units_total")
    down_s = kill_and_restart(backend)
    after = load(targets, LOAD_S - (time.monotonic() - start))
    elapsed = time.monotonic() - start
    post_after = scalar(backend, "sluice_rlqs_post_debited_units_total")
    took_over = scalar(backend, "sluice_rlqs_shares_taken_over_total")
    took_over_units = scalar(backend, "sluice_rlqs_taken_over_units_total")

    post = post_before + post_after
    rule_bound = CAPACITY + RATE_PER_S * elapsed
    arrears = RATE_PER_S * 2 * TICK_S
    bound = rule_bound + arrears + post
    admitted = sum(c[0] for c in before.values()) + sum(c[0] for c in after.values())
    print(f"\nrlqs restart: {elapsed:.1f} s of load, backend killed at {KILL_AT_S} s and back after {down_s:.1f} s; "
          f"rule token_bucket C={CAPACITY} {RATE_PER_S}/s")
    for name in ("at1", "at2"):
        print(f"rlqs restart:   {name}: admitted {before[name][0]} before the kill + {after[name][0]} after, "
              f"denied {before[name][1] + after[name][1]}")
    print(f"rlqs restart: admitted {admitted} of bound {bound:.0f} = the rule's {rule_bound:.0f} "
          f"(C + rate x {elapsed:.1f} s) + {arrears:.0f} refill in arrears + {post:.0f} post-debited "
          f"({post_before:.0f} before the kill, {post_after:.0f} after); share records taken over: {took_over:.0f}, "
          f"their refill paid by the restarted backend: {took_over_units:.0f} units")

    counts = list(before.values()) + list(after.values())
    assert all(o == 0 for _, _, o in counts), (before, after)
    assert took_over >= 1, backend.proc.tail()
    assert took_over_units > 0, took_over_units
    assert before["at1"][0] > 0 and before["at2"][0] > 0, before
    assert admitted <= bound, (admitted, bound)
