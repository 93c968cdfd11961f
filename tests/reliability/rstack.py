"""What the reliability tests add to tests/e2e/stack.py: a redis-server that can be killed,
paused and restarted on the same port (with or without its data), a backend started with extra
flags and restarted on the same ports, a bounded background load through Envoy that records every
answer, and resident memory read from /proc. Everything listens on 127.0.0.1, every wait is
bounded, every process is stopped by PID."""

import os
import random
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field

import requests

import stack

TOKEN = stack.TOKEN


def user(tag="u"):
    return f"{tag}-{uuid.uuid4().hex[:12]}"


def rss_kib(pid):
    """Resident set size of a process in KiB, from /proc/PID/status (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Redis:
    """A redis-server on a fixed port that tests kill (SIGKILL), pause (SIGSTOP/SIGCONT) and
    start again on the same port, empty or from the RDB file a `SAVE` wrote."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.port = stack.free_port()
        self.dir = tmp / f"redis-{self.port}"
        self.dir.mkdir(exist_ok=True)
        self.proc = None
        self.starts = 0

    def start(self, keep_data=False):
        """Starts on `self.port`; with keep_data the RDB file from a previous `save()` is loaded,
        else it is removed first (a restart without persistence comes back empty)."""
        rdb = self.dir / "dump.rdb"
        if not keep_data and rdb.exists():
            rdb.unlink()
        self.starts += 1
        self.proc = stack.Proc(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                "--dir", str(self.dir), "--dbfilename", "dump.rdb", "--save", "",
                                "--appendonly", "no"],
                               self.tmp / f"redis-{self.port}-{self.starts}.log")
        stack.wait_until(lambda: stack.port_open(self.port) and self.cli("PING") == "PONG", "redis-server")
        return self

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/"

    def cli(self, *args, timeout=5):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True,
                             timeout=timeout)
        return out.stdout.strip()

    def save(self):
        assert self.cli("SAVE") == "OK"

    def kill(self):
        os.kill(self.proc.popen.pid, signal.SIGKILL)
        self.proc.popen.wait(timeout=5)
        self.proc.log.close()

    def pause(self):
        stack.pause(self.proc.popen.pid)

    def resume(self):
        os.kill(self.proc.popen.pid, signal.SIGCONT)

    def stop(self):
        if self.proc and self.proc.alive():
            self.resume()
        if self.proc:
            self.proc.stop()


class Backend(stack.Backend):
    """The real `sluice` binary with extra flags; `kill()` then `start()` restarts it on the same
    ports (Envoy's cluster points at a fixed port)."""

    def __init__(self, tmp, redis_url, extra=()):
        super().__init__(tmp, None)
        self.redis_url = redis_url
        self.extra = list(extra)
        self.starts = 0

    def start(self):
        self.starts += 1
        args = [stack.SLUICE, "--decision-listen", f"127.0.0.1:{self.decision_port}",
                "--admin-listen", f"127.0.0.1:{self.admin_port}", "--redis-url", self.redis_url,
                "--grpc-listen", f"127.0.0.1:{self.grpc_port}", "--admin-token", TOKEN, *self.extra]
        self.proc = stack.Proc(args, self.tmp / f"sluice-{self.decision_port}-{self.starts}.log")

        def ready():
            if not self.proc.alive():
                raise RuntimeError(f"sluice exited:\n{self.proc.tail()}")
            return requests.get(f"{self.admin_url}/readyz", timeout=1).status_code == 200

        stack.wait_until(ready, "sluice backend")
        return self

    @property
    def pid(self):
        return self.proc.popen.pid

    def kill(self):
        os.kill(self.proc.popen.pid, signal.SIGKILL)
        self.proc.popen.wait(timeout=5)
        self.proc.log.close()

    def log_text(self):
        return self.proc.log_path.read_text(errors="replace")

    def admin(self, method, path, **kw):
        headers = dict(kw.pop("headers", {}), authorization=f"Bearer {TOKEN}")
        return requests.request(method, self.admin_url + path, headers=headers, timeout=kw.pop("timeout", 5), **kw)

    def throttle(self, action, key, quantity=1, timeout=5):
        return requests.post(self.decision_url + "/v1/throttle",
                             json={"action": action, "key": key, "quantity": quantity}, timeout=timeout)


def running_backend(tmp, redis, *rules):
    """For a pytest fixture (`yield from`): a backend on `redis` with `rules` put, then stopped."""
    b = Backend(tmp, redis.url).start()
    for rule in rules:
        b.put_rule(rule)
    yield b
    b.stop()


@dataclass
class Answer:
    """One request of a load run."""
    listener: str
    user: str
    started: float
    took: float
    status: int = 0
    failure: str = None
    error: str = None


@dataclass
class Load:
    """Background GETs through Envoy from a few threads, paced (one request per `pause_s` per
    thread) and stopped by count or time, recording every answer (or the exception if there was
    none). With `users` None every request is a fresh user, so each one is a callout that a
    healthy stack allows."""
    envoy: object
    path: str
    listeners: list
    threads: int = 4
    pause_s: float = 0.02
    max_seconds: float = 60.0
    max_requests: int = 20000
    users: list = None
    answers: list = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers = []

    def _run(self, seed):
        rnd = random.Random(seed)
        session = requests.Session()
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            with self._lock:
                if len(self.answers) >= self.max_requests:
                    return
            listener = rnd.choice(self.listeners)
            who = rnd.choice(self.users) if self.users else user("load")
            a = Answer(listener, who, time.monotonic(), 0.0)
            try:
                r = session.get(self.envoy.url(listener) + self.path, headers={"x-user": who}, timeout=10)
                a.status = r.status_code
                a.failure = r.headers.get("x-sluice-failure")
            except requests.RequestException as e:
                a.error = repr(e)
            a.took = time.monotonic() - a.started
            with self._lock:
                self.answers.append(a)
            time.sleep(self.pause_s)

    def start(self):
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._workers.append(t)
        return self

    def stop(self):
        self._stop.set()
        for t in self._workers:
            t.join(timeout=15)
        return self
