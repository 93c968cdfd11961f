"""envoyproxy/ratelimit's own examples, played against sluice as a drop-in: the peer's example
Envoy configuration (tests/e2e/peer_example/envoy/proxy.yaml) and upstream (mock.yaml) and its
configuration directory (ratelimit/config/), all unchanged, with `sluice --ratelimit-config` where
the peer's service runs. Each test is one request sequence of the peer's
integration-test/scripts/*.sh, or its README's examples, written as our own test from what the
script sends and expects (the peer's statuses, and the headers and bodies it states).

The configuration binds 0.0.0.0 and names the hosts `ratelimit` and `envoy-mock`, as in the peer's
docker compose. It runs in a fresh network namespace (tests/e2e/netns.py: only `lo`, and a hosts
file naming ratelimit 127.0.0.2 and envoy-mock 127.0.0.3, read by Envoy's STRICT_DNS clusters),
so nothing on the machine is reachable from it and its fixed ports collide with nothing. Every
test gets a fresh stack there (store, sluice, both Envoys: about a second), because the peer's
descriptor values are fixed (service_1, pelle, ...): no test sees another's counters. Each
sequence runs once per store: memory, a redis-server, and a 3-master Redis Cluster.

The peer's limits are per minute in clock-aligned windows: a sequence starts at least
`MARGIN_S` before the minute's end (waiting at most that long), so it never straddles a window."""

import hashlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

import netns
import stack

PEER = Path(__file__).resolve().parent / "peer_example"
RATELIMIT_ADDR = "127.0.0.2"  # the host `ratelimit` inside the namespace
MOCK_ADDR = "127.0.0.3"  # the host `envoy-mock`
PROXY = "http://127.0.0.1:8888"  # proxy.yaml's listener (0.0.0.0:8888)
PROXY_ADMIN = "http://127.0.0.1:8001"  # proxy.yaml's admin (0.0.0.0:8001)
# mock.yaml's admin is 0.0.0.0:8001 too (its own container in the peer's compose); here it shares
# the namespace with the proxy, so a --config-yaml moves only that address.
MOCK_ADMIN_PORT = 8002
SLUICE_ADMIN = "http://127.0.0.1:9000"
MARGIN_S = 5.0
# The Envoy flags of the peer's docker-compose-integration-test.yml, plus --disable-hot-restart:
# both Envoys share one network namespace here, where hot restart's abstract sockets would collide.
ENVOY_FLAGS = ["--concurrency", "1", "--mode", "serve", "--log-level", "info", "--disable-hot-restart"]
CLUSTER_PORTS = (7000, 7001, 7002)
# sluice's own semantics, by name (docs/rls.md, "Whose semantics"): the same files, the same
# sequences, the answers documented there.
SLUICE_SEMANTICS = ["--ratelimit-semantics", "sluice"]

# These Envoys never load the sluice filter (Envoy's own ratelimit filter asks sluice's RLS): the
# native pass would run the same thing twice (tests/e2e/conftest.py decides that from configs of
# envoy/, which these are not).
pytestmark = pytest.mark.skipif(stack.FILTER_BUILD == "native",
                                reason="loads no sluice filter: runs in the wasm pass only")


