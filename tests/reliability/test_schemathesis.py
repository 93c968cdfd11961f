"""schemathesis (PyPI) against the OpenAPI document each listener serves: generated valid and
invalid requests for every operation, bounded in examples and time, with zero server errors
(`not_a_server_error`, but for the decision API's 503 `deadline_exceeded`, an answer about a
generated `timeout_ms` too short for the store: schemathesis_hooks.py). The seed is fixed so a failure reproduces; set SLUICE_SCHEMATHESIS_SEED
to explore others and SLUICE_SCHEMATHESIS_EXAMPLES for more examples per operation."""

import os
import re
import subprocess
from pathlib import Path

import pytest
import requests

import rstack
import stack

SCHEMATHESIS = str(Path(stack.ENVOY).with_name("schemathesis"))
HOOKS = str(Path(__file__).with_name("schemathesis_hooks.py"))
SEED = os.environ.get("SLUICE_SCHEMATHESIS_SEED", "20261122")
EXAMPLES = os.environ.get("SLUICE_SCHEMATHESIS_EXAMPLES", "30")


@pytest.fixture(scope="module")
def backend(tmp, redis):
    if not os.path.exists(SCHEMATHESIS):
        pytest.fail(f"{SCHEMATHESIS} missing; run scripts/install/35-reliability.sh")
    # Generated logins post wrong tokens from this one address: past the bound on failed sign-ins
    # (docs/security.md) every request, the Bearer token's included, would be a 429 and the walk
    # would reach no handler; the bound is raised so it keeps reaching them.
    b = rstack.Backend(tmp, redis.url, ["--admin-sign-in-burst", "100000"]).start()
    # Something for generated decisions to hit (generated actions mostly have no rule: 404).
    b.put_rule({"action": "reply", "algorithm": "gcra", "capacity": 16, "rate": {"count": 30, "period": "60s"}})
    yield b
    b.stop()


def schemathesis(tmp, base, extra):
    log = tmp / f"schemathesis-{base.rsplit(':', 1)[1]}.log"
    args = [SCHEMATHESIS, "run", f"{base}/v1/openapi.json", "--url", base,
            "--checks", "not_a_server_error_but_a_deadline",
            "--max-examples", EXAMPLES, "--seed", SEED, "--request-timeout", "5", "--workers", "1",
            # One worker: two threads race CPython 3.11.7's ast.parse inside hypothesis (seen in CI:
            # "SystemError: AST constructor recursion depth mismatch", a Runtime Error, not a finding).
            "--exclude-path", "/v1/events",  # a never-ending SSE stream; covered by the security walk
            *extra]
    with open(log, "wb") as f:
        done = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, timeout=240,
                              env=dict(os.environ, NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false",
                                       SCHEMATHESIS_HOOKS=HOOKS))
    text = log.read_text(errors="replace")
    summary = [line for line in text.splitlines() if re.search(r"generated|passed|failed|Selected|Tested", line)]
    print(f"schemathesis {base}: " + " | ".join(s.strip() for s in summary[-4:]))
    return done.returncode, text


def test_decision_listener_has_no_server_errors(tmp, backend):
    rc, text = schemathesis(tmp, backend.decision_url, [])
    assert rc == 0 and "Server error" not in text, text[-6000:]
    assert re.search(r"\d+ generated, \d+ passed", text), text[-3000:]


def test_admin_listener_has_no_server_errors(tmp, backend):
    rc, text = schemathesis(tmp, backend.admin_url, ["-H", f"Authorization: Bearer {rstack.TOKEN}"])
    assert rc == 0 and "Server error" not in text, text[-6000:]
    assert re.search(r"\d+ generated, \d+ passed", text), text[-3000:]
    assert requests.get(backend.admin_url + "/healthz", timeout=5).status_code == 200
    assert "panicked" not in backend.log_text()
