"""docker-compose.yml and docker/Dockerfile: the checks that need no Docker engine.

The stack itself is built and run for real by tests/suites/70-compose.sh (tests/compose/
test_stack.py: the README's command, checks through the stack, `docker compose down`). These
checks run in the demo suite on any machine, engine or not: the compose stack and the no-Docker
demo share their configuration files, the images pin the same versions as the rest of the test
command (Rust toolchain, Envoy, trunk, binaryen), everything stays on host networking, and the
Envoy config the image renders passes the real Envoy's `--mode validate`.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from stack import demo_env  # noqa: E402  (the e2e suite's helper: one home for it)
COMPOSE = (ROOT / "docker-compose.yml").read_text()
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
DEMO = (ROOT / "scripts" / "demo.sh").read_text()
README = (ROOT / "README.md").read_text()


def services():
    """Service name -> its block of text (compose is kept flat enough for this)."""
    blocks = re.split(r"\n  (?=[a-z]+:\n)", COMPOSE.split("\nservices:\n", 1)[1])
    return {b.split(":", 1)[0].strip(): b for b in blocks}


def stages():
    return re.findall(r"^FROM \S+ AS (\S+)$", DOCKERFILE, re.M)


def test_every_service_is_on_host_networking_and_loopback():
    stack = services()
    assert set(stack) == {"redis", "sluice", "upstream", "envoy", "traffic"}
    for name, block in stack.items():
        assert "\n    network_mode: host" in block, name
        assert "ports:" not in block and "networks:" not in block, name
    assert "\nnetworks:" not in COMPOSE
    assert '"--bind", "127.0.0.1"' in stack["redis"]
    # The token passes through from `up`'s shell: an interpolated ${...:?} would make every
    # other command (down, ps, logs) refuse to run without it.
    assert "\n      - SLUICE_ADMIN_TOKEN\n" in stack["sluice"] and "${SLUICE_ADMIN_TOKEN" not in COMPOSE
    for listen in ("SLUICE_ADMIN_LISTEN", "SLUICE_DECISION_LISTEN", "SLUICE_GRPC_LISTEN"):
        assert demo_env()[listen].startswith("127.0.0.1:"), listen
    assert "address: 127.0.0.1" in (ROOT / "envoy" / "demo.yaml").read_text()


def test_the_stack_and_the_demo_read_the_same_files():
    stack = services()
    for name in ("sluice", "upstream", "traffic"):
        assert "env_file: demo/demo.env" in stack[name], name
    assert "done < demo/demo.env" in DEMO
    assert "demo/upstream.py --listen 127.0.0.1:$${UPSTREAM_PORT}" in stack["upstream"]
    assert 'demo/upstream.py --listen "127.0.0.1:$UPSTREAM_PORT"' in DEMO
    assert "demo/traffic.py --target 127.0.0.1:$${ENVOY_LISTEN_PORT}" in stack["traffic"]
    assert 'demo/traffic.py --target "127.0.0.1:$ENVOY_LISTEN_PORT"' in DEMO
    # Envoy's config is the demo's template, rendered with demo.env's values into the image.
    assert ". demo/demo.env" in DOCKERFILE
    assert "envoy/render.sh demo.yaml > /tmp/envoy.yaml" in DOCKERFILE
    assert "envoy/render.sh demo.yaml" in DEMO
    # The backend image holds the dashboard and rules at the paths demo.env names, under its
    # working directory; the build runs the demo's own build scripts.
    env = demo_env()
    sluice_stage = DOCKERFILE.split("AS sluice\n", 1)[1]
    assert "WORKDIR /sluice" in sluice_stage
    assert f"COPY --from=build /out/dist {env['SLUICE_DASHBOARD_DIR']}" in sluice_stage
    assert f"COPY {env['SLUICE_RULES']} {env['SLUICE_RULES']}" in sluice_stage
    assert (ROOT / env["SLUICE_RULES"]).is_file()
    for script in ("scripts/build-filter.sh", "scripts/build-dashboard.sh"):
        assert f"bash {script}" in DOCKERFILE and f"bash {script}" in DEMO
    assert "cargo build --locked --release -p sluice-backend --bin sluice" in DOCKERFILE


def test_the_demo_envoy_calls_the_grpc_listener_on_the_default_protocol():
    """envoy/demo.yaml names no protocol (the filter's default, grpc_stream) and points its one
    backend cluster, over HTTP/2, at the backend's gRPC listener: the port both the backend
    (SLUICE_GRPC_LISTEN, `--grpc-listen`) and the rendered Envoy config (SLUICE_GRPC_PORT) take
    from demo.env, in the demo and in the compose stack alike."""
    env = demo_env()
    assert env["SLUICE_GRPC_LISTEN"].rsplit(":", 1)[1] == env["SLUICE_GRPC_PORT"]
    assert "SLUICE_DECISION_PORT" not in env  # no longer a placeholder of demo.yaml
    ports = [env[k].rsplit(":", 1)[1] for k in ("SLUICE_ADMIN_LISTEN", "SLUICE_DECISION_LISTEN", "SLUICE_GRPC_LISTEN")]
    ports += [env[k] for k in ("ENVOY_LISTEN_PORT", "ENVOY_ADMIN_PORT", "UPSTREAM_PORT")]
    assert len(set(ports)) == len(ports), ports
    envoy = (ROOT / "envoy" / "demo.yaml").read_text()
    config = envoy.split("value: |", 1)[1].split("- name: envoy.filters.http.router", 1)[0]
    assert '"cluster": "sluice_backend"' in config and '"protocol"' not in config
    cluster = envoy.split("  - name: sluice_backend\n", 1)[1].split("\n  - name: ", 1)[0]
    assert "explicit_http_config: {http2_protocol_options: {}}" in cluster
    assert "port_value: ${SLUICE_GRPC_PORT}" in cluster
    assert "${SLUICE_DECISION_PORT}" not in envoy
    # The demo checks the port is free; the backend gets it from demo.env in both stacks.
    assert '"$SLUICE_GRPC_PORT"' in DEMO and "SLUICE_GRPC_LISTEN" in DEMO
    assert "env_file: demo/demo.env" in services()["sluice"]


def test_every_built_service_names_a_stage_of_the_dockerfile():
    stack = services()
    built = {name: re.search(r"target: (\w[\w-]*)", block).group(1)
             for name, block in stack.items() if "\n    build:" in block}
    assert built == {"sluice": "sluice", "upstream": "demo", "envoy": "envoy", "traffic": "demo"}
    assert set(built.values()) <= set(stages())
    for block in stack.values():
        if "\n    build:" in block:
            assert "dockerfile: docker/Dockerfile" in block and "network: host" in block


def test_the_images_pin_the_versions_the_other_suites_test_with():
    channel = re.search(r'channel = "(\d+\.\d+)\.\d+"', (ROOT / "rust-toolchain.toml").read_text()).group(1)
    assert f"FROM rust:{channel}-bookworm AS toolchain" in DOCKERFILE
    envoy = re.search(r"ENVOY_VERSION=(\S+)", (ROOT / "scripts/install/30-python.sh").read_text()).group(1)
    assert f"FROM envoyproxy/envoy:v{envoy} AS envoy" in DOCKERFILE
    dashboard_install = (ROOT / "scripts/install/40-dashboard.sh").read_text()
    trunk = re.search(r"trunk_version=(\S+)", dashboard_install).group(1)
    assert f"cargo install trunk --version {trunk} --locked" in DOCKERFILE
    assert "binaryen@132.0.0" in dashboard_install and "binaryen@132.0.0" in DOCKERFILE
    assert "image: redis:7\n" in COMPOSE
    assert "FROM debian:bookworm-slim AS sluice" in DOCKERFILE


def test_the_dockerfile_builds_offline_and_incrementally():
    # A `# syntax=` line would make BuildKit fetch a frontend image from a registry.
    assert not re.search(r"^#\s*syntax=", DOCKERFILE, re.M | re.I)
    build_run = DOCKERFILE.split("FROM tools AS build", 1)[1].split("\nFROM ", 1)[0]
    assert "--mount=type=cache,id=sluice-target,target=/sluice/target" in build_run
    assert "--mount=type=cache,id=sluice-cargo-registry,target=/usr/local/cargo/registry" in build_run
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in ("target", ".git", ".venv", "dashboard/dist", "dashboard/.tools"):
        assert path in ignored, path


def test_the_readme_holds_the_command_the_compose_suite_runs():
    assert len(re.findall(r"^    SLUICE_ADMIN_TOKEN=\S+ docker compose up --build\s*$", README, re.M)) == 1
    assert len(re.findall(r"^    docker compose down\s*$", README, re.M)) == 1
    suite = (ROOT / "tests/suites/70-compose.sh").read_text()
    assert "tests/compose" in suite and "standins.sh" in suite


def test_the_envoy_config_the_image_renders_is_valid(tmp_path):
    env = dict(os.environ, **demo_env())
    wasm = ROOT / env["FILTER_WASM"]
    if not wasm.exists():
        subprocess.run(["bash", "scripts/build-filter.sh"], cwd=ROOT, check=True, capture_output=True)
    env["FILTER_WASM"] = str(wasm)  # in the image: /etc/envoy/sluice_filter.wasm
    rendered = subprocess.run(["bash", "envoy/render.sh", "demo.yaml"], cwd=ROOT, env=env,
                              check=True, capture_output=True, text=True).stdout
    config = tmp_path / "envoy.yaml"
    config.write_text(rendered)
    result = subprocess.run([str(ROOT / ".venv/bin/envoy"), "--mode", "validate", "-c", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
