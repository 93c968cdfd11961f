"""Certificates made at run time with the openssl CLI (none committed), and the Envoy
`transport_socket` block that presents them: shared by tests/e2e/test_tls.py and the benches that
measure TLS beside plaintext (benches/envoy/callgrind.py, benches/envoy/tls_cpu.py)."""

import subprocess


def openssl(cwd, *args):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(dir):
    """A CA, the backend's certificate (SAN localhost, 127.0.0.1) and Envoy's client certificate,
    P-256 keys, valid for two days, in `dir` (a pathlib.Path): ca.pem, server.pem/.key,
    envoy.pem/.key."""
    dir.mkdir(exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl(dir, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=e2e-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaves = {"server": "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
              "envoy": "extendedKeyUsage=clientAuth\nsubjectAltName=DNS:envoy.e2e\n"}
    for serial, (name, ext) in enumerate(leaves.items(), start=2):
        (dir / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + ext)
        openssl(dir, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl(dir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial",
                str(serial), "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return dir


def backend_args(dir, listener="grpc"):
    """The backend's flags serving `listener` (grpc, decision, admin) with the certificate of
    `make_pki(dir)` and requiring client certificates of its CA (mutual TLS)."""
    return [f"--{listener}-tls-cert", str(dir / "server.pem"), f"--{listener}-tls-key", str(dir / "server.key"),
            f"--{listener}-tls-client-ca", str(dir / "ca.pem")]


def upstream_tls(dir, client_cert=True, alpn="h2"):
    """An Envoy cluster's `transport_socket` (the block docs/security.md shows): an
    UpstreamTlsContext offering `alpn`, checking the backend's certificate against the CA of
    `make_pki(dir)` and its name (localhost), with Envoy's client certificate unless `client_cert`
    is False."""
    context = {"alpn_protocols": [alpn]}
    if client_cert:
        context["tls_certificates"] = [{"certificate_chain": {"filename": str(dir / "envoy.pem")},
                                        "private_key": {"filename": str(dir / "envoy.key")}}]
    context["validation_context"] = {
        "trusted_ca": {"filename": str(dir / "ca.pem")},
        "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": "localhost"}}]}
    return {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "sni": "localhost", "common_tls_context": context}}
