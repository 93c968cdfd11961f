"""Cost budgets: the overshoot of reserve/commit beside check-then-debit, at 64 clients, in one run,
through the sluice filter and through Envoy's own ratelimit filter on an envoyproxy/ratelimit file.

Each round, 64 clients send one request each, all at once, through a real Envoy (envoy/e2e_cost.yaml,
the wasm filter, the default grpc_stream callout) to an upstream that holds each request DELAY_MS
and reports its usage (100-700 units, drawn with the round's seed) in x-usage-total-tokens. The
budget is 10,000 units (token_bucket, capacity 10,000, refilling 1,000 per 7 days: nothing refills
within a run). Two routes, each on a fresh key per round:

  reserve/commit   reserves 500 per request (x-max-tokens), commits the usage (refund or debit)
  check-then-debit reserves 1 (a check that the budget is not spent), commits the usage: the
                   pattern of envoyproxy/ratelimit's hits_addend 0 + apply_on_stream_done, Envoy AI
                   Gateway and Limitador's CheckRateLimit + Report

Two more rows, through Envoy's native ratelimit filter (RLS, no wasm; envoy/ratelimit_cost.yaml)
to a second backend started with `--ratelimit-config tests/e2e/ratelimit_budget` (llm.yaml, the
peer's format: `llm_tokens`, 10,000 per day, a clock-aligned fixed window, so a run across
midnight UTC would see a fresh window), its own redis-server, the same upstream, clients, usages
and delay, a fresh tenant per round:

  rls token-quota    envoyproxy/ratelimit's token-quota pattern as the peer's files are used
                     today: a check with hits_addend 0 on the request, a debit of the usage with
                     apply_on_stream_done (a debit that does not fit takes what is left)
  rls reserve/commit the same file with sluice's marks: reserve 500 (sluice_reservation) on the
                     request, commit the usage at stream done (sluice_commit, sluice_reserved 500)

Printed per round and as medians: requests admitted and denied, units used by the admitted ones,
how far that is over the budget, the stated bound for reserve/commit (the sum of actual - reserved
over the admitted requests whose actual exceeded 500), and the backend's overshoot counter
(sluice_commit_overshoot_units_total: debits that did not fit when they came, carried as debt; `-` for the
token-quota rows, whose debits are no commits), then the ratio of the RLS rows' medians over
budget, token-quota / reserve-commit, when reserve/commit's is above the budget.

Needs what the e2e tests need (tests/suites/20-envoy.sh: Envoy in .venv, redis-server, the built
filter and a `sluice` binary: SLUICE_BIN, default target/debug/sluice). Everything on 127.0.0.1,
stopped at exit; bounded at about ROUNDS x 4 x (DELAY_MS + 1 s).
    ROUNDS=5 DELAY_MS=300 .venv/bin/python benches/envoy/cost.py
"""

import contextlib
import os
import random
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))

import cost_stack  # noqa: E402
import stack  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
DELAY_MS = int(os.environ.get("DELAY_MS", "300"))
CLIENTS = 64
RESERVED = 500
# The RLS rows' budget: tests/e2e/ratelimit_budget/llm.yaml (10,000 a day, as cost_stack.BUDGET),
# which sluice serves as the rule `rl:<domain>.<key>`, one counter per tenant.
RLS_CONFIG = stack.ROOT / "tests" / "e2e" / "ratelimit_budget"
RLS_ACTION = "rl:llm.llm_tokens"


def row(name, i, run, bound):
    used = sum(run["admitted"])
    over = used - cost_stack.BUDGET
    shot = "-" if run["overshoot"] is None else f"{run['overshoot']:.0f}"
    print(f"{name:<18} {i:>5} {len(run['admitted']):>8} {run['denied']:>6} {used:>6} {over:>+9} "
          f"{bound if bound is not None else '-':>6} {shot:>9}")
    return {"admitted": len(run["admitted"]), "used": used, "over": over, "overshoot": run["overshoot"]}


def rls_used(backend, key):
    """What the file's limit holds for `key` (its `rl:` rule's level: a fixed window's count)."""
    return round(cost_stack.level(backend, RLS_ACTION, key))


