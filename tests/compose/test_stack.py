"""The docker-compose stack, built and run for real: the README's compose command, unchanged.

tests/suites/70-compose.sh runs this once a Docker engine answers and the local stand-ins for
the official images exist (tests/compose/standins.sh). The fixture runs the README's command
(`SLUICE_ADMIN_TOKEN=... docker compose up --build`), waits for the stack, and the tests check
through it, as a user would: the dashboard answers and signs in, Envoy meters a user (exactly
the rule's capacity, then 429 with headers), a rule changed in the admin API applies through
Envoy, Envoy asks on the filter's exchange stream (the gRPC listener), the backend's store is
the Redis container, the envoy service restarted on the filter's dynamic-module build (the
compose file's SLUICE_ENVOY_CONFIG) meters as the wasm one does, and the README's stop command
(`docker compose down`) leaves nothing running. Every wait is bounded.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from stack import demo_env  # noqa: E402  (the e2e suite's helper: one home for it)
README = (ROOT / "README.md").read_text()
# The first build compiles trunk, the wasm-bindgen CLI and the whole workspace in release.
BUILD_TIMEOUT_S = int(os.environ.get("SLUICE_COMPOSE_BUILD_TIMEOUT", "2700"))


def readme_command(pattern):
    """The one README line (an indented code line) matching pattern, verbatim."""
    found = re.findall(rf"^    ({pattern})\s*$", README, re.M)
    assert len(found) == 1, f"README.md should hold exactly one line matching {pattern!r}: {found}"
    return found[0]


UP = readme_command(r"SLUICE_ADMIN_TOKEN=\S+ docker compose up --build")
DOWN = readme_command(r"docker compose down")
TOKEN = re.match(r"SLUICE_ADMIN_TOKEN=(\S+) ", UP).group(1)


ENV = demo_env()
ADMIN = f"http://{ENV['SLUICE_ADMIN_LISTEN']}"
DECISION = f"http://{ENV['SLUICE_DECISION_LISTEN']}"
ENVOY = f"http://127.0.0.1:{ENV['ENVOY_LISTEN_PORT']}"
ENVOY_ADMIN = f"http://127.0.0.1:{ENV['ENVOY_ADMIN_PORT']}"
UPSTREAM = f"http://127.0.0.1:{ENV['UPSTREAM_PORT']}"
REDIS_PORT = 6379  # docker-compose.yml's redis command
PORTS = sorted({int(ENV["SLUICE_ADMIN_LISTEN"].rsplit(":", 1)[1]),
                int(ENV["SLUICE_DECISION_LISTEN"].rsplit(":", 1)[1]),
                int(ENV["SLUICE_GRPC_LISTEN"].rsplit(":", 1)[1]),
                int(ENV["ENVOY_LISTEN_PORT"]), int(ENV["ENVOY_ADMIN_PORT"]),
                int(ENV["UPSTREAM_PORT"]), REDIS_PORT})


def port_in_use(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def compose(*args, timeout=120, env=None):
    return subprocess.run(["docker", "compose", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def answers(url, **kwargs):
    try:
        return requests.get(url, timeout=2, **kwargs).status_code == 200
    except requests.RequestException:
        return False


def run_down():
    return subprocess.run(["bash", "-c", DOWN], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    busy = [p for p in PORTS if port_in_use(p)]
    if busy:
        pytest.fail(f"ports {busy} on 127.0.0.1 are in use (demo/demo.env, redis 6379): "
                    "the compose stack needs them free")
    log_path = Path(os.environ.get("SLUICE_COMPOSE_LOG") or
                    tmp_path_factory.mktemp("compose") / "compose-up.log")
    log = open(log_path, "w")
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", UP], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    info = {"proc": proc, "log": log_path}
    try:
        deadline = started + BUILD_TIMEOUT_S
        checks = {
            "backend (Redis store)": lambda: answers(DECISION + "/readyz"),
            "dashboard": lambda: answers(ADMIN + "/"),
            "upstream": lambda: answers(UPSTREAM + "/healthz"),
            "Envoy": lambda: answers(ENVOY_ADMIN + "/ready"),
        }
        pending = dict(checks)
        while pending:
            if proc.poll() is not None:
                pytest.fail(f"`{UP}` exited ({proc.returncode}) before the stack was up:\n"
                            + log_path.read_text()[-4000:])
            if time.monotonic() > deadline:
                pytest.fail(f"the stack was not up within {BUILD_TIMEOUT_S} s (still waiting for "
                            f"{sorted(pending)}):\n" + log_path.read_text()[-4000:])
            pending = {name: check for name, check in pending.items() if not check()}
            time.sleep(1)
        info["up_after_s"] = round(time.monotonic() - started)
        print(f"\ncompose: `{UP}` served everything after {info['up_after_s']} s")
        listed = compose("ps", "-q")
        info["containers"] = listed.stdout.split()
        yield info
    finally:
        if proc.poll() is None or compose("ps", "-a", "-q").stdout.strip():
            if run_down().returncode != 0:  # never leave the stack running
                compose("kill")
                compose("rm", "-f", "-s", "-v")
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


def burst(user, count, path="/posts"):
    return [requests.post(ENVOY + path, headers={"x-user-id": user}, json={"text": "hi"}, timeout=5)
            for _ in range(count)]


def metered_burst(rule_capacity, extra=3):
    """capacity + extra requests as one fresh user; retried (at most 3 times, with a new user)
    only when the filter failed open (x-sluice-failure), which makes the count meaningless."""
    for _ in range(3):
        responses = burst(f"compose-{uuid.uuid4().hex[:12]}", rule_capacity + extra)
        if not any("x-sluice-failure" in r.headers for r in responses):
            return responses
    raise AssertionError("every burst saw a backend failure: " +
                         str([r.headers.get("x-sluice-failure") for r in responses]))


def admin_session():
    session = requests.Session()
    answer = session.post(ADMIN + "/v1/session", json={"token": TOKEN}, timeout=5)
    assert answer.status_code == 204, answer.text
    assert "sluice_session" in session.cookies
    return session


def test_every_service_runs_in_its_container(stack):
    listed = compose("ps", "--format", "{{.Service}} {{.State}}")
    assert listed.returncode == 0, listed.stderr
    states = dict(line.split() for line in listed.stdout.splitlines() if line.strip())
    assert states == {name: "running" for name in ("redis", "sluice", "upstream", "envoy", "traffic")}, states
    assert len(stack["containers"]) == 5


def test_the_dashboard_answers_and_signs_in(stack):
    page = requests.get(ADMIN + "/", timeout=5)
    assert page.status_code == 200 and "<html" in page.text.lower()
    # The wasm and JS the page loads are served by the backend from the image's dashboard/dist.
    assets = re.findall(r'(?:href|src)="/?([^"]+\.(?:wasm|js))"', page.text)
    assert any(a.endswith(".wasm") for a in assets), page.text[:2000]
    for asset in assets:
        answer = requests.get(f"{ADMIN}/{asset}", timeout=5)
        assert answer.status_code == 200 and len(answer.content) > 1000, asset
    # Signing in: a wrong token is refused; the README's token gives a session cookie that the
    # admin API (and the dashboard's live feed) accept.
    wrong = requests.post(ADMIN + "/v1/session", json={"token": TOKEN + "x"}, timeout=5)
    assert wrong.status_code == 401 and "sluice_session" not in wrong.cookies
    assert requests.get(ADMIN + "/v1/rules", timeout=5).status_code == 401
    session = admin_session()
    rules = session.get(ADMIN + "/v1/rules", timeout=5)
    assert rules.status_code == 200
    assert {r["action"] for r in rules.json()["rules"]} >= {"post", "reply", "like", "login"}
    with session.get(ADMIN + "/v1/events", stream=True, timeout=10) as events:
        assert events.status_code == 200
        assert events.headers["content-type"].startswith("text/event-stream")
        first = next(events.iter_lines(decode_unicode=True))
        assert first == "event: rules", first


def test_envoy_meters_a_user_exactly_to_capacity_then_429(stack):
    session = admin_session()
    rule = session.get(ADMIN + "/v1/rules/post", timeout=5).json()
    capacity = rule["capacity"]
    responses = metered_burst(capacity)
    statuses = [r.status_code for r in responses]
    assert statuses == [201] * capacity + [429] * 3, statuses
    first, denied = responses[0], responses[-1]
    assert first.headers["x-ratelimit-limit"].split(",")[0] == str(capacity)
    assert first.headers["x-ratelimit-remaining"] == str(capacity - 1)
    assert first.headers["ratelimit-policy"].startswith(f'"post";q={capacity};')
    assert denied.headers["x-ratelimit-remaining"] == "0"
    assert int(denied.headers["retry-after"]) >= 1
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.json()["action"] == "post"


def test_envoy_asks_on_the_exchange_stream(stack):
    """The demo's Envoy uses the filter's default callout: a stream per worker, open on the
    backend's gRPC listener (the sluice container's SLUICE_GRPC_LISTEN), counted by the backend."""
    metrics = requests.get(DECISION + "/metrics", timeout=5).text
    streams = [float(line.split()[-1]) for line in metrics.splitlines()
               if line.split(" ")[0] == "sluice_exchange_streams"]
    assert streams and streams[0] >= 1, streams
    stats = requests.get(ENVOY_ADMIN + "/stats?filter=cluster.sluice_backend.upstream_cx_active", timeout=5).text
    assert int(stats.split(": ")[-1]) >= 1, stats


def test_a_rule_changed_in_the_admin_api_applies_through_envoy(stack):
    session = admin_session()
    rule = session.get(ADMIN + "/v1/rules/post", timeout=5).json()
    changed = dict(rule, capacity=2 if rule["capacity"] != 2 else 3)
    put = session.put(ADMIN + "/v1/rules/post", json=changed, timeout=5)
    assert put.status_code == 200, put.text
    try:
        # In force on every replica within 1 s (one replica here); a burst that still saw the old
        # rule must show exactly the old capacity, never anything else.
        deadline = time.monotonic() + 5
        while True:
            statuses = [r.status_code for r in metered_burst(changed["capacity"], extra=rule["capacity"])]
            allowed = statuses.count(201)
            assert statuses == [201] * allowed + [429] * (len(statuses) - allowed), statuses
            if allowed == changed["capacity"]:
                break
            assert allowed == rule["capacity"], statuses
            assert time.monotonic() < deadline, f"the changed rule did not apply within 5 s: {statuses}"
            time.sleep(0.3)
    finally:
        session.put(ADMIN + "/v1/rules/post", json=rule, timeout=5)


def test_the_backend_stores_in_the_redis_container(stack):
    ready = requests.get(DECISION + "/readyz", timeout=5).json()
    assert ready["store"] == "redis", ready
    keys = compose("exec", "-T", "redis", "redis-cli", "-p", str(REDIS_PORT), "dbsize", timeout=30)
    assert keys.returncode == 0, keys.stderr
    assert int(keys.stdout.strip()) > 0, keys.stdout


def test_the_traffic_generator_reaches_the_dashboard(stack):
    session = admin_session()
    deadline = time.monotonic() + 30
    seen = set()
    while time.monotonic() < deadline:
        body = session.get(ADMIN + "/v1/levels", timeout=5).json()
        seen = {k["key"] for a in body["actions"] for k in a["keys"]}
        if {"alice", "bob", "carol", "mallory"} <= seen:
            break
        time.sleep(0.5)
    assert {"alice", "bob", "carol", "mallory"} <= seen, seen


# The envoy image's config for the filter's dynamic-module build (docker/Dockerfile renders
# envoy/demo_native.yaml there); docker-compose.yml's envoy command reads SLUICE_ENVOY_CONFIG.
NATIVE_CONFIG = "/etc/envoy/envoy-native.yaml"


def envoy_on(config=None):
    """Recreates the envoy service (only it: the rest of the stack keeps running) with
    SLUICE_ENVOY_CONFIG=`config` (None: the compose file's default, the wasm filter), and waits
    until the new container runs that config and Envoy is ready."""
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_ENVOY_CONFIG"}
    if config:
        env["SLUICE_ENVOY_CONFIG"] = config
    up = compose("up", "-d", "--no-deps", "--no-build", "envoy", env=env, timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr
    want = config or "/etc/envoy/envoy.yaml"
    deadline = time.monotonic() + 60
    while True:
        listed = compose("ps", "-q", "envoy")
        ids = listed.stdout.split()
        command = subprocess.run(["docker", "inspect", "--format", "{{json .Args}}", *ids], capture_output=True,
                                 text=True, timeout=30).stdout if ids else ""
        if want in command and answers(ENVOY_ADMIN + "/ready"):
            return
        assert time.monotonic() < deadline, f"envoy not ready on {want} within 60 s: {command!r}"
        time.sleep(0.5)


def test_the_native_build_meters_through_the_stack(stack):
    """The same stack with Envoy on the filter's dynamic module (the image's envoy-native.yaml):
    a fresh user gets exactly the rule's capacity, then 429 with the problem body, and Envoy's
    stats show the module (not the wasm filter) made those callouts. The wasm Envoy is restored
    afterwards."""
    envoy_on(NATIVE_CONFIG)
    try:
        session = admin_session()
        capacity = session.get(ADMIN + "/v1/rules/post", timeout=5).json()["capacity"]
        responses = metered_burst(capacity)
        statuses = [r.status_code for r in responses]
        assert statuses == [201] * capacity + [429] * 3, statuses
        assert responses[0].headers["x-ratelimit-remaining"] == str(capacity - 1)
        assert responses[-1].json()["action"] == "post"
        stats = requests.get(ENVOY_ADMIN + "/stats?filter=sluice.callouts", timeout=5).text
        counts = dict(line.split(": ", 1) for line in stats.splitlines() if ": " in line)
        assert int(counts.get("dynamicmodulescustom.sluice.callouts", 0)) >= capacity, stats
        assert "wasmcustom.sluice.callouts" not in counts, stats
    finally:
        envoy_on(None)


def test_down_leaves_nothing_running(stack):
    down = run_down()
    assert down.returncode == 0, down.stdout + down.stderr
    stack["proc"].wait(timeout=60)  # `up` returns once its containers are gone
    assert compose("ps", "-a", "-q").stdout.split() == []
    everything = subprocess.run(["docker", "ps", "-a", "-q", "--no-trunc"], capture_output=True,
                                text=True, timeout=30).stdout.split()
    left = [c for c in stack["containers"] if any(full.startswith(c) for full in everything)]
    assert left == [], left
    deadline = time.monotonic() + 10
    while [p for p in PORTS if port_in_use(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in PORTS if port_in_use(p)] == []
