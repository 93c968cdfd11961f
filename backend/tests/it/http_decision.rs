//! The decision listener over the real memory store: round trips, unknown actions, every
//! bad-input case naming its field, shadow mode, probes, metrics, OpenAPI, and no admin routes.

use crate::harness;

use harness::{Sluice, TOKEN};
use serde_json::{json, Value};
use sluice_backend::StoreChoice;

async fn started() -> Sluice {
    let s = Sluice::start(StoreChoice::Memory).await;
    let (status, _) = s
        .put_rule(json!({"action": "reply", "algorithm": "gcra", "capacity": 2, "rate": {"count": 1, "period": "1h"}}))
        .await;
    assert_eq!(status, 200);
    s
}

#[tokio::test]
async fn a_throttle_round_trip_allows_then_denies_with_the_wire_fields() {
    let s = started().await;
    let (status, first) = s.throttle("reply", "laoqian", 1).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["allowed"], true);
    assert_eq!(first["algorithm"], "gcra");
    assert_eq!(first["mode"], "enforce");
    assert_eq!(first["capacity"], 2);
    assert_eq!(first["remaining"], 1);
    assert_eq!(first["retry_after_ms"], Value::Null);
    assert_eq!(first["would_deny"], false);
    assert_eq!(first["window_ms"], 2 * 3_600_000);
    let (_, second) = s.throttle("reply", "laoqian", 1).await;
    assert_eq!(second["allowed"], true);
    assert_eq!(second["remaining"], 0);
    let (status, third) = s.throttle("reply", "laoqian", 1).await;
    assert_eq!(status, 200, "a denial is a value, not an error");
    assert_eq!(third["allowed"], false);
    let retry = third["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms after a denial");
    assert!(retry > 3_500_000 && retry <= 3_600_000, "retry {retry}");
    // Another key is independent; quantity 0 peeks without spending.
    let (_, other) = s.throttle("reply", "someone-else", 0).await;
    assert_eq!(
        (other["allowed"].clone(), other["remaining"].clone()),
        (json!(true), json!(2))
    );
    s.stop().await;
}

#[tokio::test]
async fn an_action_without_a_rule_is_404_unknown_action_and_counted() {
    let s = started().await;
    let (status, body) = s.throttle("nope", "k", 1).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"], "unknown_action");
    assert!(body["message"]
        .as_str()
        .unwrap_or_default()
        .contains("nope"));
    assert!(
        s.metrics().await.contains("sluice_unknown_action_total 1"),
        "{}",
        s.metrics().await
    );
    s.stop().await;
}

#[tokio::test]
async fn every_bad_input_is_a_4xx_naming_the_field() {
    let s = started().await;
    let cases: Vec<(&str, &'static [u8], &str)> = vec![
        ("/v1/throttle", b"{not json", "body"),
        ("/v1/throttle", b"", "body"),
        ("/v1/throttle", b"[1,2]", "body"),
        ("/v1/throttle", b"\"reply\"", "body"),
        ("/v1/throttle", br#"{"key": "k"}"#, "action"),
        ("/v1/throttle", br#"{"action": "reply"}"#, "key"),
        ("/v1/throttle", br#"{"action": 5, "key": "k"}"#, "action"),
        ("/v1/throttle", br#"{"action": "reply", "key": 5}"#, "key"),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": null}"#,
            "key",
        ),
        (
            "/v1/throttle",
            br#"{"action": "re ply", "key": "k"}"#,
            "action",
        ),
        ("/v1/throttle", br#"{"action": "", "key": "k"}"#, "action"),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": "k", "quantity": -1}"#,
            "quantity",
        ),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": "k", "quantity": 2.5}"#,
            "quantity",
        ),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": "k", "quantity": "1"}"#,
            "quantity",
        ),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": "k", "quantity": 1000000001}"#,
            "quantity",
        ),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": "k", "quantity": 99999999999999999999999}"#,
            "quantity",
        ),
        (
            "/v1/throttle",
            br#"{"action": "reply", "key": "k", "extra": true}"#,
            "extra",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": 1, "count": 0, "period": 60}"#,
            "count",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": 1, "count": 1, "period": 0}"#,
            "period",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "count": 1, "period": 60}"#,
            "max_burst",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": -1, "count": 1, "period": 60}"#,
            "max_burst",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": 18446744073709551615, "count": 1, "period": 60}"#,
            "max_burst",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": 1, "count": 1, "period": 60, "quantity": -5}"#,
            "quantity",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": 1, "count": 1, "period": "60"}"#,
            "period",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": 1, "max_burst": 1, "count": 1, "period": 60}"#,
            "key",
        ),
        (
            "/v1/cl.throttle",
            br#"{"key": "k", "max_burst": 1, "count": 1, "period": 60, "x": 1}"#,
            "x",
        ),
        ("/v1/cl.throttle", b"nope", "body"),
    ];
    for (path, body, field) in cases {
        let (status, answer) = s.post_raw(path, body).await;
        let shown = String::from_utf8_lossy(body);
        assert!(
            (400..500).contains(&status),
            "{path} {shown}: status {status} {answer}"
        );
        assert_eq!(answer["field"], field, "{path} {shown}: {answer}");
        assert_eq!(
            answer["error"], "invalid_request",
            "{path} {shown}: {answer}"
        );
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains(field)),
            "{path} {shown}: {answer}"
        );
    }
    // Too large a body: 413, still JSON naming the body.
    let big = vec![b' '; 70 * 1024];
    let r = s
        .http
        .post(format!("{}/v1/throttle", s.decision))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 413);
    let answer: Value = r.json().await.expect("json");
    assert_eq!(answer["field"], "body");
    s.stop().await;
}

