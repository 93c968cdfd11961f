"""Every Envoy config in envoy/ validates with `envoy --mode validate` (which runs the filter's
on_configure), and a bad filter field makes validation fail, naming the field."""

import re

import pytest

import stack

PORTS = {"ENVOY_ADMIN_PORT": 19901, "BACKEND_PORT": 19081, "UPSTREAM_PORT": 19090, "FILTER_WASM": stack.WASM,
         "TIMEOUT_MS": 25, "LISTEN_OPEN_PORT": 19000, "LISTEN_CLOSED_PORT": 19001,
         "ENVOY_LISTEN_PORT": 10000, "SLUICE_GRPC_PORT": 8082,
         "BENCH_PLAIN_PORT": 19100, "BENCH_LOCAL_RL_PORT": 19101, "BENCH_ALLOWED_PORT": 19102,
         "BENCH_DENIED_PORT": 19103, "BENCH_CACHED_PORT": 19104,
         "BENCH_UPSTREAM_PORT": 19105, "BENCH_RLS_PORT": 19106, "BENCH_GRPC_PORT": 19107, "BACKEND_RLS_PORT": 19082,
         "RLS_OPEN_PORT": 19200, "RLS_CLOSED_PORT": 19201, "RLS_PORT": 19202, "RLS_TIMEOUT": "0.25s",
         "REPORT_PERIOD_MS": 1000, "BENCH_LEASED_PORT": 19108, "BENCH_STREAM_PORT": 19109,
         "PROTOCOL": "grpc_stream", "LISTEN_STREAM_PORT": 19300, "LISTEN_HTTP_PORT": 19301,
         "LISTEN_UPLOAD_PORT": 19302, "GRPC_PORT": 19303, "RESET_PORT": 19304, "UPLOAD_TIMEOUT_MS": 1000}

CONFIGS = sorted(p.name for p in (stack.ROOT / "envoy").glob("*.yaml"))


def render_to(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_there_are_configs():
    assert {"e2e.yaml", "demo.yaml"} <= set(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_validates(tmp_path, name):
    ok, out = stack.validate(render_to(tmp_path, name, stack.render(name, PORTS)))
    assert ok, out


@pytest.mark.parametrize("bad, field", [
    ('"failure_mode": "allow"', '"failure_mode": "sometimes"'),
    ('"timeout_ms": 25', '"timeout_ms": 0'),
    ('"key": {"source": "client_ip"}', '"key": {"source": "cookie"}'),
])
def test_a_bad_field_fails_validation_and_is_named(tmp_path, bad, field):
    text = stack.render("e2e.yaml", PORTS)
    assert bad in text
    path = render_to(tmp_path, "bad.yaml", text.replace(bad, field, 1))
    ok, out = stack.validate(path)
    assert not ok
    named = re.escape(field.split(":")[0].strip('"')) if "key" not in field else r"routes\[\d+\]\.key\.source"
    assert "sluice: bad plugin configuration" in out and re.search(named, out), out
