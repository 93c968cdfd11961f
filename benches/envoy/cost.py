"""Cost budgets: the overshoot of reserve/commit beside check-then-debit, at 64 clients, in one run.

Each round, 64 clients send one request each, all at once, through a real Envoy (envoy/e2e_cost.yaml,
the wasm filter, the default grpc_stream callout) to an upstream that holds each request DELAY_MS
and reports its usage (100-700 units, drawn with the round's seed) in x-usage-total-tokens. The
budget is 10,000 units (token_bucket, capacity 10,000, refilling 1,000 per 7 days: nothing refills
within a run). Two routes, each on a fresh key per round:

  reserve/commit   reserves 500 per request (x-max-tokens), commits the usage (refund or debit)
  check-then-debit reserves 1 (a check that the budget is not spent), commits the usage: the
                   pattern of envoyproxy/ratelimit's hits_addend 0 + apply_on_stream_done, Envoy AI
                   Gateway and Limitador's CheckRateLimit + Report

Printed per round and as medians: requests admitted and denied, units used by the admitted ones,
how far that is over the budget, the stated bound for reserve/commit (the sum of actual - reserved
over the admitted requests whose actual exceeded 500), and the backend's overshoot counter
(sluice_commit_overshoot_units_total: debits that did not fit when they came).

Needs what the e2e tests need (tests/suites/20-envoy.sh: Envoy in .venv, redis-server, the built
filter and a `sluice` binary: SLUICE_BIN, default target/debug/sluice). Everything on 127.0.0.1,
stopped at exit; bounded at about ROUNDS x 2 x (DELAY_MS + 1 s).
    ROUNDS=5 DELAY_MS=300 .venv/bin/python benches/envoy/cost.py
"""

import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))

import cost_stack  # noqa: E402
import stack  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
DELAY_MS = int(os.environ.get("DELAY_MS", "300"))
CLIENTS = 64
RESERVED = 500


def row(name, i, run, bound):
    used = sum(run["admitted"])
    over = used - cost_stack.BUDGET
    print(f"{name:<17} {i:>5} {len(run['admitted']):>8} {run['denied']:>6} {used:>6} {over:>+9} "
          f"{bound if bound is not None else '-':>6} {run['overshoot']:>9.0f}")
    return {"admitted": len(run["admitted"]), "used": used, "over": over, "overshoot": run["overshoot"]}


def main():
    tmp = Path(tempfile.mkdtemp(prefix="sluice-cost-bench."))
    started = []
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
        print(f"{CLIENTS} clients at once, budget {cost_stack.BUDGET} units, usage 100-700 per request, "
              f"upstream holds each {DELAY_MS} ms, {ROUNDS} rounds")
        print(f"{'pattern':<17} {'round':>5} {'admitted':>8} {'denied':>6} {'used':>6} {'vs budget':>9} "
              f"{'bound':>6} {'overshoot':>9}")
        held, checked = [], []
        for i in range(1, ROUNDS + 1):
            uses = [random.Random(i * 1000 + k).randint(100, 700) for k in range(CLIENTS)]
            run = cost_stack.run(backend, envoy, url, "/reserve", "cost_reserve", uses, delay_ms=DELAY_MS,
                                 headers={"x-max-tokens": str(RESERVED)})
            bound = sum(max(0, u - RESERVED) for u in run["admitted"])
            held.append(row("reserve/commit", i, run, bound))
            assert held[-1]["used"] <= cost_stack.BUDGET + bound, "over the stated bound"
            run = cost_stack.run(backend, envoy, url, "/check", "cost_check", uses, delay_ms=DELAY_MS)
            checked.append(row("check-then-debit", i, run, None))
        print("medians:")
        for name, rows in (("reserve/commit", held), ("check-then-debit", checked)):
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(f"  {name:<17} admitted {med['admitted']:.0f}, used {med['used']:.0f}, "
                  f"vs budget {med['over']:+.0f}, backend overshoot {med['overshoot']:.0f}")
        server.shutdown()
        server.server_close()
    finally:
        for proc in reversed(started):
            proc.stop()


if __name__ == "__main__":
    main()
