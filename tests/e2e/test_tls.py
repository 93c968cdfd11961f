"""Mutual TLS from a real Envoy 1.40 to the backend's gRPC listener (docs/security.md): the
backend started with --grpc-tls-cert/--grpc-tls-key/--grpc-tls-client-ca, Envoy's cluster to it
with an UpstreamTlsContext presenting a client certificate. The sluice filter's `grpc_stream` and
`grpc` protocols (on the build SLUICE_FILTER_BUILD names) and Envoy's own ratelimit filter limit
exactly as over h2c; an Envoy without a client certificate is refused at the handshake, named in
the backend's log and counted, its requests follow the filter's failure mode with its failure
line, and nothing it sent is decided or debited. Certificates are made at test time with the
openssl CLI (certs.py).

envoy/e2e_grpc.yaml and envoy/rls.yaml are rendered as for the h2c tests and their `sluice_rls`
cluster given the transport socket below (the block docs/security.md shows)."""

import json
import re
import uuid

import pytest
import requests

import certs
import stack

TIMEOUT_MS = 250
HOUR = {"count": 1, "period": "1h"}
GRPC_LISTENERS = ["LISTEN_OPEN_PORT", "LISTEN_CLOSED_PORT"]
RLS_LISTENERS = ["RLS_OPEN_PORT", "RLS_CLOSED_PORT"]


def with_tls(config_path, pki, client_cert=True, cluster="sluice_rls", alpn="h2"):
    """Gives the rendered config's `cluster` an UpstreamTlsContext (`alpn`, the backend's
    certificate checked against the CA and its name), with Envoy's client certificate unless
    `client_cert` is False: certs.upstream_tls, written as YAML's JSON form."""
    block = json.dumps(certs.upstream_tls(pki, client_cert, alpn))
    text = config_path.read_text()
    anchor = f"  - name: {cluster}\n    type: STATIC\n"
    assert anchor in text
    config_path.write_text(text.replace(anchor, anchor + f"    transport_socket: {block}\n", 1))


@pytest.fixture(scope="module")
def pki(tmp):
    return certs.make_pki(tmp / "pki")


@pytest.fixture(scope="module")
def tls_backend(tmp, pki):
    redis, redis_port = stack.start_redis(tmp)
    backend = stack.Backend(tmp, redis_port, extra_args=certs.backend_args(pki)).start()
    yield backend
    stack.stop_all(backend, redis)


def filter_envoy(tmp, pki, backend, upstream, protocol, client_cert=True):
    envoy = stack.Envoy(tmp, "e2e_grpc.yaml", {"RLS_PORT": backend.grpc_port, "UPSTREAM_PORT": upstream,
                                                "TIMEOUT_MS": TIMEOUT_MS, "PROTOCOL": protocol}, GRPC_LISTENERS)
    with_tls(envoy.config, pki, client_cert)
    return envoy.start()


def user():
    return f"t-{uuid.uuid4().hex[:12]}"


def log_of(backend):
    return backend.proc.log_path.read_text(errors="replace")


@pytest.mark.parametrize("protocol", ["grpc_stream", "grpc"])
def test_the_filter_limits_exactly_over_mutual_tls(tmp, pki, tls_backend, upstream, protocol):
    envoy = filter_envoy(tmp, pki, tls_backend, upstream, protocol)
    try:
        tls_backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 4, "rate": HOUR})
        who = user()
        answers = [requests.get(envoy.url("LISTEN_CLOSED_PORT") + "/limited/x", headers={"x-user": who}, timeout=10)
                   for _ in range(6)]
        assert [r.status_code for r in answers] == [200] * 4 + [429] * 2, [(r.status_code, r.headers) for r in answers]
        assert [r.headers["x-ratelimit-remaining"] for r in answers[:4]] == ["3", "2", "1", "0"]
        assert all("x-sluice-failure" not in r.headers for r in answers)
        # (`closed`: the stack's readiness probe, a TCP connect without a handshake.)
        refused = (tls_backend.metric("sluice_tls_refused_total", listener="grpc")
                   - tls_backend.metric("sluice_tls_refused_total", listener="grpc", reason="closed"))
        assert refused == 0, log_of(tls_backend)
    finally:
        envoy.stop()