#[tokio::test]
async fn the_decision_listener_serves_no_admin_route() {
    let s = started().await;
    for (method, path) in [
        ("GET", "/v1/rules"),
        ("GET", "/v1/rules/reply"),
        ("PUT", "/v1/rules/reply"),
        ("DELETE", "/v1/rules/reply"),
        ("GET", "/v1/levels"),
        ("GET", "/v1/events"),
        ("POST", "/v1/session"),
        ("GET", "/"),
        ("GET", "/index.html"),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let r = s
            .http
            .request(method.clone(), format!("{}{path}", s.decision))
            .bearer_auth(TOKEN)
            .json(&json!({"action": "reply", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1s"}}))
            .send()
            .await
            .expect("request");
        assert_eq!(
            r.status().as_u16(),
            404,
            "{method} {path} on the decision listener"
        );
        let body: Value = r.json().await.expect("json 404");
        assert_eq!(body["error"], "not_found");
    }
    // A known path with the wrong method is a JSON 405.
    let r =
        crate::harness::get_with_status(&s.http, format!("{}/v1/throttle", s.decision), 405).await;
    assert_eq!(
        r.json::<Value>().await.expect("json")["error"],
        "method_not_allowed"
    );
    // The rule is untouched.
    let (_, rules) = s.admin_get("/v1/rules").await;
    assert_eq!(rules["rules"][0]["capacity"], 2);
    s.stop().await;
}

#[tokio::test]
async fn shadow_mode_allows_and_reports_would_deny_and_counts_shadow_denied() {
    let s = Sluice::start(StoreChoice::Memory).await;
    let (status, _) = s
        .put_rule(json!({"action": "like", "algorithm": "sliding_log", "capacity": 1, "window": "1h", "mode": "shadow"}))
        .await;
    assert_eq!(status, 200);
    let (_, first) = s.throttle("like", "u", 1).await;
    assert_eq!(
        (first["allowed"].clone(), first["would_deny"].clone()),
        (json!(true), json!(false))
    );
    let (_, second) = s.throttle("like", "u", 1).await;
    assert_eq!(second["allowed"], true);
    assert_eq!(second["would_deny"], true);
    assert_eq!(second["mode"], "shadow");
    let metrics = s.metrics().await;
    assert!(
        metrics.contains(r#"sluice_decisions_total{action="like",algorithm="sliding_log",outcome="shadow_denied"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(
        r#"sluice_decisions_total{action="like",algorithm="sliding_log",outcome="allowed"} 1"#
    ));
    s.stop().await;
}

#[tokio::test]
async fn metrics_have_the_promised_families_and_never_the_key() {
    let s = started().await;
    let secret_key = "user-4711-secret-key";
    for _ in 0..3 {
        s.throttle("reply", secret_key, 1).await;
    }
    let metrics = s.metrics().await;
    assert!(
        metrics.contains(
            r#"sluice_decisions_total{action="reply",algorithm="gcra",outcome="allowed"} 2"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"sluice_decisions_total{action="reply",algorithm="gcra",outcome="denied"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_decision_duration_seconds_bucket"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_decision_duration_seconds_count 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"sluice_store_errors_total{kind="timeout"} 0"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_unknown_action_total 0"),
        "{metrics}"
    );
    assert!(
        !metrics.contains(secret_key),
        "the raw key must never be a label"
    );
    // The admin listener exports the same registry.
    let admin = s
        .http
        .get(format!("{}/metrics", s.admin))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(admin.contains("sluice_decisions_total"));
    s.stop().await;
}

#[tokio::test]
async fn probes_and_the_openapi_document_are_on_both_listeners() {
    let s = started().await;
    for base in [&s.decision, &s.admin] {
        let health: Value = crate::harness::get_json(&s.http, format!("{base}/healthz")).await;
        assert_eq!(health["status"], "ok");
        let ready = crate::harness::get_with_status(&s.http, format!("{base}/readyz"), 200).await;
        let ready: Value = ready.json().await.expect("json");
        assert_eq!(ready["store"], "memory");
        let doc: Value = crate::harness::get_json(&s.http, format!("{base}/v1/openapi.json")).await;
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
        for path in [
            "/v1/throttle",
            "/v1/cl.throttle",
            "/v1/rules",
            "/v1/rules/{action}",
            "/v1/levels",
            "/v1/events",
            "/v1/session",
            "/readyz",
        ] {
            assert!(doc["paths"][path].is_object(), "openapi lacks {path}");
        }
        for schema in [
            "ThrottleRequest",
            "ThrottleResponse",
            "ClThrottleRequest",
            "ApiError",
            "Rule",
            "RulesBody",
            "LevelsBody",
        ] {
            assert!(
                doc["components"]["schemas"][schema].is_object(),
                "openapi lacks schema {schema}"
            );
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn the_openapi_schemas_list_exactly_the_fields_the_wire_types_send() {
    let s = started().await;
    let doc: Value =
        crate::harness::get_json(&s.http, format!("{}/v1/openapi.json", s.decision)).await;
    let props = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = doc["components"]["schemas"][name]["properties"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    // A leased rule and a request that asks for a lease, so the optional `lease` fields are sent.
    let leased = json!({"action": "a-leased", "algorithm": "gcra", "capacity": 100,
        "rate": {"count": 1, "period": "1h"}, "lease": {"max": 8, "ttl": "1s"}});
    assert_eq!(s.put_rule(leased).await.0, 200);
    let (_, response) = s
        .post_decision(
            "/v1/throttle",
            json!({"action": "a-leased", "key": "k", "lease": true}),
        )
        .await;
    let mut sent: Vec<String> = response
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    sent.sort();
    assert_eq!(props("ThrottleResponse"), sent);
    let (_, rules) = s.admin_get("/v1/rules").await;
    let mut rule_fields: Vec<String> = rules["rules"][0]
        .as_object()
        .expect("rule")
        .keys()
        .cloned()
        .collect();
    // A gcra rule sends neither a window algorithm's `window` nor a fixed_window's `calendar`.
    rule_fields.push("window".into());
    rule_fields.push("calendar".into());
    rule_fields.sort();
    assert_eq!(props("Rule"), rule_fields);
    let (_, levels) = s.admin_get("/v1/levels").await;
    let mut level_fields: Vec<String> = levels
        .as_object()
        .expect("levels")
        .keys()
        .cloned()
        .collect();
    level_fields.sort();
    assert_eq!(props("LevelsBody"), level_fields);
    s.stop().await;
}

#[tokio::test]
async fn cl_throttle_over_memory_answers_the_redis_cell_tuple() {
    let s = started().await;
    let (status, first) = s
        .post_decision(
            "/v1/cl.throttle",
            json!({"key": "k", "max_burst": 15, "count": 30, "period": 60}),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first, json!([0, 16, 15, -1, 2]));
    s.stop().await;
}
