//! The RLQS ledger shown: `GET /v1/rlqs/shares` (each Envoy's share of a key and the rule's
//! whole bucket, the sums, filters, bad input named, the admin token), the RLQS line of
//! `/readyz` and `sluice_rlqs_rebalances_total`, against an in-process sluice with envoy-types'
//! client standing in for two Envoys' quota filters (the helpers of [`crate::rlqs`]).

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, TOKEN};
use crate::rlqs::{bucket, rate_for, rig_with_rule, usage, Quota, Rig};

/// `GET {path}` on the admin listener with the token: (status, body).
async fn admin_get(rig: &Rig, path: &str) -> (u16, Value) {
    let r = rig
        .http
        .get(format!("{}{path}", rig.admin))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Two Envoys holding `user`/`alice` (the second joined, so the first was lowered: bursts are
/// split equally, rates by demand).
async fn two_holders(rig: &Rig) -> (Quota, Quota) {
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut first = Quota::open(rig).await;
    first.report("edge", vec![usage(alice.clone(), 0)]).await;
    assert_eq!(rate_for(&first.next().await.unwrap(), &alice), Some(10));
    let mut second = Quota::open(rig).await;
    second.report("edge", vec![usage(alice.clone(), 0)]).await;
    assert!(
        rate_for(&first.next().await.unwrap(), &alice).is_some(),
        "the first lowered"
    );
    assert!(rate_for(&second.next().await.unwrap(), &alice).is_some());
    // The first's next report: 5 admitted from its share (renewed).
    first.report("edge", vec![usage(alice.clone(), 5)]).await;
    assert!(rate_for(&first.next().await.unwrap(), &alice).is_some());
    (first, second)
}

#[tokio::test]
async fn shares_show_each_envoys_share_the_rules_bucket_and_the_sums() {
    let rig = rig_with_rule().await;
    let (_first, _second) = two_holders(&rig).await;

    let (status, body) = admin_get(&rig, "/v1/rlqs/shares?key=alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["streams"], 2, "{body}");
    assert_eq!(
        (body["keys_total"].clone(), body["truncated"].clone()),
        (json!(1), json!(false))
    );
    let key = &body["keys"][0];
    assert_eq!(
        (key["action"].as_str(), key["key"].as_str()),
        (Some("user"), Some("alice"))
    );
    assert_eq!(
        key["total"],
        json!({"max_tokens": 20, "tokens_per_fill": 10, "fill_interval_s": 1}),
        "the rule's whole token bucket"
    );
    assert_eq!(key["holders_total"], 2);
    let holders = key["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2);
    for h in holders {
        assert!(h["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{h}");
        assert_eq!(h["domain"], "edge", "{h}");
        assert_eq!(h["open"], true, "{h}");
        let ttl = h["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 0 && ttl <= 12_000, "{h}");
    }
    // The first was paid the rule's whole burst at grant, lowered to half of it when the second
    // joined (bursts are split equally), then reported 5 allowed (within what was paid).
    let first = &holders[0];
    assert!(first["paid"].as_u64().unwrap() >= 20, "{first}");
    assert_eq!(
        (first["allowed"].as_u64(), first["post_debited"].as_u64()),
        (Some(5), Some(0)),
        "{first}"
    );
    assert!(
        first["share"]["max_tokens"].as_u64().unwrap() <= 10,
        "{first}"
    );
    // The shares add up within the rule's bucket.
    let sum = &key["sum"];
    let shares: Vec<(u64, u64)> = holders
        .iter()
        .map(|h| {
            let s = &h["share"];
            (
                s["max_tokens"].as_u64().unwrap_or(0),
                s["tokens_per_fill"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let (b, n) = shares.iter().fold((0, 0), |(b, n), (x, y)| (b + x, n + y));
    assert_eq!(
        (sum["max_tokens"].as_u64(), sum["tokens_per_fill"].as_u64()),
        (Some(b), Some(n))
    );
    assert!(b <= 20 && n <= 10, "{sum}");
    assert_eq!(sum["allowed"], 5);

    // Filters are exact; another action's filter lists nothing.
    let (_, all) = admin_get(&rig, "/v1/rlqs/shares").await;
    assert_eq!(all["keys_total"], 1);
    let (_, none) = admin_get(&rig, "/v1/rlqs/shares?action=reply&key=alice").await;
    assert_eq!(
        (none["keys_total"].clone(), none["keys"].clone()),
        (json!(0), json!([]))
    );
    let (_, both) = admin_get(&rig, "/v1/rlqs/shares?action=user&key=alice").await;
    assert_eq!(both["keys_total"], 1);

    // The counts on /readyz (both listeners, no token), and the rebalance counted.
    for base in [&rig.admin, &rig.decision] {
        let ready: Value = crate::harness::get_json(&rig.http, format!("{base}/readyz")).await;
        assert_eq!(ready["status"], "ready");
        assert_eq!(
            ready["rlqs"],
            json!({"streams": 2, "buckets": 2}),
            "{ready}"
        );
    }
    let metrics = rig.metrics().await;
    let lowered = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"sluice_rlqs_rebalances_total{action="user",kind="lowered"} "#)
        })
        .unwrap_or_else(|| panic!("no lowered rebalance counted:\n{metrics}"));
    assert!(lowered.parse::<u64>().unwrap() >= 1, "{lowered}");
    rig.stop().await;
}

#[tokio::test]
async fn a_closed_streams_share_shows_closed_until_its_ttl() {
    let rig = rig_with_rule().await;
    let (first, _second) = two_holders(&rig).await;
    drop(first);
    let closed = eventually(
        Duration::from_secs(5),
        "the first stream shows closed",
        || {
            let rig = &rig;
            async move {
                let (_, body) = admin_get(rig, "/v1/rlqs/shares?action=user").await;
                let holders = body["keys"][0]["holders"].as_array()?.clone();
                (body["streams"] == 1 && holders.len() == 2 && holders[0]["open"] == false)
                    .then_some(holders[0].clone())
            }
        },
    )
    .await;
    // Still held (that Envoy may still enforce it, disconnected), its TTL running out.
    assert!(closed["share"].is_object(), "{closed}");
    assert!(closed["ttl_ms"].as_u64().unwrap() < 12_000, "{closed}");
    rig.stop().await;
}

#[tokio::test]
async fn bad_input_is_named_and_the_token_is_required() {
    let rig = rig_with_rule().await;
    for (query, field) in [
        ("?acton=user", "acton"),
        ("?action=no%20space", "action"),
        ("?key=a&key=b", "key"),
        ("?key=%FF", "key"),
    ] {
        let (status, body) = admin_get(&rig, &format!("/v1/rlqs/shares{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"], "invalid_request", "{body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    let r = rig
        .http
        .get(format!("{}/v1/rlqs/shares", rig.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // Admin only: the decision listener has no such route.
    let r = rig
        .http
        .get(format!("{}/v1/rlqs/shares", rig.decision))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    rig.stop().await;
}

#[tokio::test]
async fn the_openapi_document_lists_the_route_and_exactly_the_fields_sent() {
    let rig = rig_with_rule().await;
    let (_first, _second) = two_holders(&rig).await;
    let doc: Value =
        crate::harness::get_json(&rig.http, format!("{}/v1/openapi.json", rig.admin)).await;
    assert!(
        doc["paths"]["/v1/rlqs/shares"]["get"].is_object(),
        "openapi lacks the route"
    );
    let props = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = doc["components"]["schemas"][name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("openapi lacks schema {name}"))
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    };
    let fields = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let (_, body) = admin_get(&rig, "/v1/rlqs/shares").await;
    let key = &body["keys"][0];
    assert_eq!(props("RlqsSharesBody"), fields(&body));
    assert_eq!(props("RlqsKeyShares"), fields(key));
    assert_eq!(props("RlqsHolder"), fields(&key["holders"][0]));
    assert_eq!(props("RlqsBucket"), fields(&key["total"]));
    assert_eq!(props("RlqsSum"), fields(&key["sum"]));
    let ready: Value = crate::harness::get_json(&rig.http, format!("{}/readyz", rig.admin)).await;
    assert_eq!(props("RlqsReady"), fields(&ready["rlqs"]));
    rig.stop().await;
}

#[tokio::test]
async fn with_the_grpc_listener_off_there_is_nothing_to_show() {
    let s = crate::harness::Sluice::start(sluice_backend::StoreChoice::Memory).await;
    let ready: Value = crate::harness::get_json(&s.http, format!("{}/readyz", s.admin)).await;
    assert_eq!(ready["status"], "ready");
    assert!(ready.get("rlqs").is_none(), "no RLQS line: {ready}");
    let (status, body) = s.admin_get("/v1/rlqs/shares").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["streams"].clone(), body["keys"].clone()),
        (json!(0), json!([]))
    );
    s.stop().await;
}