def test_envoys_ratelimit_filter_limits_exactly_over_mutual_tls(tmp, pki, tls_backend, upstream):
    envoy = stack.Envoy(tmp, "rls.yaml", {"RLS_PORT": tls_backend.grpc_port, "UPSTREAM_PORT": upstream,
                                           "RLS_TIMEOUT": "1s"}, RLS_LISTENERS)
    with_tls(envoy.config, pki)
    envoy.start()
    try:
        tls_backend.put_rule({"action": "user", "algorithm": "gcra", "capacity": 3, "rate": HOUR})
        who = user()
        answers = [requests.get(envoy.url("RLS_CLOSED_PORT") + "/user/post", headers={"x-user-id": who}, timeout=10)
                   for _ in range(5)]
        assert [r.status_code for r in answers] == [200] * 3 + [429] * 2, [(r.status_code, r.text) for r in answers]
        assert answers[3].headers["x-envoy-ratelimited"] == "true"
        assert re.search(r'"user";q=3;w=\d+', answers[3].headers["ratelimit-policy"])
    finally:
        envoy.stop()


def test_an_envoy_without_a_client_certificate_is_refused_and_debits_nothing(tmp, pki, tls_backend, upstream):
    tls_backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
    before = tls_backend.decisions("e2e_limited")
    refused_before = tls_backend.metric("sluice_tls_refused_total", listener="grpc", reason="no_client_certificate")
    envoy = filter_envoy(tmp, pki, tls_backend, upstream, "grpc_stream", client_cert=False)
    try:
        who = user()
        closed = [requests.get(envoy.url("LISTEN_CLOSED_PORT") + "/limited/x", headers={"x-user": who}, timeout=10)
                  for _ in range(3)]
        opened = requests.get(envoy.url("LISTEN_OPEN_PORT") + "/limited/x", headers={"x-user": who}, timeout=10)
        # The filter's failure mode decides, with its failure line: deny closed, allow open.
        assert all(r.status_code != 200 and r.headers.get("x-sluice-failure") for r in closed), \
            [(r.status_code, r.headers) for r in closed]
        assert opened.status_code == 200 and opened.headers.get("x-sluice-failure"), opened.headers
        stack.wait_until(lambda: "reason=\"no_client_certificate\"" in log_of(tls_backend),
                         "the backend names the refusal", timeout=5)
        assert tls_backend.metric("sluice_tls_refused_total", listener="grpc",
                                  reason="no_client_certificate") > refused_before
        # Nothing it sent was decided, so nothing was debited: a certified Envoy still gets the
        # whole budget for the same user.
        assert tls_backend.decisions("e2e_limited") == before
    finally:
        envoy.stop()
    good = filter_envoy(tmp, pki, tls_backend, upstream, "grpc_stream")
    try:
        codes = [requests.get(good.url("LISTEN_CLOSED_PORT") + "/limited/x", headers={"x-user": who},
                              timeout=10).status_code for _ in range(3)]
        assert codes == [200, 200, 429], codes
    finally:
        good.stop()


def test_the_filters_http_protocol_limits_exactly_over_mutual_tls(tmp, pki, upstream):
    """`protocol: http` to a decision listener with --decision-tls-*: the same cluster block with
    ALPN http/1.1."""
    redis, redis_port = stack.start_redis(tmp)
    backend = stack.Backend(tmp, redis_port, extra_args=certs.backend_args(pki, "decision"))
    envoy = None
    try:
        backend.start()
        backend.put_rule({"action": "e2e_limited", "algorithm": "gcra", "capacity": 2, "rate": HOUR})
        envoy = stack.Envoy(tmp, "e2e.yaml", {"BACKEND_PORT": backend.decision_port, "UPSTREAM_PORT": upstream,
                                               "TIMEOUT_MS": TIMEOUT_MS}, GRPC_LISTENERS)
        with_tls(envoy.config, pki, cluster="sluice_backend", alpn="http/1.1")
        envoy.start()
        who = user()
        answers = [requests.get(envoy.url("LISTEN_CLOSED_PORT") + "/limited/x", headers={"x-user": who}, timeout=10)
                   for _ in range(3)]
        assert [r.status_code for r in answers] == [200, 200, 429], [(r.status_code, r.headers) for r in answers]
        assert all("x-sluice-failure" not in r.headers for r in answers)
        # Its /metrics is behind the same mutual TLS.
        metrics = requests.get(f"https://127.0.0.1:{backend.decision_port}/metrics", timeout=5,
                               verify=str(pki / "ca.pem"), cert=(str(pki / "envoy.pem"), str(pki / "envoy.key")))
        assert metrics.status_code == 200 and 'action="e2e_limited"' in metrics.text, metrics.text
    finally:
        stack.stop_all(envoy, backend, redis)
