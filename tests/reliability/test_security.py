"""Security: a walk over EVERY operation in the admin listener's OpenAPI document. Each operation
that declares security refuses a missing, wrong, truncated, mis-schemed or forged credential with
401 and works with the real token; each that declares none is on a short public list. The decision
listener serves none of the admin operations or the dashboard. The dashboard and API responses
carry security headers, and the session cookie is HttpOnly and SameSite=Strict.

(Rendering keys and descriptions as text is the dashboard's browser test:
tests/browser/dashboard.test.mjs throttles the key `<img src=x onerror=alert(1)>` and checks the
live view shows it as text.)"""

import base64

import pytest
import requests

import rstack

PUBLIC = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"), ("get", "/v1/openapi.json"),
          ("post", "/v1/session"), ("delete", "/v1/session")}
TOKEN = rstack.TOKEN
PROBE_RULE = {"algorithm": "gcra", "capacity": 2, "rate": {"count": 1, "period": "1m"}}
BAD_CREDENTIALS = {
    "none": {},
    "wrong bearer": {"authorization": "Bearer wrong-token-0123456789abcdef"},
    "empty bearer": {"authorization": "Bearer "},
    "truncated token": {"authorization": f"Bearer {TOKEN[:-1]}"},
    "token plus a byte": {"authorization": f"Bearer {TOKEN}x"},
    "token as basic auth": {"authorization": "Basic " + base64.b64encode(f"admin:{TOKEN}".encode()).decode()},
    "token without scheme": {"authorization": TOKEN},
    "token in another header": {"x-admin-token": TOKEN, "x-api-key": TOKEN},
    "forged session cookie": {"cookie": "sluice_session=0123.9999999999.deadbeef"},
    "token as session cookie": {"cookie": f"sluice_session={TOKEN}"},
}


@pytest.fixture(scope="module")
def backend(tmp, redis):
    # Every bad credential below comes from this test's one address: many more failed sign-ins
    # than the default bound (10, then 429 too_many_sign_ins: backend/tests/it/admin_hardening.rs),
    # so the bound is raised here; each must still be a 401.
    b = rstack.Backend(tmp, redis.url, extra=["--admin-sign-in-burst", "100000"]).start()
    b.put_rule({"action": "sec_probe", **PROBE_RULE})
    b.admin("PUT", "/v1/rules/sec_probe/overrides/sec_key", json=PROBE_RULE).raise_for_status()
    yield b
    b.stop()


def operations(backend):
    doc = requests.get(backend.admin_url + "/v1/openapi.json", timeout=5).json()
    ops = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                secured = bool(op.get("security", doc.get("security")))
                ops.append((method, path, op.get("tags", []), secured))
    return ops


def concrete_path(path):
    """The path with its parameters filled in: {action}, and the key GET /v1/keys requires."""
    concrete = path.replace("{action}", "sec_probe").replace("{key}", "sec_key")
    if concrete.split("?")[0] == "/v1/keys":
        # GET reads `key`; DELETE (a reset) reads `action` and `key`.
        concrete += ("&" if "?" in concrete else "?") + "key=sec_probe&action=sec_probe"
    return concrete


def call(url, method, path, headers, **kw):
    concrete = concrete_path(path)
    body = PROBE_RULE if method == "put" else None
    # stream: /v1/events is a never-ending SSE stream; read only its status.
    r = requests.request(method.upper(), url + concrete, headers=headers, json=body, timeout=5, stream=True,
                         allow_redirects=False, **kw)
    r.close()
    return r


def test_every_secured_admin_operation_refuses_bad_credentials(backend):
    ops = operations(backend)
    secured = [(m, p) for m, p, _, s in ops if s]
    assert len(secured) >= 6, f"the document lists the admin operations: {ops}"
    for method, path in secured:
        for what, headers in BAD_CREDENTIALS.items():
            r = call(backend.admin_url, method, path, headers)
            assert r.status_code == 401, f"{method.upper()} {path} with {what}: {r.status_code}"
            if method != "get" or path != "/v1/events":
                assert requests.request(method.upper(), backend.admin_url + concrete_path(path),
                                        headers=headers, json=PROBE_RULE if method == "put" else None,
                                        timeout=5).json()["error"] == "unauthorized"
        # Query strings carry no credentials either.
        r = call(backend.admin_url, method, path + f"?token={TOKEN}&access_token={TOKEN}", {})
        assert r.status_code == 401, f"{method.upper()} {path} with the token in the query"
    # Nothing the refused requests asked for happened.
    assert backend.admin("GET", "/v1/rules/sec_probe").json()["capacity"] == 2
    # The real token opens every one of them (so each 401 above was the credential, not the route).
    for method, path in secured:
        r = call(backend.admin_url, method, path, {"authorization": f"Bearer {TOKEN}"})
        assert r.status_code in (200, 204), f"{method.upper()} {path} with the token: {r.status_code}"
        if method == "delete":
            backend.put_rule({"action": "sec_probe", **PROBE_RULE})
            backend.admin("PUT", "/v1/rules/sec_probe/overrides/sec_key", json=PROBE_RULE).raise_for_status()


