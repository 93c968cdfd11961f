#!/usr/bin/env python3
"""Helper of benches/envoy/callgrind.sh: free ports, the Envoy configuration, a callgrind dump's
total, and the final table. Subcommands:

  port WORK                     a free 127.0.0.1 port never handed out before in WORK
  rules                         the rules every bench backend gets: ACTION<TAB>JSON per line
  header ROW                    the request header the row's requests carry (NAME: VALUE)
  pki DIR                       makes a CA, the backend's and Envoy's certificates in DIR
                                (tests/e2e/certs.py) and prints the backend's flags for mutual
                                TLS on its gRPC listener, one per line
  config WORK OUT ROWS...       writes Envoy's configuration (JSON, which Envoy reads as YAML) and
                                WORK/rows.tsv (row, build, port); ports and paths come from the
                                environment (see callgrind.sh), ROWS are row names
  total FILE                    the instruction total of one callgrind dump
  delta BEFORE AFTER            what changed between two dumps of Envoy's /stats (the counters
                                that show a window's requests were decided as the row means)
  table WORK                    the table of WORK/results.tsv

Why one Envoy with every row as its own listener: instruction counts do not depend on cache state
or on what else the process holds, so rows measured in turn in one process compare exactly, and
the expensive part (starting Envoy and V8 under valgrind) is paid once. Every other filter build
(COMPARE) gets its own VM (`vm_id`), so the builds are measured side by side in one process.
The configuration is also what benches/envoy/tls_cpu.py runs (without valgrind).
"""
import json
import os
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))

import certs  # noqa: E402
from rlqs_conf import quota_filter  # noqa: E402  (benches/envoy, beside this file)

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = {
    "name": "envoy.filters.http.router",
    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
}
# Callout timeouts far above what Envoy under valgrind needs (a 25 ms timeout fires under callgrind
# and the request passes undecided); failure modes closed, so an undecided request is a 503 that
# callgrind.sh refuses instead of a cheaper 200 that would skew a row.
TIMEOUT_MS = 10000

# The rules each bench backend serves (memory store): allowed (never runs out), allowed with a
# lease every measured request hits, and one that admits a request an hour (the cached row).
RLQS_ACTION = "user"
RULES = {
    "bench_allowed": {"algorithm": "gcra", "capacity": 10000000, "rate": {"count": 1000000000, "period": "1s"}},
    "bench_leased": {"algorithm": "gcra", "capacity": 10000000, "rate": {"count": 1000000000, "period": "1s"},
                     "lease": {"max": 100000, "ttl": "60s"}},
    "bench_denied": {"algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1h"}},
    # The rlqs row's: envoy/rlqs.yaml's bucket {name: user, user: <x-user-id>} is action `user`
    # (docs/rlqs.md). A token bucket whose rate fits its capacity, so sluice pays each second's
    # refill from the key (a gcra of 1e9/s would owe more than it holds and have its share's rate
    # halved), far above any request rate here: every request is admitted by Envoy's share.
    RLQS_ACTION: {"algorithm": "token_bucket", "capacity": 10000000, "rate": {"count": 1000000, "period": "1s"}},
}
# The cluster to the second backend, whose gRPC listener serves mutual TLS (the *_tls rows).
# The rlqs row's RLQS stream to the backend's gRPC listener: a cluster of its own.
RLQS_CLUSTER = "sluice_rlqs"
TLS_CLUSTER = "sluice_rls_tls"

