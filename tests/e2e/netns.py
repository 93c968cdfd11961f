"""A fresh network namespace for configurations that bind 0.0.0.0 and name hosts (the peer's
example Envoy configuration, run unchanged by tests/e2e/test_peer_examples.py).

Inside it only `lo` exists, so 0.0.0.0 is loopback-only and fixed ports never collide with
anything on the machine. A private mount namespace beside it has a generated hosts file
bind-mounted over /etc/hosts, so the names a configuration uses resolve to 127.0.0.x there (Envoy's
c-ares resolver and getaddrinfo read it) and nowhere else. No nameserver is reachable from inside:
a name missing from the file cannot be answered by the machine's DNS.

A holder process (`sleep`) keeps both namespaces; every other process enters them with nsenter
(which execs the command: the PID is the command's own, stopped by PID), and the test process's
clients enter the network namespace only, on the calling thread, with setns(2) (`inside`). Stop
everything started in the namespace first, the holder last (`stop`)."""

import contextlib
import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

CLONE_NEWNET = 0x40000000
# The holder's lifetime bound: a test session that dies without stopping it leaves nothing for
# longer than this.
HOLD_SECONDS = 3600
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsUnavailable(RuntimeError):
    """What this machine lacks to make the namespaces (named in the message): the tests that need
    them fail with it, never skip."""


class ProcessExited(RuntimeError):
    """Raised by a readiness check whose process has exited: `wait_inside` stops at once."""


def _require_tools():
    missing = [tool for tool in ("unshare", "nsenter", "ip", "mount") if shutil.which(tool) is None]
    if missing:
        raise NetnsUnavailable(f"network namespace: missing {', '.join(missing)} (util-linux, iproute2)")


class Netns:
    """A network namespace with only `lo` (up) and a mount namespace whose /etc/hosts maps
    `hosts` ({name: 127.0.0.x}) besides localhost."""

    def __init__(self, tmp, hosts):
        self.tmp = Path(tmp)
        self.hosts = dict(hosts)
        self.hosts_file = self.tmp / "netns-hosts"
        self.holder = None

    def start(self):
        _require_tools()
        lines = ["127.0.0.1 localhost"] + [f"{addr} {name}" for name, addr in self.hosts.items()]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        script = (f"ip link set lo up && mount --bind {self.hosts_file} /etc/hosts && echo ready "
                  f"&& exec sleep {HOLD_SECONDS}")
        self.holder = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c", script],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True)
        line = self.holder.stdout.readline()  # "ready", or EOF if the setup failed
        if line.strip() != b"ready":
            self.holder.wait(timeout=10)
            err = self.holder.stderr.read().decode(errors="replace").strip()
            raise NetnsUnavailable(f"cannot make a network + mount namespace (unshare --net --mount as root, "
                                   f"ip link set lo up, mount --bind over /etc/hosts): {err or 'no output'}")
        # The holder is `sleep` now (exec): its namespaces are the ones to enter.
        self.net = f"/proc/{self.holder.pid}/ns/net"
        self.mnt = f"/proc/{self.holder.pid}/ns/mnt"
        self._check()
        return self

    def _check(self):
        """The namespace is what it claims: only lo, and the hosts file in force."""
        links = subprocess.run(self.command(["ip", "-o", "link", "show"]), capture_output=True, text=True, timeout=10)
        names = [l.split(":")[1].strip() for l in links.stdout.splitlines() if l.strip()]
        if names != ["lo"]:
            raise NetnsUnavailable(f"the fresh network namespace has links {names}, expected only lo")
        for name, addr in self.hosts.items():
            got = subprocess.run(self.command(["getent", "hosts", name]), capture_output=True, text=True, timeout=10)
            if got.stdout.split()[:1] != [addr]:
                raise NetnsUnavailable(f"{name} resolves to {got.stdout.strip()!r} inside the namespace, expected {addr}")

    def command(self, args):
        """`args` run inside both namespaces (nsenter execs it: same PID). Paths must be absolute:
        entering a mount namespace moves the working directory to its root."""
        return ["nsenter", f"--net={self.net}", f"--mount={self.mnt}", "--", *[str(a) for a in args]]

    @contextlib.contextmanager
    def inside(self):
        """The calling thread in the network namespace for the block: sockets created in it
        belong to the namespace (and stay there after the block ends)."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(self.net, os.O_RDONLY)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                raise NetnsUnavailable(f"setns(CLONE_NEWNET): errno {ctypes.get_errno()}")
            try:
                yield
            finally:
                if _libc.setns(own, CLONE_NEWNET) != 0:
                    raise RuntimeError(f"setns back to the test's own network namespace: errno {ctypes.get_errno()}")
        finally:
            os.close(target)
            os.close(own)

    def stop(self):
        """Stops the holder (by PID); call after every process started inside has been stopped."""
        if self.holder is not None and self.holder.poll() is None:
            self.holder.terminate()
            try:
                self.holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait(timeout=5)
        if self.holder is not None:
            self.holder.stdout.close()
            self.holder.stderr.close()


def wait_inside(netns, check, what, timeout=20.0, every=0.05):
    """stack.wait_until with every call of `check` made inside the network namespace."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            with netns.inside():
                value = check()
            if value:
                return value
        except (NetnsUnavailable, ProcessExited):
            raise
        except Exception as e:  # not up yet
            last = e
        time.sleep(every)
    raise TimeoutError(f"{what} not ready within {timeout}s (last error: {last})")
