"""The backend's CPU per decision over mutual TLS beside plaintext, in one run (docs/backend.md,
"What TLS costs"; the instructions Envoy spends per request on it: callgrind.sh's *_tls rows).

Two release backends (BACKEND_BIN, the memory store, callgrind.py's rules): one whose gRPC
listener is h2c, one whose gRPC listener serves TLS and requires a client certificate
(--grpc-tls-cert/--grpc-tls-key/--grpc-tls-client-ca; the certificates made now with openssl in
the work dir, tests/e2e/certs.py). One Envoy (.venv/bin/envoy, --concurrency 1, not under
valgrind) with callgrind.py's configuration: a listener per row, the *_tls rows' cluster an
UpstreamTlsContext with Envoy's client certificate. Rows (ROWS, callgrind.py's names; each must
ask the backend on every request):

  grpc, grpc_tls                the sluice filter's gRPC callout (ShouldRateLimit)
  grpc_stream, grpc_stream_tls  the sluice filter's exchange stream (protocol grpc_stream)
  rls, rls_tls                  Envoy's own ratelimit filter (RLS)

on the wasm build (and on the native one too with NATIVE=path/to/libsluice_filter_native.so; its
grpc_stream rows send each exchange as a unary DecisionExchange/Call). Each row is probed and
warmed (WARMUP requests), then ROUNDS rounds, each sending REQUESTS requests through each row's
listener in turn (the order reversed every other round, so plain and TLS rows alternate and drift
cancels), from CLIENTS curl processes at once, each with PARALLEL requests in flight on as many
keep-alive connections (default 2 x 8: 16 connections, as run.sh's wrk). Per window: the CPU the
row's backend spent (utime + stime of every thread, /proc/PID/stat, through measure.py) over the
decisions it counted (sluice_decisions_total, which must equal REQUESTS), Envoy's CPU per request,
requests/s, and the new connections Envoy opened to the backend and TLS handshakes it made (its
cluster counters; 0 while the connection opened in the warm-up is reused). Then what a new
connection costs each backend: CONNECTIONS (default 300) curl processes in turn, each its own
connection with one gRPC call (h2c, or mutual TLS with Envoy's client certificate), the backend's
CPU over them. /proc/PID/stat counts in clock ticks (10 ms): the `all` column, total CPU over total
decisions of every round, is the figure to quote; the per-round ones show the spread. Everything on
127.0.0.1, stopped by PID at exit; bounded by MAX_SECONDS (default 900).

Needs the release builds (`cargo build --locked --release -p sluice-backend --bin sluice`,
`bash scripts/build-filter.sh`), Envoy in .venv and openssl. Not part of the test command.
    ROUNDS=6 REQUESTS=5000 CLIENTS=2 PARALLEL=8 .venv/bin/python benches/envoy/tls_cpu.py
"""

import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

import callgrind  # noqa: E402  (it puts tests/e2e on the path)
import certs  # noqa: E402
import measure  # noqa: E402
import stack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ROWS = os.environ.get("ROWS", "grpc grpc_tls grpc_stream grpc_stream_tls rls rls_tls").split()
REQUESTS = int(os.environ.get("REQUESTS", "5000"))
ROUNDS = int(os.environ.get("ROUNDS", "6"))
CLIENTS = int(os.environ.get("CLIENTS", "2"))
PARALLEL = int(os.environ.get("PARALLEL", "8"))
WARMUP = int(os.environ.get("WARMUP", "500"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "300"))
MAX_SECONDS = int(os.environ.get("MAX_SECONDS", "900"))
BACKEND_BIN = os.environ.get("BACKEND_BIN", str(ROOT / "target" / "release" / "sluice"))
WASM = os.environ.get("WASM", str(ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "sluice_filter.wasm"))
NATIVE = os.environ.get("NATIVE", "none")
ENVOY = str(ROOT / ".venv" / "bin" / "envoy")
TOKEN = "bench-admin-token-0123456789abcdef"
# Rows whose every request is a decision of the backend (callgrind.py's names).
DECIDING = {"http", "grpc", "grpc_stream", "grpc_stream_main", "rls"}
STARTED = time.monotonic()


def fail(why):
    sys.exit(f"sluice tls_cpu: {why}")


