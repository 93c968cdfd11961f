"""Prints the benchmark table from measure.py's rows (one line per path per round): for each path,
in the order given, the median over the rounds of requests/s, p50, p99 and CPU per request, with
the spread of requests/s and the sluice filter's callouts per 100 requests, then the ratio of each
allowed path to no filter (medians) and what each row measures.

    summarize.py ROWS_FILE PATH..."""

import statistics
import sys

# What each row measures, printed under the table (the names stay short for the columns).
ROWS = {
    "no_filter": "Envoy, no filter",
    "local_ratelimit": "Envoy's local_ratelimit filter (huge bucket)",
    "sluice_allowed_memory": "sluice filter, HTTP callout (allowed), backend on the memory store",
    "sluice_allowed_redis": "sluice filter, HTTP callout (allowed), backend on Redis",
    "sluice_leased_memory": "sluice filter, allowed, rule with lease {max 64, ttl 1s}, grpc_stream, backend on the memory store",
    "sluice_leased_redis": "sluice filter, allowed, rule with lease {max 64, ttl 1s}, grpc_stream, backend on Redis",
    "grpc_allowed_memory": "sluice filter, gRPC callout (allowed), backend on the memory store",
    "grpc_allowed_redis": "sluice filter, gRPC callout (allowed), backend on Redis",
    "stream_allowed_memory": "sluice filter, exchange stream (grpc_stream, allowed), backend on the memory store",
    "stream_allowed_redis": "sluice filter, exchange stream (grpc_stream, allowed), backend on Redis",
    "rls_allowed_memory": "Envoy ratelimit filter → sluice RLS (allowed), backend on the memory store",
    "rls_allowed_redis": "Envoy ratelimit filter → sluice RLS (allowed), backend on Redis",
    "rlqs_allowed_memory": "stock Envoy's quota filter (envoy/rlqs.yaml), sluice's token bucket share, backend on the memory store",
    "rlqs_allowed_redis": "stock Envoy's quota filter (envoy/rlqs.yaml), sluice's token bucket share, backend on Redis",
    "sluice_denied_memory": "sluice filter, HTTP callout (denied), backend on the memory store",
    "sluice_denied_redis": "sluice filter, HTTP callout (denied), backend on Redis",
    "sluice_cached_denial": "sluice filter, denial answered from its cache (no callout)",
    "native_allowed_memory": "sluice dynamic module, HTTP callout (allowed), backend on the memory store",
    "native_leased_memory": "sluice dynamic module, allowed, rule with lease {max 64, ttl 1s}, backend on the memory store",
    "native_grpc_allowed_memory": "sluice dynamic module, gRPC callout (allowed), backend on the memory store",
    "native_stream_allowed_memory": "sluice dynamic module, grpc_stream over the main thread's exchange stream (allowed), memory store",
    "native_cached_denial": "sluice dynamic module, denial answered from its cache (no callout)",
}
ALLOWED = ("local_ratelimit", "sluice_allowed_memory", "sluice_allowed_redis", "sluice_leased_memory",
           "sluice_leased_redis", "grpc_allowed_memory", "grpc_allowed_redis",
           "stream_allowed_memory", "stream_allowed_redis",
           "rls_allowed_memory", "rls_allowed_redis", "rlqs_allowed_memory", "rlqs_allowed_redis",
           "native_allowed_memory", "native_leased_memory", "native_grpc_allowed_memory",
           "native_stream_allowed_memory")


def main():
    rows_file, *paths = sys.argv[1:]
    rows = [line.split() for line in open(rows_file) if line.strip()]
    print(f"{'':24} {'':>10} {'':>13} {'':>7} {'':>7} | {'CPU µs per request':<31} {'CPU':>6} {'callouts':>9}")
    print(f"{'path':24} {'requests/s':>10} {'(min–max)':>13} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'envoy':>7} {'backend':>7} {'redis':>7} {'wrk':>7} {'use %':>6} {'/100 req':>9}")
    rps = {}
    for path in paths:
        mine = [r for r in rows if r[0] == path]
        if not mine:
            continue
        med = lambda i: statistics.median(float(r[i]) for r in mine)
        rps[path] = med(1)
        spread = f"{min(float(r[1]) for r in mine):.0f}–{max(float(r[1]) for r in mine):.0f}"
        cpu = " ".join(f"{med(i):7.0f}" for i in range(4, 8))
        calls = [float(r[10]) for r in mine if len(r) > 10 and r[10] != "-"]
        per_100 = f"{statistics.median(calls):9.2f}" if calls else f"{'–':>9}"
        print(f"{path:24} {med(1):10.0f} {spread:>13} {med(2):7.2f} {med(3):7.2f} | {cpu} {med(8):6.0f} {per_100}")
        bad = max(int(r[9]) for r in mine)
        if bad and "denied" not in path and "denial" not in path:
            print(f"  ({path}: up to {bad} answers per round were not 2xx)")
    for path in ALLOWED:
        if path in rps and rps.get("no_filter"):
            print(f"ratio {path} / no_filter: {rps[path] / rps['no_filter']:.2f}x")
    for path in paths:
        if path in rps and path in ROWS:
            print(f"  {path:24} {ROWS[path]}")


if __name__ == "__main__":
    main()