def rls_run(backend, url, path, uses, committed):
    """One request per entry of `uses` through Envoy's ratelimit filter, all at once, as a fresh
    tenant; waits until every stream-done call is settled: for the token-quota pattern (not
    `committed`), a decision per check and per debit; for reserve/commit, the limit's counter at
    the admitted usage (a debit that did not fit is carried as debt)."""
    key = f"tenant-{uuid.uuid4().hex[:12]}"
    decisions = backend.decisions(RLS_ACTION)
    shot = backend.metric("sluice_commit_overshoot_units_total", action=RLS_ACTION)
    admitted, denied = cost_stack.burst(url, path, key, uses, delay_ms=DELAY_MS)
    if committed:
        def settled():
            return rls_used(backend, key) == sum(admitted)
    else:
        def settled():
            return backend.decisions(RLS_ACTION) - decisions >= len(uses) + len(admitted)
    stack.wait_until(settled, "every stream-done call settled", timeout=15)
    return {"key": key, "admitted": admitted, "denied": denied,
            "overshoot": (backend.metric("sluice_commit_overshoot_units_total", action=RLS_ACTION) - shot
                          if committed else None)}


def main():
    tmp = Path(tempfile.mkdtemp(prefix="sluice-cost-bench."))
    started = []
    rls = contextlib.ExitStack()
    try:
        redis, redis_port = stack.start_redis(tmp)
        started.append(redis)
        backend = stack.Backend(tmp, redis_port).start()
        started.append(backend)
        server, port = cost_stack.start_upstream()
        envoy = cost_stack.start_envoy(tmp, backend, port)
        started.append(envoy)
        for action in ("cost_reserve", "cost_check"):
            backend.put_rule({"action": action, **cost_stack.BUDGET_RULE})
        url = envoy.url("LISTEN_OPEN_PORT")
        rls_envoy, rls_backend = rls.enter_context(stack.rls_stack(
            tmp, "ratelimit_cost.yaml", port, ["RLS_OPEN_PORT"], ["--ratelimit-config", str(RLS_CONFIG)]))
        rls_url = rls_envoy.url("RLS_OPEN_PORT")
        print(f"{CLIENTS} clients at once, budget {cost_stack.BUDGET} units, usage 100-700 per request, "
              f"upstream holds each {DELAY_MS} ms, {ROUNDS} rounds")
        print(f"{'pattern':<18} {'round':>5} {'admitted':>8} {'denied':>6} {'used':>6} {'vs budget':>9} "
              f"{'bound':>6} {'overshoot':>9}")
        held, checked, quota, marked = [], [], [], []
        for i in range(1, ROUNDS + 1):
            uses = [random.Random(i * 1000 + k).randint(100, 700) for k in range(CLIENTS)]
            run = cost_stack.run(backend, envoy, url, "/reserve", "cost_reserve", uses, delay_ms=DELAY_MS,
                                 headers={"x-max-tokens": str(RESERVED)})
            bound = sum(max(0, u - RESERVED) for u in run["admitted"])
            held.append(row("reserve/commit", i, run, bound))
            assert held[-1]["used"] <= cost_stack.BUDGET + bound, "over the stated bound"
            run = cost_stack.run(backend, envoy, url, "/check", "cost_check", uses, delay_ms=DELAY_MS)
            checked.append(row("check-then-debit", i, run, None))
            run = rls_run(rls_backend, rls_url, "/quota", uses, committed=False)
            quota.append(row("rls token-quota", i, run, None))
            run = rls_run(rls_backend, rls_url, "/reserve", uses, committed=True)
            bound = sum(max(0, u - RESERVED) for u in run["admitted"])
            marked.append(row("rls reserve/commit", i, run, bound))
            assert marked[-1]["used"] <= cost_stack.BUDGET + bound, "over the stated bound"
        print("medians:")
        for name, rows in (("reserve/commit", held), ("check-then-debit", checked),
                           ("rls token-quota", quota), ("rls reserve/commit", marked)):
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "overshoot"}
            shots = [r["overshoot"] for r in rows if r["overshoot"] is not None]
            shot = f"{statistics.median(shots):.0f}" if shots else "-"
            print(f"  {name:<18} admitted {med['admitted']:.0f}, used {med['used']:.0f}, "
                  f"vs budget {med['over']:+.0f}, backend overshoot {shot}")
        a, b = (statistics.median(r["over"] for r in rows) for rows in (quota, marked))
        if b > 0:
            print(f"  rls overshoot, token-quota / reserve-commit: {a / b:.1f}x ({a:+.0f} / {b:+.0f})")
        else:
            print(f"  rls overshoot, token-quota / reserve-commit: no ratio, reserve/commit stays "
                  f"within the budget ({b:+.0f}) where token-quota is {a:+.0f} over")
        server.shutdown()
        server.server_close()
    finally:
        rls.close()
        for proc in reversed(started):
            proc.stop()


if __name__ == "__main__":
    main()