# Row name -> (label, filter configuration or None). Rows without a configuration are the two
# that do not load the wasm filter (no_filter, rls); they do not depend on the build.
ROWS = {
    "no_filter": ("no filter", None),
    "nomatch": (
        "sluice loaded, no route matches",
        {"backend": {"cluster": "sluice_backend", "authority": "sluice", "protocol": "http"},
         "routes": [{"match": {"path_prefix": "/never-matched/"}, "action": "bench_allowed",
                     "key": {"source": "header", "name": "x-user"}}]},
    ),
    "leased": (
        "sluice allowed, leased (hit)",
        {"backend": {"cluster": "sluice_backend", "authority": "sluice", "protocol": "http"},
         "lease": {"enabled": True},
         "routes": [{"action": "bench_leased", "key": {"source": "header", "name": "x-user"}}]},
    ),
    # The leased hit with fewer rate-limit headers: what each header family costs.
    "leased_ietf": (
        "sluice leased, IETF headers only",
        {"backend": {"cluster": "sluice_backend", "authority": "sluice", "protocol": "http"},
         "lease": {"enabled": True}, "headers": {"ietf": True, "x_ratelimit": False},
         "routes": [{"action": "bench_leased", "key": {"source": "header", "name": "x-user"}}]},
    ),
    "leased_noheaders": (
        "sluice leased, no rate-limit headers",
        {"backend": {"cluster": "sluice_backend", "authority": "sluice", "protocol": "http"},
         "lease": {"enabled": True}, "headers": {"ietf": False, "x_ratelimit": False},
         "routes": [{"action": "bench_leased", "key": {"source": "header", "name": "x-user"}}]},
    ),
    "http": (
        "sluice allowed, HTTP callout",
        {"backend": {"cluster": "sluice_backend", "authority": "sluice", "protocol": "http"},
         "routes": [{"action": "bench_allowed", "key": {"source": "header", "name": "x-user"}}]},
    ),
    "grpc": (
        "sluice allowed, gRPC callout",
        {"backend": {"cluster": "sluice_rls", "protocol": "grpc"},
         "routes": [{"action": "bench_allowed", "key": {"source": "header", "name": "x-user"}}]},
    ),
    "grpc_stream": (
        "sluice allowed, grpc_stream",
        {"backend": {"cluster": "sluice_rls", "protocol": "grpc_stream"},
         "routes": [{"action": "bench_allowed", "key": {"source": "header", "name": "x-user"}}]},
    ),
    # The native build only: grpc_stream over the one exchange stream Envoy's main thread keeps
    # (native/src/stream.rs; filter_name ".../stream"), beside the row above (".../unary": each
    # exchange a unary DecisionExchange/Call over the request's own HTTP callout).
    "grpc_stream_main": (
        "native grpc_stream (main-thread stream)",
        {"backend": {"cluster": "sluice_rls", "protocol": "grpc_stream"},
         "routes": [{"action": "bench_allowed", "key": {"source": "header", "name": "x-user"}}]},
    ),
    # A denied key answered from the denial cache: the rule admits one request per hour, the
    # warm-up spends it and caches the denial (max_ttl_ms 1 h), so every measured request is a
    # cache hit (429, no callout).
    "cached": (
        "sluice denied, from the denial cache",
        {"backend": {"cluster": "sluice_backend", "authority": "sluice", "protocol": "http"},
         "denial_cache": {"enabled": True, "max_ttl_ms": 3600000},
         "routes": [{"action": "bench_denied", "key": {"source": "header", "name": "x-user"}}]},
    ),
    "rls": ("Envoy's ratelimit filter -> sluice RLS", None),
    # Stock Envoy's quota filter (envoy.filters.http.rate_limit_quota) exactly as envoy/rlqs.yaml
    # configures its fail-closed listener (no assignment yet: DENY_ALL, so a request measured
    # without sluice's token bucket in force is a 429 that callgrind.sh refuses), reporting to the
    # backend's gRPC listener over its own cluster (sluice_rlqs, as in envoy/rlqs.yaml, so a
    # window's report traffic shows in the counters apart from the callouts'): every measured
    # request is decided inside Envoy by the share sluice assigned, with no callout; Envoy's 5 s
    # usage report (and sluice's answer) lands in its windows.
    "rlqs": ("Envoy's quota filter (RLQS), sluice's share", None),
}
# Each row's twin over mutual TLS (not in callgrind.sh's default ROWS): the same decision from
# Envoy to the second backend's gRPC listener through TLS_CLUSTER, listed after its plaintext row.
TLS_ROWS = {"grpc": "grpc_tls", "grpc_stream": "grpc_stream_tls", "rls": "rls_tls"}
PLAIN_OF = {tls: plain for plain, tls in TLS_ROWS.items()}