def test_only_the_probes_and_login_are_public(backend):
    """The one document lists both listeners' operations; the decision ones (no token: Envoy calls
    them, and that listener stays off the public network) are not served on the admin listener."""
    ops = operations(backend)
    decision = {(m, p) for m, p, tags, s in ops if "decision" in tags}
    assert decision == {("post", "/v1/throttle"), ("post", "/v1/throttle/all"), ("post", "/v1/cl.throttle"),
                        ("post", "/v1/report"), ("post", "/v1/commit")}
    for method, path in decision:
        assert call(backend.admin_url, method, path, {}).status_code in (404, 405), (method, path)
    public = {(m, p) for m, p, tags, s in ops if not s} - decision
    assert public <= PUBLIC, f"operations without security that are not meant to be public: {public - PUBLIC}"
    for method, path in public - {("post", "/v1/session")}:
        assert call(backend.admin_url, method, path, {}).status_code in (200, 204), (method, path)


def test_routes_outside_the_document_are_not_a_way_in(backend):
    for path in ("/v1/rules/", "/v1/rules/sec_probe/", "//v1/rules", "/V1/RULES", "/v1/rules/sec_probe/x",
                 "/v1/./rules", "/v1/rules%2fsec_probe", "/v1/levels/", "/v1/events/", "/v2/rules",
                 "/v1/session/../rules", "/admin", "/debug", "/.env"):
        for method in ("GET", "PUT", "DELETE"):
            r = requests.request(method, backend.admin_url + path, json=PROBE_RULE, timeout=5, stream=True)
            r.close()
            assert r.status_code in (401, 404, 405) or (method == "GET" and r.headers.get(
                "content-type", "").startswith("text/html")), f"{method} {path}: {r.status_code}"
            assert not (r.status_code < 300 and r.headers.get("content-type", "").startswith("application/json")), \
                f"{method} {path} answered API data without a token"


def test_the_decision_listener_serves_no_admin_operation(backend):
    admin_ops = [(m, p) for m, p, tags, s in operations(backend) if s or "admin" in tags]
    assert admin_ops
    for method, path in admin_ops + [("get", "/"), ("get", "/index.html"), ("post", "/v1/session")]:
        for headers in ({}, {"authorization": f"Bearer {TOKEN}"}):
            r = call(backend.decision_url, method, path, headers)
            assert r.status_code in (404, 405), f"{method.upper()} {path} on the decision listener: {r.status_code}"


def test_security_headers_on_the_dashboard_and_the_api(backend):
    for path, headers in (("/", {}), ("/index.html", {}), ("/v1/rules", {"authorization": f"Bearer {TOKEN}"}),
                          ("/v1/rules", {})):
        r = requests.get(backend.admin_url + path, headers=headers, timeout=5)
        h = r.headers
        assert h.get("x-content-type-options") == "nosniff", (path, dict(h))
        assert h.get("x-frame-options") == "DENY", (path, dict(h))
        assert h.get("referrer-policy") == "no-referrer", (path, dict(h))
        csp = h.get("content-security-policy", "")
        directives = dict((d.strip().split(" ", 1) + [""])[:2] for d in csp.split(";") if d.strip())
        assert directives.get("default-src") == "'self'", csp
        assert directives.get("frame-ancestors") == "'none'", csp
        assert directives.get("object-src") == "'none'", csp
        script = directives.get("script-src", directives["default-src"])
        assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script and "*" not in script, csp


def test_the_session_cookie_is_httponly_and_strict(backend):
    r = requests.post(backend.admin_url + "/v1/session", json={"token": TOKEN}, timeout=5)
    assert r.status_code == 204
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("sluice_session=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
    assert TOKEN not in cookie, "the cookie is not the token"
    wrong = requests.post(backend.admin_url + "/v1/session", json={"token": TOKEN[:-1]}, timeout=5)
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
