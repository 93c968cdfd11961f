"""One deadline, the common case through the real stack: Redis answering 30-60 ms late (a small
asyncio TCP proxy between the backend and redis-server delays each reply), the filter with its
default 25 ms timeout and `failure_mode: allow`. A request the filter passes unchecked must not
be a silent debit: every debit Redis holds is either a decision Envoy acted on (200 or 429 with
no `x-sluice-failure`) or counted by the backend in `sluice_late_debits_total`. Run for the
filter's default transport (grpc_stream, the decision exchange) and for its HTTP callout.
docs/failure-modes.md, "One deadline"."""

import asyncio
import random
import threading
import time

import pytest
import requests

import rstack
import stack

DEFAULT_TIMEOUT_MS = 25  # sluice_core::limits::DEFAULT_DECISION_TIMEOUT_MS, the filter's default
DELAY_MS = (30, 60)
REQUESTS = 60
CAPACITY = 10
RULE = {"action": "e2e_limited", "algorithm": "fixed_window", "capacity": CAPACITY, "window": "1h"}
# The backend bounds a step left to finish after its caller gave up by its store deadline
# (4 x --redis-timeout-ms, 400 ms by default).
LATE_BOUND_S = 0.4


class SlowRedisProxy:
    """Forwards the backend's commands to redis-server at once and holds each chunk of Redis's
    replies for a random 30-60 ms, in order (a slow link: replies are late, not serialised).
    Runs an asyncio loop on its own thread; `delaying` switches the delay on and off."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.port = stack.free_port()
        self.delaying = False
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.server = None

    def start(self):
        self.thread.start()
        assert self.ready.wait(5), "proxy did not start"
        return self

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()

    async def _client(self, creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            cwriter.close()
            return
        queue = asyncio.Queue()

        async def commands():
            while data := await creader.read(65536):
                swriter.write(data)
                await swriter.drain()
            swriter.close()

        async def replies():
            while data := await sreader.read(65536):
                delay = random.uniform(*DELAY_MS) / 1000 if self.delaying else 0.0
                await queue.put((time.monotonic() + delay, data))
            await queue.put((0.0, None))

        async def deliver():
            release = 0.0
            while True:
                at, data = await queue.get()
                if data is None:
                    break
                release = max(release, at)  # in order, each at least its own delay late
                wait = release - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                cwriter.write(data)
                await cwriter.drain()
            cwriter.close()

        await asyncio.gather(commands(), replies(), deliver(), return_exceptions=True)

    def stop(self):
        def close():
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(close)
        self.thread.join(5)


@pytest.fixture(scope="module")
def proxy(redis):
    p = SlowRedisProxy(redis.port).start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def backend(tmp, proxy):
    """The real `sluice` with no timeout flags at all: the defaults are under test."""
    b = rstack.Backend(tmp, f"redis://127.0.0.1:{proxy.port}/").start()
    stack.wait_until(lambda: stack.port_open(b.grpc_port), "the gRPC listener")
    b.put_rule(RULE)
    yield b
    b.stop()


@pytest.fixture(scope="module", params=["grpc_stream", "http"])
def envoy(request, tmp, backend, upstream):
    values = {"UPSTREAM_PORT": upstream, "TIMEOUT_MS": DEFAULT_TIMEOUT_MS}
    if request.param == "http":
        e = stack.Envoy(tmp, "e2e.yaml", dict(values, BACKEND_PORT=backend.decision_port),
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])
    else:
        e = stack.Envoy(tmp, "e2e_grpc.yaml", dict(values, RLS_PORT=backend.grpc_port, PROTOCOL=request.param),
                        ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"])
    e.start()
    e.protocol = request.param
    yield e
    e.stop()


def debits(redis, user):
    """Units the fixed window of (e2e_limited, user) holds, read from redis-server directly."""
    count = redis.cli("HGET", f"sluice:{{e2e_limited:{user}}}:fixed_window", "count")
    return int(count) if count else 0


def test_no_silent_debit_and_pass_with_redis_30_to_60_ms_slow(redis, proxy, backend, envoy):
    who = rstack.user("slow")
    url = envoy.url("LISTEN_OPEN_PORT") + "/limited/x"
    session = requests.Session()
    # Healthy first: the stack decides (and the backend's latency estimate starts from a fast
    # store, the worst case for learning).
    r = session.get(url, headers={"x-user": rstack.user("warm")}, timeout=5)
    assert r.status_code == 200 and "x-sluice-failure" not in r.headers, (r.status_code, dict(r.headers))

    late_before = backend.metric("sluice_late_debits_total", action="e2e_limited")
    unknown_before = backend.metric("sluice_late_unknown_total", action="e2e_limited")
    refused_before = backend.metric("sluice_deadline_exceeded_total", stage="not_started")
    late_steps_before = backend.metric("sluice_deadline_exceeded_total", stage="late")

    proxy.delaying = True
    answers = []
    started = time.monotonic()
    try:
        for _ in range(REQUESTS):
            r = session.get(url, headers={"x-user": who}, timeout=5)
            answers.append((r.status_code, r.headers.get("x-sluice-failure")))
    finally:
        last_sent = time.monotonic()
        proxy.delaying = False
    assert last_sent - started < 20, f"{REQUESTS} requests took {last_sent - started:.1f}s"

    # Every step left to finish is done within the backend's store deadline.
    stack.wait_until(lambda: time.monotonic() > last_sent + LATE_BOUND_S + 0.2, "late steps to finish",
                     timeout=5)
    held = debits(redis, who)
    late = backend.metric("sluice_late_debits_total", action="e2e_limited") - late_before
    unknown = backend.metric("sluice_late_unknown_total", action="e2e_limited") - unknown_before
    refused = backend.metric("sluice_deadline_exceeded_total", stage="not_started") - refused_before
    late_steps = backend.metric("sluice_deadline_exceeded_total", stage="late") - late_steps_before
    unchecked = sum(1 for _, failure in answers if failure)
    acted_allowed = sum(1 for status, failure in answers if status == 200 and not failure)
    acted_denied = sum(1 for status, failure in answers if status == 429 and not failure)
    print(f"\nslow Redis ({DELAY_MS[0]}-{DELAY_MS[1]} ms), filter timeout {DEFAULT_TIMEOUT_MS} ms, "
          f"{envoy.protocol}: {len(answers)} requests in {last_sent - started:.1f}s; "
          f"passed unchecked {unchecked}; allowed by the backend {acted_allowed}, denied {acted_denied}; "
          f"refused up front (no store step) {refused:.0f}; answered late {late_steps:.0f}; "
          f"late debits {late:.0f}, late with unknown effect {unknown:.0f}; debits in Redis {held}")

    assert len(answers) == REQUESTS
    assert all(status in (200, 429) for status, _ in answers), answers
    assert unchecked > 0, "Redis 30-60 ms slow against a 25 ms filter: requests pass unchecked"
    assert unknown == 0, "a late step ended with an unknown effect (a Redis timeout)"
    # No silent debit-and-pass: every debit is a decision Envoy acted on or a counted late debit.
    assert held == acted_allowed + late, (held, acted_allowed, late)
    # The backend learned: most requests were refused before any store step.
    assert refused >= REQUESTS // 2, refused

    # Redis fast again: decisions resume within a few probes.
    def decided():
        r = session.get(url, headers={"x-user": rstack.user("after")}, timeout=5)
        return r.status_code == 200 and "x-sluice-failure" not in r.headers
    stack.wait_until(decided, "decisions after Redis is fast again", timeout=5)