def with_tls_twins(rows):
    """`rows` with each TLS_ROWS twin after its plaintext row: the same filter configuration, its
    backend the TLS_CLUSTER (TLS is the cluster's business, not the filter's)."""
    out = {}
    for name, (label, conf) in rows.items():
        out[name] = (label, conf)
        if name in TLS_ROWS:
            tls_conf = conf and {**conf, "backend": {**conf["backend"], "cluster": TLS_CLUSTER}}
            out[TLS_ROWS[name]] = (label + ", mTLS", tls_conf)
    return out


ROWS = with_tls_twins(ROWS)
BUILD_FREE = {"no_filter", "rls", "rls_tls", "rlqs"}
# Rows measured on the native build only, and the native build's filter_name suffix per row (it
# picks how grpc_stream decisions go: native/src/stream.rs `wanted`).
NATIVE_ONLY = {"grpc_stream_main"}
NATIVE_NAME = {"grpc_stream": "/unary", "grpc_stream_tls": "/unary", "grpc_stream_main": "/stream"}


# The header each row's requests carry: the sluice filter's and the rls rows' key is x-user;
# envoy/rlqs.yaml buckets by x-user-id.
HEADERS = {"rlqs": "x-user-id: bench"}
DEFAULT_HEADER = "x-user: bench"


def port(work):
    used_file = os.path.join(work, "ports")
    used = set(open(used_file).read().split()) if os.path.exists(used_file) else set()
    for _ in range(100):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = str(s.getsockname()[1])
        s.close()
        if p not in used:
            with open(used_file, "a") as f:
                f.write(p + "\n")
            return p
    sys.exit("sluice callgrind: no free port")


def addr(p):
    return {"socket_address": {"address": "127.0.0.1", "port_value": int(p)}}


def listener(name, p, http_filters, route):
    return {
        "name": name,
        "address": addr(p),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM,
                "stat_prefix": name,
                "normalize_path": True,
                "merge_slashes": True,
                "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
                "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [route]}]},
                "http_filters": http_filters + [ROUTER],
            },
        }]}],
    }


def cluster(name, p, http2=False, transport_socket=None):
    """A cluster of one 127.0.0.1 endpoint: HTTP/1.1 (idling out after 5 s) or HTTP/2, over
    `transport_socket` when given (certs.upstream_tls)."""
    options = {"explicit_http_config": {"http2_protocol_options": {}}} if http2 else {
        # As in bench.yaml: the backend closes connections idle for 10 s; close ours first.
        "common_http_protocol_options": {"idle_timeout": "5s"},
        "explicit_http_config": {"http_protocol_options": {}},
    }
    built = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": dict(
            {"@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"}, **options)},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": addr(p)}}]}]},
    }
    if transport_socket:
        built["transport_socket"] = transport_socket
    return built


def ratelimit_filter(cluster_name):
    """Envoy's own ratelimit filter asking the sluice RLS behind `cluster_name`, failing closed."""
    return {
        "name": "envoy.filters.http.ratelimit",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
            "domain": "sluice",
            "timeout": f"{TIMEOUT_MS / 1000}s",
            "failure_mode_deny": True,
            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
            "rate_limit_service": {"transport_api_version": "V3",
                                   "grpc_service": {"envoy_grpc": {"cluster_name": cluster_name}}},
        }}


def filter_conf(conf):
    """A row's filter configuration as measured (the same JSON for both builds)."""
    conf = json.loads(json.dumps(conf))
    # grpc_stream's root ticks every timeout / 4 to keep its deadlines, in every row's window:
    # with the longest timeout allowed that is one tick per 15 s instead of per 2.5 s.
    stream = conf["backend"]["protocol"] == "grpc_stream"
    conf["backend"]["timeout_ms"] = 60000 if stream else TIMEOUT_MS
    # Fail closed, no reports; the denial cache off unless the row is about it.
    conf = {"denial_cache": {"enabled": False}} | conf | {"failure_mode": "deny", "report": {"enabled": False}}
    conf.setdefault("lease", {"enabled": True})  # the default, as in bench.yaml's allowed rows
    return conf