def test_the_peer_files_are_unchanged():
    """Byte for byte what peer_example/SHA256SUMS records (the peer's commit in its README.md)."""
    listed = {}
    for line in (PEER / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        listed[name] = digest
    present = sorted(str(p.relative_to(PEER)) for p in PEER.rglob("*")
                     if p.is_file() and p.name not in ("SHA256SUMS", "README.md", "NOTICE"))
    assert present == sorted(listed), "files added to or missing from peer_example/"
    for name, digest in listed.items():
        assert hashlib.sha256((PEER / name).read_bytes()).hexdigest() == digest, f"peer_example/{name} was edited"


def test_the_namespace_reaches_nothing_outside(tmp_path, redis):
    """What the peer's configuration runs in: only lo, the two names from the hosts file, no
    other name resolved (no nameserver is reachable), and a port open on the machine's loopback
    (the session's redis-server) closed from inside."""
    ns = netns.Netns(tmp_path, {"ratelimit": RATELIMIT_ADDR, "envoy-mock": MOCK_ADDR}).start()
    try:
        def run(*args):
            return subprocess.run(ns.command(args), capture_output=True, text=True, timeout=30)

        assert run("getent", "hosts", "ratelimit").stdout.split() == [RATELIMIT_ADDR, "ratelimit"]
        assert run("getent", "hosts", "envoy-mock").stdout.split() == [MOCK_ADDR, "envoy-mock"]
        assert run("getent", "hosts", "github.com").returncode != 0
        assert stack.port_open(redis), "the session's redis-server, seen from the machine"
        with ns.inside():
            assert not stack.port_open(redis), "the machine's loopback reached from the namespace"
        assert stack.port_open(redis), "the test's thread back in the machine's namespace"
    finally:
        ns.stop()


def test_a_missing_tool_fails_naming_it(tmp_path, monkeypatch):
    """Without what the namespace needs, the tests fail (never skip), naming it."""
    real = shutil.which
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None if tool == "nsenter" else real(tool))
    with pytest.raises(netns.NetnsUnavailable, match="missing nsenter"):
        netns.Netns(tmp_path, {}).start()


