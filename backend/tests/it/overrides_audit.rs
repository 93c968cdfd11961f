//! Issue 13, items 2–4 over the whole HTTP application, on the memory store, a real redis-server
//! (two replicas) and a real 3-master Redis Cluster (two replicas): a per-key override written
//! through A is in force on B within 1 s and gone within 1 s of its deletion; bad input (an
//! override for an action without a rule, a 10 KB key, an invalid override, a mismatched action)
//! is refused naming the field with nothing written (no version bump, no audit entry); a reset
//! frees a limited key; deleting a rule takes its overrides; and the audit trail shows every
//! change in order with before/after and who made it (the token, or a dashboard session).

use crate::harness;
use crate::support;

use std::time::Duration;

use harness::{eventually, Sluice, TOKEN};
use reqwest::Method;
use serde_json::{json, Value};
use sluice_backend::StoreChoice;

/// Percent-encodes every byte but the unreserved ones (for a path segment or a query value).
fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn call(s: &Sluice, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = s.admin_req(method, path);
    if let Some(body) = body {
        req = req.json(&body);
    }
    crate::harness::status_and_json(req.send().await.expect("admin call")).await
}

fn override_path(action: &str, key: &str) -> String {
    format!("/v1/rules/{action}/overrides/{}", enc(key))
}

async fn put_override(s: &Sluice, action: &str, key: &str, rule: Value) -> (u16, Value) {
    call(s, Method::PUT, &override_path(action, key), Some(rule)).await
}

async fn audit(s: &Sluice) -> Vec<Value> {
    let (status, body) = s.admin_get("/v1/audit?limit=1000").await;
    assert_eq!(status, 200, "{body}");
    body["entries"].as_array().expect("entries").clone()
}

async fn version(s: &Sluice) -> u64 {
    s.admin_get("/v1/rules").await.1["version"]
        .as_u64()
        .expect("version")
}

/// A dashboard login on `s`: the `sluice_session` cookie's value.
async fn login(s: &Sluice) -> String {
    let r = s.post_session(json!({"token": TOKEN})).await;
    assert_eq!(r.status().as_u16(), 204);
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("set-cookie")
        .to_owned();
    cookie
        .split(';')
        .next()
        .and_then(|p| p.strip_prefix("sluice_session="))
        .expect("cookie value")
        .to_owned()
}

const RULE: &str = "reply";
const VIP: &str = "vip/é ü+%2F{}";

fn rule() -> Value {
    json!({"action": RULE, "algorithm": "gcra", "capacity": 2, "rate": {"count": 1, "period": "1h"}})
}

fn vip_override() -> Value {
    // Another algorithm, 10 times the capacity; the action may be omitted.
    json!({"algorithm": "fixed_window", "capacity": 20, "window": "1h", "description": "VIP"})
}