def wasm_filter(name, vm_id, wasm, conf):
    conf = filter_conf(conf)
    return {
        "name": "envoy.filters.http.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": name,
                "vm_config": {"vm_id": vm_id, "runtime": "envoy.wasm.runtime.v8",
                              "code": {"local": {"filename": wasm}}},
                "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                                  "value": json.dumps(conf)},
            },
        },
    }


def native_filter(name, so, conf, suffix=""):
    """The dynamic-module build (libsluice_filter_native.so, loaded by absolute path) with the
    same configuration string as the wasm build's; `suffix` ends its filter_name."""
    return {
        "name": "envoy.filters.http.dynamic_modules",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
            "dynamic_module_config": {"module": {"local": {"filename": so}}},
            "filter_name": name + suffix,
            "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                              "value": json.dumps(filter_conf(conf))},
        },
    }


def config(work, out, rows, env=os.environ):
    """Envoy's configuration for `rows` at `out` and WORK/rows.tsv; ports and paths from `env`:
    ENVOY_ADMIN_PORT, BACKEND_PORT, BACKEND_RLS_PORT, WASM, COMPARE, NATIVE, and for the *_tls
    rows BACKEND_TLS_RLS_PORT (the TLS backend's gRPC listener) and PKI (certs.make_pki's dir)."""
    builds = [("base", env["WASM"])]
    for path in env.get("COMPARE", "").split():
        name = os.path.basename(path).removesuffix(".wasm")
        while name in {b for b, _ in builds}:
            name += "_"
        builds.append((name, path))
    native = env.get("NATIVE", "")
    if native and native != "none":
        builds.append(("native", native))
    upstream = port(work)
    to_upstream = {"match": {"prefix": "/"}, "route": {"cluster": "upstream"}}
    listeners = [listener("upstream", upstream, [], {
        "match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}})]
    table = []
    for row in rows:
        if row not in ROWS:
            sys.exit(f"sluice callgrind: unknown row {row} (known: {' '.join(ROWS)})")
        label, conf = ROWS[row]
        row_builds = builds[:1] if row in BUILD_FREE else builds
        if row in NATIVE_ONLY:
            row_builds = [b for b in builds if b[0] == "native"]
        for build, wasm in row_builds:
            p = port(work)
            name = f"{row}_{build}"
            if row == "no_filter":
                listeners.append(listener(name, p, [], to_upstream))
            elif row in ("rls", "rls_tls"):
                # Envoy's own ratelimit filter, as bench.yaml's rls_allowed (one descriptor that
                # sluice maps to bench_allowed and the x-user key).
                route = dict(to_upstream, route={"cluster": "upstream", "rate_limits": [{"actions": [
                    {"generic_key": {"descriptor_value": "bench_allowed"}},
                    {"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]}]})
                to = TLS_CLUSTER if row in PLAIN_OF else "sluice_rls"
                listeners.append(listener(name, p, [ratelimit_filter(to)], route))
            elif row == "rlqs":
                listeners.append(listener(name, p, [quota_filter(RLQS_CLUSTER)], to_upstream))
            elif build == "native":
                listeners.append(listener(name, p, [native_filter(name, wasm, conf, NATIVE_NAME.get(row, ""))],
                                          to_upstream))
            else:
                # One VM per build, shared by its listeners (as one filter build is in production).
                vm_id = "sluice" if build == "base" else f"sluice_{[n for n, _ in builds].index(build)}"
                listeners.append(listener(name, p, [wasm_filter(name, vm_id, wasm, conf)], to_upstream))
            table.append((row, build, p, label))
    clusters = [
        cluster("sluice_backend", env["BACKEND_PORT"]),
        cluster("sluice_rls", env["BACKEND_RLS_PORT"], http2=True),
        {"name": "upstream", "type": "STATIC", "connect_timeout": "1s", "load_assignment": {
            "cluster_name": "upstream",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": addr(upstream)}}]}]}},
    ]
    if "rlqs" in rows:
        clusters.append(cluster(RLQS_CLUSTER, env["BACKEND_RLS_PORT"], http2=True))
    if any(row in PLAIN_OF for row in rows):
        clusters.append(cluster(TLS_CLUSTER, env["BACKEND_TLS_RLS_PORT"], http2=True,
                                transport_socket=certs.upstream_tls(Path(env["PKI"]))))
    doc = {
        "admin": {"address": addr(env["ENVOY_ADMIN_PORT"])},
        # Envoy's stats flush (every 5 s by default) would land in some windows and not others
        # (a window of 300 requests under callgrind takes a few seconds): ~1% between repeats.
        "stats_flush_interval": "299s",
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(work, "rows.tsv"), "w") as f:
        for r in table:
            f.write("\t".join(r) + "\n")


def total(path):
    # `totals:` (at the end) is the dump's count of the event Ir, instructions executed; the
    # `summary:` line at the top of a dump asked for while instrumentation is off reads 0.
    found = {}
    for line in open(path):
        if line.startswith(("totals:", "summary:")):
            found[line.split(":")[0]] = int(line.split()[1])
    if "totals" not in found and "summary" not in found:
        sys.exit(f"sluice callgrind: no totals in {path}")
    print(found.get("totals", found.get("summary")))


COUNTERS = {
    "wasmcustom.sluice.callouts": "callouts",
    "wasmcustom.sluice.lease_hits": "lease_hits",
    "wasmcustom.sluice.allowed": "allowed",
    "wasmcustom.sluice.cached_denials": "cached_denials",
    "wasmcustom.sluice.failures_deny": "failures",
    "wasmcustom.sluice.failures_allow": "failures_allow",
    # The dynamic-module build's (Envoy prefixes a module's stats with dynamicmodulescustom).
    "dynamicmodulescustom.sluice.callouts": "callouts",
    "dynamicmodulescustom.sluice.lease_hits": "lease_hits",
    "dynamicmodulescustom.sluice.allowed": "allowed",
    "dynamicmodulescustom.sluice.cached_denials": "cached_denials",
    "dynamicmodulescustom.sluice.failures_deny": "failures",
    "dynamicmodulescustom.sluice.failures_allow": "failures_allow",
    "cluster.upstream.ratelimit.ok": "rls_ok",
    "cluster.upstream.ratelimit.error": "rls_error",
    "cluster.upstream.ratelimit.failure_mode_allowed": "rls_failure_allowed",
    # New connections to the backend and TLS handshakes in a window (none while one is reused).
    "cluster.sluice_backend.upstream_cx_total": "backend_connects",
    "cluster.sluice_rls.upstream_cx_total": "backend_connects",
    f"cluster.{TLS_CLUSTER}.upstream_cx_total": "backend_connects",
    f"cluster.{TLS_CLUSTER}.ssl.handshake": "tls_handshakes",
    # Bytes on the quota filter's RLQS stream in the window: Envoy's 5 s report (29 bytes with no
    # bucket, its domain only, which sluice does not answer; ~70 with the rlqs row's bucket) and
    # sluice's answer (rx).
    f"cluster.{RLQS_CLUSTER}.upstream_cx_tx_bytes_total": "rlqs_tx_bytes",
    f"cluster.{RLQS_CLUSTER}.upstream_cx_rx_bytes_total": "rlqs_rx_bytes",
}


def delta(before, after):
    def read(path):
        out = {}
        for line in open(path):
            name, _, value = line.partition(": ")
            if name in COUNTERS and value.strip().isdigit():
                out[name] = int(value)
        return out
    a, b = read(before), read(after)
    moved = {}
    for n in COUNTERS:
        if n in b and b[n] != a.get(n, 0):
            moved[COUNTERS[n]] = moved.get(COUNTERS[n], 0) + b[n] - a.get(n, 0)
    shown = [f"{k}={v}" for k, v in moved.items()]
    print(" ".join(shown) or "no counter moved")


def table(work):
    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(work, "rows.tsv"))]
    results, notes = {}, {}
    for line in open(os.path.join(work, "results.tsv")):
        row, build, _, ipr, note = line.rstrip("\n").split("\t")
        results.setdefault((row, build), []).append(float(ipr))
        notes.setdefault((row, build), []).append(note)
    skipped = {}
    skip_file = os.path.join(work, "skipped.tsv")
    if os.path.exists(skip_file):
        for line in open(skip_file):
            row, why = line.rstrip("\n").split("\t", 1)
            skipped[row] = why
    plain = results.get(("no_filter", "base"))
    ref = statistics.mean(plain) if plain else None
    reps = max((len(v) for v in results.values()), default=0)

    def k(v):
        return f"{v / 1000:.1f}k"

    def d(v):
        return f"{v / 1000:+.1f}k"

    bw = max([12] + [len(b) + 1 for _, b, _, _ in rows])
    lw = max([33] + [len(label) for _, _, _, label in rows])
    head = f"{'row':{lw}} {'build':{bw}}" + "".join(f" {'repeat ' + str(i + 1):>9}" for i in range(reps))
    head += f" {'mean':>9} {'vs no filter':>13} {'vs base':>16}"
    print(head)
    print("-" * len(head))
    labels = {row: label for row, _, _, label in rows}
    builds = {}
    for row, build, _, _ in rows:
        builds.setdefault(row, []).append(build)
    for row in ROWS:
        if row in skipped:
            print(f"{ROWS[row][0]:{lw}} skipped: {skipped[row]}")
            continue
        if row not in labels:
            continue
        base_mean = None
        for n, build in enumerate(builds[row]):
            vals = results.get((row, build), [])
            first = labels[row] if n == 0 else ""
            shown = f"{first:{lw}} {'-' if row in BUILD_FREE else build:{bw}}"
            shown += "".join(f" {k(v):>9}" for v in vals) + " " * (10 * (reps - len(vals)))
            if not vals:
                print(shown)
                continue
            mean = statistics.mean(vals)
            base_mean = mean if build == "base" else base_mean
            vs_base = ""
            if build != "base" and base_mean:
                vs_base = f"{d(mean - base_mean)} ({(mean - base_mean) / base_mean * 100:+.1f}%)"
            vs_plain = d(mean - ref) if ref is not None and row != "no_filter" else ""
            print(shown + f" {k(mean):>9} {vs_plain:>13} {vs_base:>16}")
    tls_pairs = [(row, build) for row, build, _, _ in rows
                 if row in PLAIN_OF and results.get((row, build)) and results.get((PLAIN_OF[row], build))]
    if tls_pairs:
        print()
        print("mutual TLS beside plaintext, the same row and build (mean over mean)")
        for row, build in tls_pairs:
            tls, plain = statistics.mean(results[(row, build)]), statistics.mean(results[(PLAIN_OF[row], build)])
            print(f"  {row:16} {'-' if row in BUILD_FREE else build:{bw}} {k(plain):>9} -> {k(tls):>9} "
                  f"{d(tls - plain):>9} ({(tls - plain) / plain * 100:+.1f}%)")
    print()
    print("what Envoy's counters did in each measured window (callouts and lease hits of the sluice filter,")
    print("either build; ratelimit.ok of Envoy's ratelimit filter), repeats separated by |")
    for row, build, _, _ in rows:
        if (row, build) in notes:
            print(f"  {row:16} {build:{bw}} " + " | ".join(notes[(row, build)]))


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "port":
        print(port(sys.argv[2]))
    elif cmd == "rules":
        for action, rule in RULES.items():
            print(f"{action}\t{json.dumps(rule)}")
    elif cmd == "header":
        print(HEADERS.get(sys.argv[2], DEFAULT_HEADER))
    elif cmd == "pki":
        print("\n".join(certs.backend_args(certs.make_pki(Path(sys.argv[2])))))
    elif cmd == "config":
        config(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "total":
        total(sys.argv[2])
    elif cmd == "delta":
        delta(sys.argv[2], sys.argv[3])
    elif cmd == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