class PeerStack:
    """The peer's integration-test stack in a fresh network namespace: a store, sluice serving the
    RLS at ratelimit:8081, the mock Envoy (envoy-mock:9999 and :10001) and the proxy Envoy
    (0.0.0.0:8888). Processes are stopped by PID in reverse order, the namespace last."""

    def __init__(self, tmp, store, sluice_args=()):
        self.tmp = tmp
        self.store = store
        self.sluice_args = list(sluice_args)
        self.procs = []
        self.ns = None
        self.baseline = {}

    def run(self, name, args):
        proc = stack.Proc(self.ns.command(args), self.tmp / f"{name}.log")
        self.procs.append(proc)
        return proc

    def wait(self, check, what, proc=None, timeout=20.0):
        def checked():
            if proc is not None and not proc.alive():
                raise netns.ProcessExited(f"{what} exited:\n{proc.tail()}")
            return check()
        return netns.wait_inside(self.ns, checked, what, timeout=timeout)

    def start(self):
        self.ns = netns.Netns(self.tmp, {"ratelimit": RATELIMIT_ADDR, "envoy-mock": MOCK_ADDR}).start()
        config = self.tmp / "config"
        shutil.copytree(PEER / "ratelimit" / "config", config)
        store_args = self.start_store()
        sluice = self.run("sluice", [stack.SLUICE, "--ratelimit-config", config,
                                     "--grpc-listen", f"{RATELIMIT_ADDR}:8081",
                                     "--decision-listen", "127.0.0.1:8080", "--admin-listen", "127.0.0.1:9000",
                                     "--admin-token", stack.TOKEN, *store_args, *self.sluice_args])
        self.wait(lambda: requests.get(f"{SLUICE_ADMIN}/readyz", timeout=1).status_code == 200, "sluice", sluice)
        mock = self.run("envoy-mock", [stack.ENVOY, "--service-node", "mock", "--service-cluster", "mock",
                                       "--config-path", PEER / "envoy" / "mock.yaml", "--config-yaml",
                                       "admin: {address: {socket_address: {address: 0.0.0.0, port_value: %d}}}"
                                       % MOCK_ADMIN_PORT, *ENVOY_FLAGS])
        proxy = self.run("envoy-proxy", [stack.ENVOY, "--service-node", "proxy", "--service-cluster", "proxy",
                                         "--config-path", PEER / "envoy" / "proxy.yaml", *ENVOY_FLAGS])
        self.wait(lambda: requests.get(f"http://127.0.0.1:{MOCK_ADMIN_PORT}/ready", timeout=1).status_code == 200,
                  "the mock Envoy", mock, timeout=30)
        self.wait(lambda: requests.get(f"{PROXY_ADMIN}/ready", timeout=1).status_code == 200,
                  "the proxy Envoy", proxy, timeout=30)
        # The STRICT_DNS clusters resolved the names through the namespace's hosts file.
        self.wait(self.resolved, "proxy.yaml's clusters resolved (ratelimit, envoy-mock)", timeout=10)
        return self

    def resolved(self):
        text = requests.get(f"{PROXY_ADMIN}/clusters", timeout=2).text
        return all(f"{c}::{a}::hostname::{h}" in text for c, a, h in (
            ("ratelimit", f"{RATELIMIT_ADDR}:8081", "ratelimit"), ("mock", f"{MOCK_ADDR}:9999", "envoy-mock"),
            ("multiservice", f"{MOCK_ADDR}:9999", "envoy-mock"), ("multiservice", f"{MOCK_ADDR}:10001", "envoy-mock")))

    def start_store(self):
        if self.store == "memory":
            return []
        if self.store == "redis":
            redis = self.run("redis", ["redis-server", "--port", "6379", "--bind", "127.0.0.1", "--save", "",
                                       "--appendonly", "no"])
            self.wait(lambda: stack.port_open(6379), "redis-server", redis)
            return ["--redis-url", "redis://127.0.0.1:6379/", "--redis-timeout-ms", "1000"]
        assert self.store == "cluster", self.store
        for port in CLUSTER_PORTS:
            node = self.tmp / f"node-{port}"
            node.mkdir()
            proc = self.run(f"redis-{port}", ["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                                              "--appendonly", "no", "--dir", node, "--cluster-enabled", "yes",
                                              "--cluster-config-file", node / "nodes.conf"])
            self.wait(lambda: stack.port_open(port), f"redis-server {port}", proc)
        made = subprocess.run(self.ns.command(["redis-cli", "--cluster", "create",
                                               *[f"127.0.0.1:{p}" for p in CLUSTER_PORTS], "--cluster-yes"]),
                              capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stdout + made.stderr

        def cluster_ok():
            return all("cluster_state:ok" in subprocess.run(
                self.ns.command(["redis-cli", "-p", p, "cluster", "info"]), capture_output=True, text=True,
                timeout=10).stdout for p in CLUSTER_PORTS)
        stack.wait_until(cluster_ok, "a 3-master Redis Cluster", timeout=30, every=0.1)
        return ["--redis-cluster", ",".join(f"redis://127.0.0.1:{p}" for p in CLUSTER_PORTS),
                "--redis-timeout-ms", "1000"]

    def stop(self):
        try:
            stack.stop_all(*reversed(self.procs))
        finally:
            if self.ns is not None:
                self.ns.stop()

    def get(self, path, headers=None):
        """One request to the proxy on a fresh connection, as curl sends it."""
        with self.ns.inside():
            return requests.get(PROXY + path, headers=headers or {}, timeout=10)

    def warm_up(self):
        """Opens the proxy's HTTP/2 connection to sluice and sluice's to its store, and has its
        scripts loaded there, before a sequence, with descriptors no sequence uses ((foo,
        peer-warmup-N) with (bar, warmup) and (baz, warmup)): the first calls are the slowest (the
        first two-descriptor call on a fresh Redis Cluster took 28 ms), and Envoy allows 20 ms."""
        for headers in WARM_UP:
            self.get("/twoheader", headers)
        self.baseline = self.failures()

    def failures(self):
        """The proxy's ratelimit filter's errors and failure-mode passes, once no call to sluice is
        in flight (a debit sent when a stream is done may still be): {stat: count}."""
        stack.wait_until(lambda: self.stats().get("cluster.ratelimit.upstream_rq_active", 1) == 0,
                         "the proxy's calls to sluice finished", timeout=5)
        return {k: v for k, v in self.stats().items() if k.endswith((".ratelimit.error", ".ratelimit.failure_mode_allowed"))}

    def undecided(self):
        """The failures since the warm-up: empty when sluice answered every call of the sequence
        in time."""
        return {k: v - self.baseline.get(k, 0) for k, v in self.failures().items() if v > self.baseline.get(k, 0)}

    def stats(self):
        with self.ns.inside():
            text = requests.get(f"{PROXY_ADMIN}/stats", timeout=5).text
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().isdigit():
                out[name.strip()] = int(value)
        return out


# How many fresh stacks a sequence may take. proxy.yaml sets no `timeout` on its ratelimit filter,
# so Envoy gives the service its default 20 ms, and with failure_mode_deny: false a call that
# takes longer passes the request undecided (on this shared machine, a few stacks in 30; the
# peer's own service would have the same 20 ms). An attempt where any call was not answered in
# time is no test of sluice's answers, and is played again on a fresh stack; an attempt where
# every call was answered is final, whatever it asserts.
ATTEMPTS = 3
# Before a sequence: one and two descriptors a call (sluice's store step differs), with values no
# sequence uses, several times so that a Redis Cluster's every node is likely reached.
WARM_UP = [{"foo": f"peer-warmup-{i}", "bar": "warmup", **({"baz": "warmup"} if i % 2 else {})} for i in range(12)]


def player(store, tmp_path, sluice_args=()):
    """`play(sequence)`: runs `sequence(stack)` on a fresh PeerStack of `store` (sluice started
    with `sluice_args`), again on a fresh one when a call of the proxy to sluice went undecided
    (see ATTEMPTS)."""

    def run(sequence):
        undecided = None
        for attempt in range(1, ATTEMPTS + 1):
            tmp = tmp_path / f"attempt-{attempt}"
            tmp.mkdir()
            s = PeerStack(tmp, store, sluice_args)
            failure = None
            try:
                s.start()
                s.warm_up()
                try:
                    sequence(s)
                except AssertionError as e:
                    failure = e
                undecided = s.undecided()
            finally:
                s.stop()
            if not undecided:
                if failure is not None:
                    raise failure
                return
            print(f"attempt {attempt} on {store}: calls not answered within Envoy's 20 ms, "
                  f"{undecided}; playing again on a fresh stack")
        pytest.fail(f"{ATTEMPTS} attempts, each with calls sluice did not answer in time: {undecided}")

    return run


STORES = ["memory", "redis", "cluster"]


@pytest.fixture(params=STORES)
def play(request, tmp_path):
    """The peer's semantics (sluice's default)."""
    return player(request.param, tmp_path)


@pytest.fixture(params=STORES)
def play_sluice(request, tmp_path):
    """sluice's semantics (--ratelimit-semantics sluice)."""
    return player(request.param, tmp_path, SLUICE_SEMANTICS)


def within_one_minute():
    """Waits for the next minute when fewer than MARGIN_S seconds are left in this one (the peer's
    limits are per clock-aligned minute), then returns the minute the sequence runs in."""
    left = 60 - time.time() % 60
    if left < MARGIN_S:
        time.sleep(left + 0.05)
    return int(time.time() // 60)


def same_minute(start):
    assert int(time.time() // 60) == start, "the sequence straddled a minute boundary despite the margin"


def remaining(r):
    return r.headers.get("x-ratelimit-remaining")


def answers(s, path, headers, n):
    return [s.get(path, headers) for _ in range(n)]


def test_simple_get(play):
    """simple-get.sh: the happy path (foo, test), (baz, shady): 200."""
    def sequence(peer):
        start = within_one_minute()
        r = peer.get("/twoheader", {"foo": "test", "baz": "shady"})
        same_minute(start)
        assert r.status_code == 200, r.headers
        assert r.text == "Hello World from Service 1"

    play(sequence)


def test_trigger_ratelimit(play):
    """trigger-ratelimit.sh: (foo, pelle), (baz, not-so-shady) at 3 a minute: three 200s, then
    429 ("Too Many Requests") twice."""
    def sequence(peer):
        start = within_one_minute()
        got = answers(peer, "/twoheader", {"foo": "pelle", "baz": "not-so-shady"}, 5)
        same_minute(start)
        assert [r.status_code for r in got] == [200, 200, 200, 429, 429]
        assert [remaining(r) for r in got] == ["2", "1", "0", "0", "0"]
        assert got[4].reason == "Too Many Requests" and got[4].headers["x-envoy-ratelimited"] == "true"

    play(sequence)


def test_trigger_shadow_mode_key(play):
    """trigger-shadow-mode-key.sh: (foo, pelle), (baz, shady), 3 a minute in shadow mode: never
    refused. The script's last check (x-ratelimit-remaining of a 6th request) compares the header
    with its \\r still attached, so it cannot fail; the peer answers that request OVER_LIMIT turned
    OK by shadow mode, remaining 0, which is what is asserted here."""
    def sequence(peer):
        start = within_one_minute()
        got = answers(peer, "/twoheader", {"foo": "pelle", "baz": "shady"}, 6)
        same_minute(start)
        assert [r.status_code for r in got] == [200] * 6
        assert [remaining(r) for r in got] == ["2", "1", "0", "0", "0", "0"]

    play(sequence)


def test_value_included_in_stats_key_when_unspecified(play):
    """value-included-in-stats-key-when-unspecified.sh: (unspec, unspecified_value), 2 a minute,
    detailed_metric: 200, 200, 429. (Its second half reads the peer's statsd: the next test.)"""
    def sequence(peer):
        start = within_one_minute()
        got = answers(peer, "/unspec", {"unspec": "unspecified_value"}, 3)
        same_minute(start)
        assert [r.status_code for r in got] == [200, 200, 429]
        assert [remaining(r) for r in got] == ["1", "0", "0"]

    play(sequence)


def test_value_included_in_stats_key_when_unspecified_counts_the_refusal(play):
    """The script's second half: the peer's statsd over-limit counter for the key with its value
    (unspec_unspecified_value) is 1. sluice has no statsd and counts per limit, not per value: its
    Prometheus count of refusals for that limit is read instead."""
    def sequence(peer):
        start = within_one_minute()
        got = answers(peer, "/unspec", {"unspec": "unspecified_value"}, 3)
        same_minute(start)
        assert [r.status_code for r in got] == [200, 200, 429]
        with peer.ns.inside():
            metrics = requests.get("http://127.0.0.1:8080/metrics", timeout=5).text
        counted = {l.split('outcome="')[1].split('"')[0]: float(l.rsplit(" ", 1)[1]) for l in metrics.splitlines()
                   if l.startswith("sluice_decisions_total{") and 'action="rl:rl.unspec"' in l}
        assert counted == {"allowed": 2, "denied": 1}, counted

    play(sequence)


# replaces.sh, in order: (path, headers, expected status). Its descriptors: /twoheader sends
# (foo, bar) and (foo, baz) when those headers are present; /fourheader (foo, bar) and
# (source_cluster, destination_cluster); /fiveheader adds (category).
def _h(foo, bar, dest=None, category=None):
    headers = {"foo": foo, "bar": bar}
    if dest is not None:
        headers.update({"source_cluster": "proxy", "destination_cluster": dest})
    if category is not None:
        headers["category"] = category
    return headers


REPLACES = [
    # replaces raises a limit: (foo, *), (bar, banned) is banned_limit, 0 a minute; the
    # destination `override` replaces it with 2 a minute.
    ("/twoheader", _h("bkthomps", "banned"), 429),
    ("/fourheader", _h("bkthomps", "banned", "mock"), 429),
    ("/fourheader", _h("bkthomps", "banned", "override"), 200),
    ("/fourheader", _h("bkthomps", "banned", "override"), 200),
    ("/fourheader", _h("bkthomps", "banned", "override"), 429),
    # replaces leaves the original limit alone: bkthomps (1 a minute) replaced by the destination
    # bkthomps (2 a minute) only where both match.
    ("/fourheader", _h("my_foo", "bkthomps", "bkthomps"), 200),
    ("/fourheader", _h("my_foo", "bkthomps", "bkthomps"), 200),
    ("/fourheader", _h("my_foo", "bkthomps", "bkthomps"), 429),
    ("/fourheader", _h("my_foo", "bkthomps", "not_bkthomps"), 200),
    ("/fourheader", _h("my_foo", "bkthomps", "not_bkthomps"), 429),
    ("/fourheader", _h("my_foo", "bkthomps", "bkthomps"), 429),
    # one descriptor replaces several: (category, account), 4 a minute, replaces bkthomps and
    # fake_name.
    *[("/fiveheader", _h("my_foo", "bkthomps", "fake", "account"), 200)] * 4,
    ("/fiveheader", _h("my_foo", "bkthomps", "fake", "account"), 429),
    ("/twoheader", _h("foo_2", "bkthomps"), 200),
    ("/twoheader", _h("foo_2", "bkthomps"), 429),
    ("/fourheader", _h("foo_3", "bar_3", "fake"), 200),
    ("/fourheader", _h("foo_3", "bar_3", "fake"), 200),
    ("/fourheader", _h("foo_3", "bar_3", "fake"), 429),
    ("/fiveheader", _h("my_foo", "bkthomps", "fake", "account"), 429),
]


def test_replaces(play):
    """replaces.sh: its 22 requests in order, each 200 or 429 as the script asserts."""
    def sequence(peer):
        start = within_one_minute()
        got = [peer.get(path, headers).status_code for path, headers, _ in REPLACES]
        same_minute(start)
        assert got == [want for _, _, want in REPLACES]

    play(sequence)


def test_quota(play):
    """quota.sh: /quota sends (service, service_1) and (service, service_2), both quota_mode at 1
    and 2 a minute; every request is counted in both. The peer: 200, 200 (service_1 is over, but
    not every quota is), then 429 (both over)."""
    def sequence(peer):
        start = within_one_minute()
        got = answers(peer, "/quota", {}, 3)
        same_minute(start)
        assert [r.status_code for r in got] == [200, 200, 429]

    play(sequence)


def rls_calls(s):
    """The proxy's finished calls to the rate limit service (the checks and the debits sent when
    a stream is done)."""
    return s.stats().get("cluster.ratelimit.upstream_rq_completed", 0)


def sequence_with_debits(s, path, n):
    """n requests to `path` (a route whose debit is sent when the stream is done), each sent once
    the previous request's debit has been answered: the peer's script runs one curl after another,
    and a check racing the previous debit would test Envoy's timing, not the service."""
    got = []
    for i in range(n):
        before = rls_calls(s)
        r = s.get(path, {"request-no": str(i + 1)})
        got.append(r)
        if r.status_code == 200:
            stack.wait_until(lambda: rls_calls(s) >= before + 2, f"request {i + 1}'s check and debit answered",
                             timeout=5, every=0.01)
    return got


def test_token_quota(play):
    """token-quota.sh: /tokenquota checks (service, service_2) with hits_addend 0 on the request
    and debits 1 when the stream is done (apply_on_stream_done); 2 a minute. The peer refuses a
    check only when the counter is over the limit, so the third check (at 2) passes: 200, 200,
    200, then 429."""
    def sequence(peer):
        start = within_one_minute()
        got = sequence_with_debits(peer, "/tokenquota", 4)
        same_minute(start)
        assert [r.status_code for r in got] == [200, 200, 200, 429]
        assert [remaining(r) for r in got] == ["2", "1", "0", "0"]

    play(sequence)


def test_multiservice_tokenquota(play):
    """multiservice-tokenquota.sh: /multiservice-tokenquota checks (service, service_1) and
    (service, service_2) with hits_addend 0; the service whose quota passed is named in the
    answer's dynamic metadata (the first passing descriptor's), routes the request there, and 1
    is debited from that service when the stream is done. service_1 1 a minute, service_2 2: the
    peer serves requests 1-2 from Service 1, 3-5 from Service 2, and refuses the 6th."""
    def sequence(peer):
        start = within_one_minute()
        got = sequence_with_debits(peer, "/multiservice-tokenquota", 6)
        same_minute(start)
        assert [(r.status_code, r.text) for r in got] == [
            (200, "Hello World from Service 1")] * 2 + [(200, "Hello World from Service 2")] * 3 + [(429, "")]
        assert [remaining(r) for r in got] == ["1", "0", "0", "0", "0", "0"]

    play(sequence)


def in_one_second(requests_of, tries=5):
    """For a limit of 1 a second: `requests_of()` started early in a clock second (waiting for the
    next one when less than 0.6 s is left) and done within it; again (the window is new each
    second) when a slow answer took it past the second's end."""
    for _ in range(tries):
        left = 1 - time.time() % 1
        if left < 0.6:
            time.sleep(left + 0.01)
        second = int(time.time())
        got = requests_of()
        if int(time.time()) == second:
            return got
    raise AssertionError(f"{tries} tries, none within one clock second")


def test_readme_full_test_environment(play):
    """The README's "Full test environment" curls, in its order, with what its comments say."""
    def sequence(peer):
        start = within_one_minute()
        r = peer.get("/test")
        assert (r.status_code, r.text, remaining(r)) == (200, "Hello World from Service 1", "0")
        # /test is (source_cluster, proxy), (destination_cluster, mock) from Envoy's --service-cluster
        # and the route's cluster: 1 a minute.
        assert peer.get("/test").status_code == 429
        r = peer.get("/header", {"foo": "foo"})  # "Header based": (foo, foo), 2 a minute
        assert (r.status_code, remaining(r)) == (200, "1")
        r = peer.get("/twoheader", {"foo": "foo", "bar": "bar"})  # "Two headers": 3 a minute
        assert (r.status_code, remaining(r)) == (200, "2")
        # "This will be rate limited": (foo, foo), (baz, baz) is 1 a second: two in one second.
        pair = in_one_second(lambda: [peer.get("/twoheader", {"foo": "foo", "baz": "baz"}) for _ in range(2)])
        assert [(r.status_code, remaining(r)) for r in pair] == [(200, "0"), (429, "0")]
        # "Ban a particular header value": (bar, banned) is 0 a minute.
        assert peer.get("/twoheader", {"foo": "foo", "bar": "banned"}).status_code == 429
        # "This will never be ratelimited since "baz" with value "shady" is in shadow_mode" (3 a minute).
        assert [r.status_code for r in answers(peer, "/twoheader", {"foo": "foo", "baz": "shady"}, 5)] == [200] * 5
        # "This is subject to rate-limiting" (3 a minute, not in shadow mode).
        got = answers(peer, "/twoheader", {"foo": "foo", "baz": "not-so-shady"}, 4)
        assert [r.status_code for r in got] == [200, 200, 200, 429]
        same_minute(start)

    play(sequence)


def test_token_quota_under_sluice_semantics(play_sluice):
    """token-quota.sh with sluice's semantics: a check at exactly the limit is over (nothing is
    left), so 2 a minute admits 2."""
    def sequence(peer):
        start = within_one_minute()
        got = sequence_with_debits(peer, "/tokenquota", 3)
        same_minute(start)
        assert [(r.status_code, remaining(r)) for r in got] == [(200, "2"), (200, "1"), (429, "0")]

    play_sluice(sequence)


def test_multiservice_tokenquota_under_sluice_semantics(play_sluice):
    """multiservice-tokenquota.sh with sluice's semantics: service_1's check is over once its one
    request is debited, so the second request goes to service_2, which serves two; the 4th is
    refused."""
    def sequence(peer):
        start = within_one_minute()
        got = sequence_with_debits(peer, "/multiservice-tokenquota", 4)
        same_minute(start)
        assert [(r.status_code, r.text) for r in got] == [
            (200, "Hello World from Service 1")] + [(200, "Hello World from Service 2")] * 2 + [(429, "")]

    play_sluice(sequence)


def test_quota_and_replaces_under_sluice_semantics(play_sluice):
    """quota.sh and replaces.sh give the peer's statuses under sluice's semantics too (a refused
    request's other descriptors are not counted, which none of their later requests reads)."""
    def sequence(peer):
        start = within_one_minute()
        quota = [r.status_code for r in answers(peer, "/quota", {}, 3)]
        replaced = [peer.get(path, headers).status_code for path, headers, _ in REPLACES]
        same_minute(start)
        assert quota == [200, 200, 429]
        assert replaced == [want for _, _, want in REPLACES]

    play_sluice(sequence)