def check_time():
    if time.monotonic() - STARTED > MAX_SECONDS:
        fail(f"over MAX_SECONDS={MAX_SECONDS}, stopping")


def start_backend(work, name, flags=()):
    """A release backend on the memory store with callgrind.py's rules; returns (Proc, ports)."""
    ports = {k: callgrind.port(work) for k in ("decision", "admin", "grpc")}
    args = [BACKEND_BIN, "--decision-listen", f"127.0.0.1:{ports['decision']}",
            "--admin-listen", f"127.0.0.1:{ports['admin']}", "--grpc-listen", f"127.0.0.1:{ports['grpc']}",
            "--admin-token", TOKEN, *flags]
    proc = stack.Proc(args, Path(work) / f"{name}.log", env=dict(os.environ, RUST_LOG="warn"))

    def ready():
        if not proc.alive():
            fail(f"backend {name} exited:\n{proc.tail()}")
        return requests.get(f"http://127.0.0.1:{ports['admin']}/readyz", timeout=1).status_code == 200
    stack.wait_until(ready, f"backend {name}")
    for action, rule in callgrind.RULES.items():
        r = requests.put(f"http://127.0.0.1:{ports['admin']}/v1/rules/{action}", json=rule,
                         headers={"authorization": f"Bearer {TOKEN}"}, timeout=5)
        r.raise_for_status()
    return proc, ports


def decisions(ports):
    """The backend's sluice_decisions_total, every action and outcome."""
    text = requests.get(f"http://127.0.0.1:{ports['decision']}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sluice_decisions_total{"))


def cluster_of(row):
    """The Envoy cluster by which `row` reaches the backend (callgrind.py's configuration)."""
    return callgrind.TLS_CLUSTER if row in callgrind.PLAIN_OF else "sluice_backend" if row == "http" else "sluice_rls"


def counters(admin, cluster):
    """The connections Envoy opened to `cluster` so far and the TLS handshakes it made on them."""
    values = {}
    stats = requests.get(f"http://127.0.0.1:{admin}/stats", params={"filter": rf"^cluster\.{cluster}\."}, timeout=5)
    for line in stats.text.splitlines():
        name, _, value = line.partition(": ")
        if value.strip().isdigit():
            values[name] = int(value)
    return values.get(f"cluster.{cluster}.upstream_cx_total", 0), values.get(f"cluster.{cluster}.ssl.handshake", 0)


