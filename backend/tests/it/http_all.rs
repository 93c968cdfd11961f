//! `POST /v1/throttle/all` over HTTP, on the memory store and a real redis-server: three limits
//! where the third denies (the answer names it, the others keep their counts), per-check results,
//! metrics per check, refusals naming the field, and the OpenAPI document.
use crate::harness;
use crate::support;

use harness::{long_rule, Sluice};
use serde_json::{json, Value};
use sluice_backend::StoreChoice;

async fn all(s: &Sluice, body: Value) -> (u16, Value) {
    s.post_decision("/v1/throttle/all", body).await
}

fn three(user: &str) -> Value {
    json!({"checks": [
        {"action": "m_user", "key": user},
        {"action": "m_ip", "key": "10.0.0.1"},
        {"action": "m_all", "key": ""},
    ]})
}

async fn third_denies_and_names_itself(s: &Sluice) {
    for (action, capacity) in [("m_user", 5), ("m_ip", 100), ("m_all", 3)] {
        assert_eq!(
            s.put_rule(long_rule(action, "fixed_window", capacity))
                .await
                .0,
            200
        );
    }
    // Three users pass; each spends one of the global 3.
    for user in ["a", "b", "c"] {
        let (status, body) = all(s, three(user)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["allowed"], true, "{body}");
        assert!(body.get("denied").is_none());
        assert_eq!(body["results"].as_array().map(Vec::len), Some(3));
    }
    let (_, body) = all(s, three("a")).await;
    assert_eq!(body["allowed"], false, "{body}");
    assert_eq!(body["denied"], json!({"index": 2, "action": "m_all"}));
    assert_eq!(body["results"][2]["allowed"], false);
    // The others were not consumed: user a has 4 of 5, the IP 97 of 100.
    assert_eq!(body["results"][0]["remaining"], 4, "{body}");
    assert_eq!(body["results"][1]["remaining"], 97, "{body}");
    // One decision per check of an allowed request, only the denying one of a denied request.
    let metrics = s.metrics().await;
    let count = |action: &str, outcome: &str| -> u64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("sluice_decisions_total")
                    && l.contains(&format!("action=\"{action}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("m_user", "allowed"), 3, "{metrics}");
    assert_eq!(count("m_user", "denied"), 0);
    assert_eq!(count("m_all", "denied"), 1);
    assert_eq!(s.throttle("m_user", "a", 0).await.1["remaining"], 4);
    assert_eq!(s.throttle("m_ip", "10.0.0.1", 0).await.1["remaining"], 97);
    // The single-check form is unchanged beside it.
    let (status, one) = s.throttle("m_ip", "10.0.0.2", 1).await;
    assert_eq!(status, 200);
    assert_eq!(one["remaining"], 99);
}

async fn refusals_name_the_field(s: &Sluice) {
    assert_eq!(s.put_rule(long_rule("m_known", "gcra", 5)).await.0, 200);
    let cases = [
        (json!({"checks": []}), 400, "checks"),
        (
            json!({"checks": [{"action": "m_known", "key": "k"}, {"action": "no such", "key": "k"}]}),
            400,
            "checks[1].action",
        ),
        (
            json!({"checks": [{"action": "m_known", "key": "k", "quantity": 1_000_000_001u64}]}),
            400,
            "checks[0].quantity",
        ),
        (
            json!({"checks": [{"action": "m_known", "key": "k", "lease": true}]}),
            400,
            "checks[0].lease",
        ),
        (
            json!({"checks": [{"action": "m_known", "key": "k"}, {"action": "m_missing", "key": "k"}]}),
            404,
            "checks[1].action",
        ),
        (
            json!({"checks": vec![json!({"action": "m_known", "key": "k"}); 9]}),
            400,
            "checks",
        ),
    ];
    for (body, status, field) in cases {
        let (got, answer) = all(s, body.clone()).await;
        assert_eq!(got, status, "{body} -> {answer}");
        assert_eq!(answer["field"], field, "{body} -> {answer}");
    }
    // Nothing was consumed by any refused request.
    assert_eq!(s.throttle("m_known", "k", 0).await.1["remaining"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_throttle_all_over_http() {
    let s = Sluice::start(StoreChoice::Memory).await;
    third_denies_and_names_itself(&s).await;
    refusals_name_the_field(&s).await;
    let (status, doc) = s.post_decision("/v1/throttle/all", json!({})).await;
    assert_eq!((status, doc["field"].clone()), (400, json!("checks")));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_throttle_all_over_http() {
    let redis = support::RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    third_denies_and_names_itself(&s).await;
    refusals_name_the_field(&s).await;
    s.stop().await;
}