/// The whole scenario, writing through `a` and checking through `b` (the same instance on the
/// memory store).
async fn scenario(a: &Sluice, b: &Sluice) {
    let within = Duration::from_secs(1);
    assert_eq!(a.put_rule(rule()).await.0, 200);
    eventually(within, "B has the rule", || async {
        (b.throttle(RULE, "x", 0).await.0 == 200).then_some(())
    })
    .await;

    // Bad input: refused naming the field, nothing written.
    let v0 = version(a).await;
    let audited = audit(a).await.len();
    let (status, body) = put_override(a, "no_rule_here", "k", vip_override()).await;
    assert_eq!(
        (status, &body["error"], &body["field"]),
        (404, &json!("unknown_action"), &json!("action")),
        "{body}"
    );
    let long = "k".repeat(10 * 1024);
    let (status, body) = put_override(a, RULE, &long, vip_override()).await;
    assert_eq!((status, &body["field"]), (400, &json!("key")), "{body}");
    let (status, body) = put_override(a, RULE, &"k".repeat(129), vip_override()).await;
    assert_eq!(
        (status, &body["field"]),
        (400, &json!("key")),
        "129 bytes: {body}"
    );
    let invalid = json!({"algorithm": "fixed_window", "capacity": 0, "window": "1h"});
    let (status, body) = put_override(a, RULE, "k", invalid).await;
    assert_eq!(
        (status, &body["error"], &body["field"]),
        (400, &json!("invalid_rule"), &json!("capacity")),
        "{body}"
    );
    let (status, body) = put_override(
        a,
        RULE,
        "k",
        json!({"algorithm": "gcra", "capacity": 2, "window": "1h"}),
    )
    .await;
    assert_eq!((status, &body["field"]), (400, &json!("window")), "{body}");
    let mismatched =
        json!({"action": "other", "algorithm": "fixed_window", "capacity": 3, "window": "1h"});
    let (status, body) = put_override(a, RULE, "k", mismatched).await;
    assert_eq!((status, &body["field"]), (400, &json!("action")), "{body}");
    // No body, declared JSON (issue 40: undeclared is a 415 before the body is read).
    let empty = a
        .admin_req(Method::PUT, &override_path(RULE, "k"))
        .header("content-type", "application/json");
    let (status, body) =
        crate::harness::status_and_json(empty.send().await.expect("admin call")).await;
    assert_eq!(
        (status, &body["field"]),
        (400, &json!("body")),
        "no body: {body}"
    );
    let (status, body) = call(
        a,
        Method::PUT,
        "/v1/rules/bad%20action/overrides/k",
        Some(vip_override()),
    )
    .await;
    assert_eq!((status, &body["field"]), (400, &json!("action")), "{body}");
    let (status, body) = call(a, Method::DELETE, &override_path(RULE, "nobody"), None).await;
    assert_eq!(
        (status, &body["error"], &body["field"]),
        (404, &json!("not_found"), &json!("key")),
        "{body}"
    );
    let (status, body) = call(a, Method::DELETE, &override_path("no_rule_here", "k"), None).await;
    assert_eq!((status, &body["field"]), (404, &json!("action")), "{body}");
    let (status, body) = a.admin_get(&override_path(RULE, "nobody")).await;
    assert_eq!((status, &body["field"]), (404, &json!("key")), "{body}");
    let (status, body) = a.admin_get("/v1/audit?limit=0").await;
    assert_eq!((status, &body["field"]), (400, &json!("limit")), "{body}");
    assert_eq!(version(a).await, v0, "no refused change bumped the version");
    assert_eq!(
        audit(a).await.len(),
        audited,
        "no refused change was audited"
    );
    assert_eq!(
        a.admin_get("/v1/rules/reply/overrides").await.1["overrides"],
        json!([])
    );

    // The override, through A, in force on B within 1 s, for that key only.
    let (status, stored) = put_override(a, RULE, VIP, vip_override()).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(
        (&stored["action"], &stored["capacity"]),
        (&json!(RULE), &json!(20))
    );
    eventually(within, "B applies the override", || async {
        let (_, d) = b.throttle(RULE, VIP, 0).await;
        (d["algorithm"] == "fixed_window" && d["capacity"] == 20).then_some(())
    })
    .await;
    let (_, other) = b.throttle(RULE, "someone", 0).await;
    assert_eq!(
        (&other["algorithm"], &other["capacity"]),
        (&json!("gcra"), &json!(2))
    );
    for i in 0..20 {
        assert_eq!(
            b.throttle(RULE, VIP, 1).await.1["allowed"],
            true,
            "VIP request {i}"
        );
    }
    assert_eq!(
        b.throttle(RULE, VIP, 1).await.1["allowed"],
        false,
        "the 21st"
    );
    let (status, one) = b.admin_get(&override_path(RULE, VIP)).await;
    assert_eq!(
        (status, &one["capacity"], &one["description"]),
        (200, &json!(20), &json!("VIP"))
    );
    let (_, listed) = b.admin_get("/v1/rules/reply/overrides").await;
    assert_eq!(listed["overrides"][0]["key"], VIP);
    assert_eq!(listed["overrides"][0]["rule"]["algorithm"], "fixed_window");
    let (_, all) = b.admin_get("/v1/rules").await;
    assert_eq!(all["overrides"][0]["key"], VIP, "{all}");

    // Deleted through A: B gives the key the rule back within 1 s.
    let (status, _) = call(a, Method::DELETE, &override_path(RULE, VIP), None).await;
    assert_eq!(status, 204);
    eventually(within, "B drops the override", || async {
        let (_, d) = b.throttle(RULE, VIP, 0).await;
        (d["algorithm"] == "gcra" && d["capacity"] == 2).then_some(())
    })
    .await;
    assert!(b.admin_get("/v1/rules").await.1.get("overrides").is_none());

    // A reset frees a limited key (through B, by a dashboard session), whatever algorithm it
    // was limited under; a reset of a key holding nothing removes nothing.
    assert_eq!(a.throttle(RULE, "alice", 1).await.1["allowed"], true);
    assert_eq!(a.throttle(RULE, "alice", 1).await.1["allowed"], true);
    assert_eq!(a.throttle(RULE, "alice", 1).await.1["allowed"], false);
    let session = login(b).await;
    let reset = |key: &str| {
        b.http
            .delete(format!(
                "{}/v1/keys?action={RULE}&key={}",
                b.admin,
                enc(key)
            ))
            .header("cookie", format!("sluice_session={session}"))
            .send()
    };
    let r = reset("alice").await.expect("reset");
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.expect("json");
    assert_eq!(
        body,
        json!({"action": RULE, "key": "alice", "removed": ["gcra"]})
    );
    assert_eq!(
        a.throttle(RULE, "alice", 1).await.1["allowed"],
        true,
        "alice is free again"
    );
    assert_eq!(a.throttle(RULE, "alice", 0).await.1["remaining"], 1);
    let r = reset("carol").await.expect("reset");
    assert_eq!(r.json::<Value>().await.expect("json")["removed"], json!([]));
    // Bad resets: refused naming the field, nothing audited.
    let before_bad = audit(a).await.len();
    for (query, field, status) in [
        ("?key=alice", "action", 400),
        (&format!("?action={RULE}") as &str, "key", 400),
        ("?action=no_rule_here&key=a", "action", 404),
        (&format!("?action={RULE}&key=%FF") as &str, "key", 400),
    ] {
        let (s, body) = call(b, Method::DELETE, &format!("/v1/keys{query}"), None).await;
        assert_eq!(
            (s, &body["field"]),
            (status, &json!(field)),
            "{query}: {body}"
        );
    }
    assert_eq!(audit(a).await.len(), before_bad);

    // Deleting a rule takes its overrides with it.
    assert_eq!(put_override(a, RULE, "x", vip_override()).await.0, 200);
    let (status, _) = call(a, Method::DELETE, &format!("/v1/rules/{RULE}"), None).await;
    assert_eq!(status, 204);
    assert_eq!(a.put_rule(rule()).await.0, 200);
    assert_eq!(
        a.admin_get("/v1/rules/reply/overrides").await.1["overrides"],
        json!([])
    );
    eventually(within, "B has neither the old override", || async {
        let (_, d) = b.throttle(RULE, "x", 0).await;
        (d["algorithm"] == "gcra").then_some(())
    })
    .await;

    // The audit trail, read on B: every change in order, with before/after and who.
    let entries = audit(b).await;
    let got: Vec<(String, Option<String>, String)> = entries
        .iter()
        .rev()
        .map(|e| {
            (
                e["kind"].as_str().expect("kind").to_owned(),
                e["key"].as_str().map(str::to_owned),
                e["who"].as_str().expect("who").to_owned(),
            )
        })
        .collect();
    // The single --admin-token is the identity "admin".
    let token = || "admin".to_owned();
    let vip = || Some(VIP.to_owned());
    let who_session = got[3].2.clone();
    let id = who_session
        .strip_prefix("admin (session ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{who_session}"));
    assert_eq!(id.len(), 12, "{who_session}");
    // The id is the start of the session's nonce: not the cookie, which is a credential.
    assert!(session.starts_with(id), "{who_session} of {session}");
    assert!(session.len() > 40);
    assert_eq!(
        got,
        vec![
            ("rule_put".into(), None, token()),
            ("override_put".into(), vip(), token()),
            ("override_delete".into(), vip(), token()),
            (
                "key_reset".into(),
                Some("alice".into()),
                who_session.clone()
            ),
            (
                "key_reset".into(),
                Some("carol".into()),
                who_session.clone()
            ),
            ("override_put".into(), Some("x".into()), token()),
            ("rule_delete".into(), None, token()),
            ("rule_put".into(), None, token()),
        ]
    );
    let oldest_first: Vec<&Value> = entries.iter().rev().collect();
    assert_eq!(oldest_first[0]["before"], Value::Null);
    assert_eq!(oldest_first[0]["after"]["capacity"], 2);
    assert_eq!(oldest_first[1]["before"], Value::Null);
    assert_eq!(oldest_first[1]["after"]["capacity"], 20);
    assert_eq!(oldest_first[2]["before"]["algorithm"], "fixed_window");
    assert_eq!(oldest_first[2]["after"], Value::Null);
    assert_eq!(oldest_first[3]["before"], json!({"removed": ["gcra"]}));
    assert_eq!(oldest_first[3]["version"], Value::Null);
    assert_eq!(oldest_first[4]["before"], json!({"removed": []}));
    assert_eq!(oldest_first[6]["before"]["action"], RULE);
    assert_eq!(oldest_first[6]["after"], Value::Null);
    // Versions rise with each rules change; times never go backwards.
    let versions: Vec<u64> = oldest_first
        .iter()
        .filter_map(|e| e["version"].as_u64())
        .collect();
    assert_eq!(versions.len(), 6);
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    let times: Vec<u64> = oldest_first
        .iter()
        .map(|e| e["at_ms"].as_u64().expect("at_ms"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let (_, two) = b.admin_get("/v1/audit?limit=2").await;
    assert_eq!(two["entries"].as_array().expect("entries").len(), 2);
    assert_eq!(two["entries"][0], entries[0], "newest first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_resets_and_audit_on_the_memory_store() {
    let s = Sluice::start(StoreChoice::Memory).await;
    scenario(&s, &s).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_resets_and_audit_across_two_replicas_on_redis() {
    let redis = support::RedisServer::start();
    let a = Sluice::start(harness::redis(&redis.url())).await;
    let b = Sluice::start(harness::redis(&redis.url())).await;
    scenario(&a, &b).await;
    // Overrides and the audit trail never expire (like the rules hash).
    assert_eq!(put_override(&a, RULE, "kept", vip_override()).await.0, 200);
    for key in ["{sluice:rules}:overrides:reply", "{sluice:rules}:audit"] {
        assert_eq!(redis.cli(&["PTTL", key]).trim(), "-1", "{key}");
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overrides_resets_and_audit_across_two_replicas_on_a_redis_cluster() {
    let cluster = support::RedisCluster::start();
    let store = || harness::cluster(cluster.urls());
    let a = Sluice::start(store()).await;
    let b = Sluice::start(store()).await;
    scenario(&a, &b).await;
    a.stop().await;
    b.stop().await;
}

/// The audit trail keeps the newest 1,000 changes, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_keeps_the_newest_thousand() {
    let redis = support::RedisServer::start();
    for store in [StoreChoice::Memory, harness::redis(&redis.url())] {
        let s = Sluice::start(store).await;
        assert_eq!(s.put_rule(rule()).await.0, 200);
        for i in 0..1_005 {
            let key = format!("k{i}");
            let r = s
                .admin_req(Method::DELETE, &format!("/v1/keys?action={RULE}&key={key}"))
                .send()
                .await
                .expect("reset");
            assert_eq!(r.status().as_u16(), 200);
        }
        let entries = audit(&s).await;
        assert_eq!(entries.len(), 1_000);
        assert_eq!(entries[0]["key"], "k1004", "newest first");
        assert_eq!(entries[999]["key"], "k5", "the oldest kept");
        s.stop().await;
    }
}

/// The rate limit service (gRPC) looks rules up through the override too: a VIP key gets its own
/// capacity, every other key the rule's, and deleting the override gives the key the rule back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_service_applies_overrides() {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use sluice_backend::{run, Config, Listeners};
    use tokio::net::TcpListener;

    let bind = || TcpListener::bind("127.0.0.1:0");
    let (decision, admin, rls) = (
        bind().await.expect("bind"),
        bind().await.expect("bind"),
        bind().await.expect("bind"),
    );
    let admin_url = format!("http://{}", admin.local_addr().expect("addr"));
    let rls_url = format!("http://{}", rls.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(run(
        Listeners {
            decision,
            admin,
            grpc: Some(rls),
            ratelimit_http: sluice_backend::RatelimitHttp::Off,
        },
        Config::new(StoreChoice::Memory, TOKEN),
        async move {
            let _ = stopped.await;
        },
    ));
    let http = harness::client();
    eventually(Duration::from_secs(10), "sluice answers", || {
        let r = http.get(format!("{admin_url}/healthz")).send();
        async move { r.await.ok().filter(|r| r.status().is_success()) }
    })
    .await;
    let channel = tonic::transport::Endpoint::from_shared(rls_url)
        .expect("url")
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect");
    let client = RateLimitServiceClient::new(channel);
    let ask = |user: &str| {
        let mut client = client.clone();
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![crate::rls::descriptor(&[
                ("generic_key", RULE),
                ("user", user),
            ])],
            hits_addend: 0,
        };
        async move {
            let r = client.should_rate_limit(request).await.expect("rls");
            r.into_inner().overall_code == Code::Ok as i32
        }
    };
    let admin_call = |method: Method, path: String, body: Option<Value>| {
        let mut req = http
            .request(method, format!("{admin_url}{path}"))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            req = req.json(&body);
        }
        async move { req.send().await.expect("admin").status().as_u16() }
    };
    assert_eq!(
        admin_call(Method::PUT, format!("/v1/rules/{RULE}"), Some(rule())).await,
        200
    );
    let vip = json!({"algorithm": "gcra", "capacity": 5, "rate": {"count": 1, "period": "1h"}});
    assert_eq!(
        admin_call(Method::PUT, override_path(RULE, "vip"), Some(vip)).await,
        200
    );
    let mut vip_allowed = 0;
    let mut other_allowed = 0;
    for _ in 0..8 {
        vip_allowed += u32::from(ask("vip").await);
        other_allowed += u32::from(ask("other").await);
    }
    assert_eq!((vip_allowed, other_allowed), (5, 2));
    assert_eq!(
        admin_call(Method::DELETE, override_path(RULE, "vip"), None).await,
        204
    );
    // Under the rule again (gcra, capacity 2), with the state its 5 admissions left: denied.
    assert!(!ask("vip").await);
    assert_eq!(
        admin_call(
            Method::DELETE,
            format!("/v1/keys?action={RULE}&key=vip"),
            None
        )
        .await,
        200
    );
    assert!(
        ask("vip").await,
        "reset: the key starts afresh under the rule"
    );
    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(6), handle)
        .await
        .expect("stopped");
    assert!(result.expect("joined").is_ok());
}
