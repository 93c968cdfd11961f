//! Issue 24's one-step fixes over HTTP, on the memory store: named admin identities (the audit
//! says who, `GET /v1/session` says who is signed in), one key reset on every action at once
//! (one audit entry per action), an override that starts the key fresh, the key view marking
//! keys under an override, and the audit trail filtered by action, key, kind and admin.

use crate::harness::{Sluice, TOKEN};

use reqwest::Method;
use serde_json::{json, Value};
use sluice_backend::{Config, StoreChoice};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

async fn call(
    s: &Sluice,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = s
        .http
        .request(method, format!("{}{path}", s.admin))
        .bearer_auth(token);
    if let Some(body) = body {
        req = req.json(&body);
    }
    crate::harness::status_and_json(req.send().await.expect("admin call")).await
}

async fn audit(s: &Sluice, query: &str) -> Vec<(String, String, Option<String>, String)> {
    let (status, body) = call(s, TOKEN, Method::GET, &format!("/v1/audit?{query}"), None).await;
    assert_eq!(status, 200, "{body}");
    body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("").to_owned(),
                e["action"].as_str().unwrap_or("").to_owned(),
                e["key"].as_str().map(str::to_owned),
                e["who"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn one_step_fixes_with_names() {
    let mut config = Config::new(StoreChoice::Memory, TOKEN);
    config.admin_identities = vec![("alice".into(), ALICE.into()), ("bob".into(), BOB.into())];
    let s = Sluice::start_with(config).await;
    for action in ["post", "reply"] {
        let rule = json!({"action": action, "algorithm": "gcra", "capacity": 2, "rate": {"count": 1, "period": "1h"}});
        let (status, body) = call(
            &s,
            ALICE,
            Method::PUT,
            &format!("/v1/rules/{action}"),
            Some(rule),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // Who is signed in: each token is its own identity; the plain token is "admin".
    for (token, name) in [(ALICE, "alice"), (BOB, "bob"), (TOKEN, "admin")] {
        let (status, body) = call(&s, token, Method::GET, "/v1/session", None).await;
        assert_eq!((status, body["name"].as_str()), (200, Some(name)));
    }
    let (status, _) = call(
        &s,
        "wrong-token-0000000000",
        Method::GET,
        "/v1/session",
        None,
    )
    .await;
    assert_eq!(status, 401);

    // mallory is out of both.
    for action in ["post", "reply"] {
        for _ in 0..3 {
            s.throttle(action, "mallory", 1).await;
        }
        assert_eq!(s.throttle(action, "mallory", 1).await.1["allowed"], false);
    }
    // One request frees mallory everywhere, one audit entry per action, by bob.
    let (status, body) = call(
        &s,
        BOB,
        Method::DELETE,
        "/v1/keys?action=*&key=mallory",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["key"], "mallory");
    let actions: Vec<&str> = body["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["post", "reply"]);
    assert_eq!(body["actions"][0]["removed"], json!(["gcra"]));
    for action in ["post", "reply"] {
        assert_eq!(
            s.throttle(action, "mallory", 1).await.1["allowed"],
            true,
            "{action}"
        );
    }

    // An override that starts fresh: vip used up its 2, gets capacity 50 and all 50 of it.
    for _ in 0..2 {
        s.throttle("post", "vip", 1).await;
    }
    let vip = json!({"algorithm": "gcra", "capacity": 50, "rate": {"count": 1, "period": "1h"}});
    let (status, body) = call(
        &s,
        ALICE,
        Method::PUT,
        "/v1/rules/post/overrides/vip?fresh=true",
        Some(vip.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, d) = s.throttle("post", "vip", 50).await;
    assert_eq!(d["allowed"], true, "{d}");
    let (status, body) = call(
        &s,
        ALICE,
        Method::PUT,
        "/v1/rules/post/overrides/vip?fresh=maybe",
        Some(vip),
    )
    .await;
    assert_eq!((status, body["field"].as_str()), (400, Some("fresh")));
    // The key view marks the override.
    let (_, view) = call(&s, TOKEN, Method::GET, "/v1/keys?key=vip", None).await;
    let marks: Vec<(&str, bool)> = view["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap(),
                a["overridden"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(marks, [("post", true), ("reply", false)]);

    // The audit, by name and filtered.
    let all = audit(&s, "").await;
    assert_eq!(
        all[0],
        (
            "key_reset".into(),
            "post".into(),
            Some("vip".into()),
            "alice".into()
        ),
        "newest first"
    );
    assert_eq!(all[1].0, "override_put");
    let resets = audit(&s, "kind=key_reset&key=mallory").await;
    assert_eq!(
        resets,
        [
            (
                "key_reset".into(),
                "reply".into(),
                Some("mallory".into()),
                "bob".into()
            ),
            (
                "key_reset".into(),
                "post".into(),
                Some("mallory".into()),
                "bob".into()
            ),
        ]
    );
    assert_eq!(
        audit(&s, "action=reply&who=alice").await.len(),
        1,
        "alice's rule put"
    );
    assert!(audit(&s, "who=ali").await.is_empty());
    let (status, body) = call(&s, TOKEN, Method::GET, "/v1/audit?kind=nope", None).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("kind")));
    s.stop().await;
}