def send(port, n, path="m"):
    """`n` requests to the listener on `port` from CLIENTS curl processes at once, each with
    PARALLEL requests in flight (URL globbing with -Z: PARALLEL keep-alive HTTP/1.1 connections;
    curl 7.88's -Z over one HTTP/2 connection fails most transfers); returns (answers other than
    200, new downstream connections)."""
    shares = [n // CLIENTS + (1 if i < n % CLIENTS else 0) for i in range(CLIENTS)]
    procs = [subprocess.Popen(["curl", "-s", "--no-progress-meter", "-Z", "--parallel-max", str(PARALLEL),
                               "--max-time", "300", "-o", "/dev/null", "-w",
                               "%{stderr}%{http_code} %{num_connects}\n", "-H", "x-user: bench",
                               f"http://127.0.0.1:{port}/{path}[1-{k}]"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for k in shares if k]
    out = [line for p in procs for line in p.communicate(timeout=320)[1].splitlines()]
    lines = [line.split() for line in out if re.fullmatch(r"\d{3} \d+", line)]
    if len(lines) != len(out):
        print("\n".join(line for line in out if not re.fullmatch(r"\d{3} \d+", line))[:2000], file=sys.stderr)
    bad = sum(1 for code, _ in lines if code != "200") + (n - len(lines))
    if bad:
        print(f"port {port}: answers {collections.Counter(code for code, _ in lines)} of {n}", file=sys.stderr)
    return bad, sum(int(c) for _, c in lines)


def window(row, port, backend, envoy_pid, admin):
    """One measured window of REQUESTS requests; returns its figures."""
    proc, ports = backend
    cx0, hs0 = counters(admin, cluster_of(row))
    d0 = decisions(ports)
    b0, e0, t0 = measure.cpu_seconds(proc.popen.pid), measure.cpu_seconds(envoy_pid), time.monotonic()
    bad, downstream = send(port, REQUESTS)
    b1, e1, t1 = measure.cpu_seconds(proc.popen.pid), measure.cpu_seconds(envoy_pid), time.monotonic()
    decided = decisions(ports) - d0
    cx1, hs1 = counters(admin, cluster_of(row))
    if bad or decided != REQUESTS:
        fail(f"{row}: {bad} of {REQUESTS} answers not 200, the backend counted {decided:.0f} decisions")
    return {"backend": b1 - b0, "envoy": e1 - e0, "seconds": t1 - t0, "downstream": downstream,
            "connects": cx1 - cx0, "handshakes": hs1 - hs0}


def connections(work, backend, pki=None):
    """The backend's CPU for CONNECTIONS new connections, each one gRPC call (an empty
    ShouldRateLimit: answered at once, the same for both) from its own curl process, h2c or with
    `pki`'s client certificate over mutual TLS; returns µs per connection."""
    proc, ports = backend
    frame = Path(work) / "empty.grpc"
    frame.write_bytes(b"\0\0\0\0\0")
    host = "localhost" if pki else "127.0.0.1"
    args = ["curl", "-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{num_connects}", "-X", "POST",
            "-H", "content-type: application/grpc", "-H", "te: trailers", "--data-binary", f"@{frame}"]
    if pki:
        args += ["--http2", "--resolve", f"localhost:{ports['grpc']}:127.0.0.1", "--cacert", f"{pki}/ca.pem",
                 "--cert", f"{pki}/envoy.pem", "--key", f"{pki}/envoy.key"]
    else:
        args += ["--http2-prior-knowledge"]
    url = f"{'https' if pki else 'http'}://{host}:{ports['grpc']}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    before = measure.cpu_seconds(proc.popen.pid)
    connected = sum(int(subprocess.run([*args, url], capture_output=True, text=True, timeout=20).stdout or 0)
                    for _ in range(CONNECTIONS))
    spent = measure.cpu_seconds(proc.popen.pid) - before
    if connected != CONNECTIONS:
        fail(f"{connected} of {CONNECTIONS} connections to the {'TLS' if pki else 'h2c'} gRPC listener were made")
    return spent / CONNECTIONS * 1e6


def table(listeners, results):
    def us(seconds, n):
        return f"{seconds / n * 1e6:.1f}"

    head = (f"{'row':16} {'build':7}" + "".join(f" {'r' + str(i + 1):>6}" for i in range(ROUNDS))
            + f" {'all':>6} {'Envoy':>6} {'req/s':>6} {'new conns':>9} {'handshakes':>10}")
    print("backend CPU µs per decision (r1.. per round, all: every round's CPU over every round's decisions),")
    print("Envoy CPU µs per request (all rounds), requests/s (median), new connections from Envoy to the")
    print("row's backend and TLS handshakes on them (summed over the measured windows)")
    print(head)
    print("-" * len(head))
    totals = {}
    for row, build, _ in listeners:
        ws = results[(row, build)]
        n = REQUESTS * len(ws)
        backend, envoy = sum(w["backend"] for w in ws), sum(w["envoy"] for w in ws)
        totals[(row, build)] = (backend / n * 1e6, envoy / n * 1e6)
        rps = statistics.median(REQUESTS / w["seconds"] for w in ws)
        print(f"{row:16} {build:7}" + "".join(f" {us(w['backend'], REQUESTS):>6}" for w in ws)
              + f" {us(backend, n):>6} {us(envoy, n):>6} {rps:>6.0f} {sum(w['connects'] for w in ws):>9}"
              f" {sum(w['handshakes'] for w in ws):>10}")
    pairs = [(row, build) for row, build, _ in listeners
             if row in callgrind.PLAIN_OF and (callgrind.PLAIN_OF[row], build) in totals]
    if pairs:
        print()
        print("mutual TLS beside plaintext (all rounds): plaintext -> TLS, difference, ratio")
        for row, build in pairs:
            (bt, et), (bp, ep) = totals[(row, build)], totals[(callgrind.PLAIN_OF[row], build)]
            print(f"  {row:16} {build:7} backend {bp:.1f} -> {bt:.1f} µs/decision ({bt - bp:+.1f}, x{bt / bp:.2f});"
                  f" Envoy {ep:.1f} -> {et:.1f} µs/request ({et - ep:+.1f}, x{et / ep:.2f})")


def main():
    unknown = [r for r in ROWS if callgrind.PLAIN_OF.get(r, r) not in DECIDING]
    if unknown:
        fail(f"rows {unknown} do not ask the backend on every request (rows: {' '.join(sorted(DECIDING))} and their _tls twins)")
    for f in [BACKEND_BIN, WASM, ENVOY] + ([] if NATIVE == "none" else [NATIVE]):
        if not os.path.exists(f):
            fail(f"{f} is missing (build: cargo build --locked --release -p sluice-backend --bin sluice; bash scripts/build-filter.sh)")
    work = tempfile.mkdtemp(prefix="sluice-tls-cpu.")
    procs = []
    try:
        plain = start_backend(work, "backend")
        procs.append(plain[0])
        tls = start_backend(work, "tls_backend", certs.backend_args(certs.make_pki(Path(work) / "pki")))
        procs.append(tls[0])
        admin = callgrind.port(work)
        callgrind.config(work, f"{work}/envoy.json", ROWS, {
            "ENVOY_ADMIN_PORT": admin, "BACKEND_PORT": plain[1]["decision"], "BACKEND_RLS_PORT": plain[1]["grpc"],
            "BACKEND_TLS_RLS_PORT": tls[1]["grpc"], "PKI": f"{work}/pki", "WASM": WASM, "COMPARE": "",
            "NATIVE": NATIVE})
        envoy = stack.Proc([ENVOY, "-c", f"{work}/envoy.json", "--disable-hot-restart", "--concurrency", "1",
                            "--log-level", "warn"], Path(work) / "envoy.log")
        procs.insert(0, envoy)

        def envoy_ready():
            if not envoy.alive():
                fail(f"Envoy exited:\n{envoy.tail()}")
            return requests.get(f"http://127.0.0.1:{admin}/ready", timeout=1).status_code == 200
        stack.wait_until(envoy_ready, "Envoy", timeout=60)
        listeners = [line.rstrip("\n").split("\t")[:3] for line in open(f"{work}/rows.tsv")]
        for row, build, port in listeners:
            r = requests.get(f"http://127.0.0.1:{port}/probe", headers={"x-user": "bench"}, timeout=30)
            if r.status_code != 200 or "x-ratelimit-remaining" not in r.headers:
                fail(f"{row}/{build} answered {r.status_code} {dict(r.headers)}; logs in {work}")
            bad, _ = send(port, WARMUP, "warm")
            if bad:
                fail(f"{row}/{build}: {bad} warm-up answers not 200; logs in {work}")
        results = {}
        for n in range(ROUNDS):
            for row, build, port in listeners if n % 2 == 0 else listeners[::-1]:
                check_time()
                backend = tls if row in callgrind.PLAIN_OF else plain
                w = window(row, port, backend, envoy.popen.pid, admin)
                results.setdefault((row, build), []).append(w)
                print(f"  round {n + 1} {row}/{build}: backend {w['backend'] / REQUESTS * 1e6:.1f} µs/decision, "
                      f"Envoy {w['envoy'] / REQUESTS * 1e6:.1f} µs/request, {REQUESTS / w['seconds']:.0f} req/s",
                      file=sys.stderr)
        print(f"The backend's CPU per decision, plaintext and mutual TLS on its gRPC listener, in one run: {ROUNDS} "
              f"rounds of {REQUESTS} requests per row,\n{CLIENTS} x {PARALLEL} keep-alive connections, through Envoy "
              f"1.40 (--concurrency 1). backend: {BACKEND_BIN} (two, memory store:\nh2c and mutual TLS); filter: {WASM}"
              + ("" if NATIVE == "none" else f" and {NATIVE}") + f"; took {time.monotonic() - STARTED:.0f} s")
        print()
        table(listeners, results)
        if CONNECTIONS:
            check_time()
            plain_cx, tls_cx = connections(work, plain), connections(work, tls, f"{work}/pki")
            print()
            print(f"a new connection from a client, one gRPC call on it ({CONNECTIONS} connections, one curl each): "
                  f"backend h2c {plain_cx:.0f} -> mutual TLS {tls_cx:.0f} µs of CPU ({tls_cx - plain_cx:+.0f}: the handshake)")
        shutil.rmtree(work)
    finally:
        stack.stop_all(*procs)


if __name__ == "__main__":
    main()
