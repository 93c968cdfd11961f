//! Issue 40: every state-changing endpoint takes only `Content-Type: application/json`. A
//! browser posts cross-site without a preflight only as a form, `text/plain` or a typeless body;
//! each is refused with 415 `unsupported_media_type` naming `application/json` (field
//! `content-type`) and changes nothing: decisions, commits and reports on the decision listener,
//! rule changes and the login on the admin listener (token or not).
use serde_json::{json, Value};
use sluice_backend::StoreChoice;
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{long_rule, TOKEN};

type Rig = GrpcRig<Channel>;

/// `method url` with `body` as `content_type` (`None`: no header), the token when `admin`.
async fn send(
    rig: &Rig,
    method: reqwest::Method,
    url: String,
    body: &Value,
    content_type: Option<&str>,
    admin: bool,
) -> (u16, Value) {
    let mut r = rig.http.request(method, url).body(body.to_string());
    if let Some(t) = content_type {
        r = r.header("content-type", t);
    }
    if admin {
        r = r.bearer_auth(TOKEN);
    }
    let r = r.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn assert_415(status: u16, e: &Value, what: &str) {
    assert_eq!(status, 415, "{what}: {e}");
    assert_eq!(e["error"], "unsupported_media_type", "{what}: {e}");
    assert_eq!(e["field"], "content-type", "{what}: {e}");
    let message = e["message"].as_str().unwrap_or_default();
    assert!(message.contains("application/json"), "{what}: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changing_endpoints_refuse_bodies_not_declared_json() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(long_rule("ct", "fixed_window", 3)).await;
    let types = [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ];
    let throttle = json!({"action": "ct", "key": "k", "quantity": 3});
    let commit = json!({"action": "ct", "key": "k", "reserved": 3, "actual": 0, "id": "x",
                        "reserved_at_ms": 1});
    let report = json!({"reporter": "r", "seq": 1, "actions": {}});
    for t in types {
        for (path, body) in [
            ("/v1/throttle", &throttle),
            ("/v1/throttle/all", &json!({"checks": [throttle.clone()]})),
            (
                "/v1/cl.throttle",
                &json!({"key": "k", "max_burst": 1, "count": 1, "period": 60}),
            ),
            ("/v1/commit", &commit),
            ("/v1/report", &report),
        ] {
            let url = format!("{}{path}", rig.decision);
            let (status, e) = send(&rig, reqwest::Method::POST, url, body, t, false).await;
            assert_415(status, &e, &format!("{path} as {t:?}"));
        }
        let rule = long_rule("ct", "fixed_window", 1000);
        let url = format!("{}/v1/rules/ct", rig.admin);
        let (status, e) = send(&rig, reqwest::Method::PUT, url, &rule, t, true).await;
        assert_415(status, &e, &format!("PUT rule as {t:?}"));
        let url = format!("{}/v1/session", rig.admin);
        let login = json!({"token": TOKEN});
        let (status, e) = send(&rig, reqwest::Method::POST, url, &login, t, false).await;
        assert_415(status, &e, &format!("login as {t:?}"));
    }
    // Nothing changed: the rule is still 3, and its 3 are all there.
    let (status, answer) = rig
        .http_post("/v1/throttle", throttle.to_string().into_bytes())
        .await;
    assert_eq!(
        (status, &answer["allowed"]),
        (200, &json!(true)),
        "{answer}"
    );
    assert_eq!(answer["capacity"], 3, "{answer}");
    // JSON with parameters passes.
    let url = format!("{}/v1/throttle", rig.decision);
    let peek = json!({"action": "ct", "key": "k2"});
    let typed = Some("application/json; charset=utf-8");
    let (status, _) = send(&rig, reqwest::Method::POST, url, &peek, typed, false).await;
    assert_eq!(status, 200);
    rig.stop().await;
}
