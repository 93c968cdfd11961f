//! `POST /v1/commit` over HTTP and over the exchange (unary `Call`), on the memory store and a
//! real redis-server: a reservation of 8 committed at 3 gives 5 back on every algorithm, a
//! retried id answers the first numbers and changes nothing, a debit past the capacity is
//! overshoot (never denied), the metrics count each, refusals name the field, an unknown action
//! is 404, and the OpenAPI document lists it.
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sluice_backend::grpc::exchange::ExchangeCodec;
use sluice_backend::StoreChoice;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest, CALL_PATH};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{self, long_rule, ALGORITHMS};
use crate::support;

type Rig = GrpcRig<Channel>;

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(since.as_millis()).expect("ms")
}

fn commit_body(action: &str, key: &str, reserved: u64, actual: u64, id: &str, at: u64) -> Value {
    json!({"action": action, "key": key, "reserved": reserved, "actual": actual, "id": id,
           "reserved_at_ms": at})
}

/// `POST /v1/commit` through the exchange's unary `Call` (answered by the decision router).
async fn over_exchange(rig: &Rig, body: &Value) -> (u32, Value) {
    exchange_call(rig, 1, "/v1/commit", body).await
}

fn counter(metrics: &str, name: &str, action: Option<&str>) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.starts_with(name)
                && action.is_none_or(|a| l.contains(&format!("action=\"{a}\"")))
                && !l.starts_with('#')
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn throttle(rig: &Rig, action: &str, key: &str, quantity: u64) -> Value {
    let body = json!({"action": action, "key": key, "quantity": quantity});
    let (status, answer) = rig
        .http_post("/v1/throttle", body.to_string().into_bytes())
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A throttle request that reserves `quantity` under `id` (recorded in flight for its commit).
async fn reserve(rig: &Rig, action: &str, key: &str, quantity: u64, id: &str) -> Value {
    let body = json!({"action": action, "key": key, "quantity": quantity, "reservation_id": id});
    let (status, answer) = rig
        .http_post("/v1/throttle", body.to_string().into_bytes())
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

async fn commit_http(rig: &Rig, body: &Value) -> (u32, Value) {
    rig.http_post("/v1/commit", body.to_string().into_bytes())
        .await
}

async fn refunds_retries_and_overshoot(rig: &Rig) {
    for algorithm in ALGORITHMS {
        let action = format!("c_{algorithm}");
        rig.put_rule(long_rule(&action, algorithm, 10)).await;
        assert_eq!(
            reserve(rig, &action, "k", 8, "req-1").await["allowed"],
            true
        );
        // When the reservation's answer arrived, as the filter will send it.
        let at = now_ms();
        let body = commit_body(&action, "k", 8, 3, "req-1", at);
        let (status, first) = commit_http(rig, &body).await;
        assert_eq!(status, 200, "{algorithm}: {first}");
        assert_eq!(
            (&first["refunded"], &first["debited"], &first["overshoot"]),
            (&json!(5), &json!(0), &json!(0)),
            "{algorithm}: {first}"
        );
        assert_eq!(first["duplicate"], false);
        assert_eq!(first["remaining"], 7, "{algorithm}: {first}");
        // The retry, over the exchange this time: the same numbers, nothing changed.
        let (status, again) = over_exchange(rig, &body).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["duplicate"], true, "{algorithm}: {again}");
        assert_eq!(again["refunded"], 5);
        assert_eq!(throttle(rig, &action, "k", 0).await["remaining"], 7);
        // A debit past the capacity, claiming a reservation of 1 that was never recorded: the
        // claim counts for nothing, all 10 are debited, of which 7 fit.
        let body = commit_body(&action, "k", 1, 10, "req-2", now_ms());
        let (status, debit) = over_exchange(rig, &body).await;
        assert_eq!(status, 200, "{debit}");
        assert_eq!(
            (&debit["debited"], &debit["overshoot"], &debit["remaining"]),
            (&json!(10), &json!(3), &json!(0)),
            "{algorithm}: {debit}"
        );
        let metrics = rig.metrics().await;
        let refunded = counter(
            &metrics,
            "sluice_commit_refunded_units_total",
            Some(&action),
        );
        let overshoot = counter(
            &metrics,
            "sluice_commit_overshoot_units_total",
            Some(&action),
        );
        assert_eq!((refunded, overshoot), (5, 3), "{algorithm}: {metrics}");
        let unrecorded = counter(&metrics, "sluice_commits_unrecorded_total", Some(&action));
        assert_eq!(unrecorded, 1, "{algorithm}: {metrics}");
    }
    let metrics = rig.metrics().await;
    assert_eq!(
        counter(&metrics, "sluice_commit_duplicates_total", None),
        6,
        "{metrics}"
    );
}

/// Issue 40: a commit credits only what the decision that reserved recorded. On a spent
/// fixed_window of 5 an hour, a commit of a fresh id claiming `reserved: 5, actual: 0` used to
/// answer `refunded: 5` and let three more decisions through; it must give back nothing (over
/// HTTP and over the exchange). A commit of a recorded reservation gives back at most its
/// recorded units, whatever it claims, and only once.
async fn a_commit_credits_only_what_was_reserved(rig: &Rig) {
    rig.put_rule(
        json!({"action": "forged", "algorithm": "fixed_window", "capacity": 5,
                        "window": "1h"}),
    )
    .await;
    for i in 0..5 {
        assert_eq!(
            throttle(rig, "forged", "u", 1).await["allowed"],
            true,
            "{i}"
        );
    }
    assert_eq!(throttle(rig, "forged", "u", 1).await["allowed"], false);
    for (n, via_exchange) in [(1, false), (2, true)] {
        let body = commit_body("forged", "u", 5, 0, &format!("fresh-{n}"), now_ms());
        let (status, done) = if via_exchange {
            over_exchange(rig, &body).await
        } else {
            commit_http(rig, &body).await
        };
        assert_eq!(status, 200, "{done}");
        assert_eq!(
            (&done["refunded"], &done["debited"], &done["remaining"]),
            (&json!(0), &json!(0), &json!(0)),
            "a forged commit credited units: {done}"
        );
        assert_eq!(throttle(rig, "forged", "u", 1).await["allowed"], false);
    }
    // Nor does one named as the filter's lease returns are, on a key that granted no lease.
    let body = commit_body("forged", "u", 5, 0, "lease-00000000000000ff", now_ms());
    let (_, done) = commit_http(rig, &body).await;
    assert_eq!(
        done["refunded"], 0,
        "a forged lease return credited units: {done}"
    );
    assert_eq!(throttle(rig, "forged", "u", 1).await["allowed"], false);
    // A recorded reservation of 2 claimed as 5: 2 come back, once.
    rig.put_rule(
        json!({"action": "claimed", "algorithm": "fixed_window", "capacity": 5,
                        "window": "1h"}),
    )
    .await;
    throttle(rig, "claimed", "u", 3).await;
    assert_eq!(
        reserve(rig, "claimed", "u", 2, "real").await["allowed"],
        true
    );
    let body = commit_body("claimed", "u", 5, 0, "real", now_ms());
    let (_, done) = commit_http(rig, &body).await;
    assert_eq!(
        (&done["refunded"], &done["remaining"]),
        (&json!(2), &json!(2)),
        "{done}"
    );
    let (_, again) = over_exchange(rig, &body).await;
    assert_eq!(
        (&again["duplicate"], &again["refunded"]),
        (&json!(true), &json!(2))
    );
    assert_eq!(throttle(rig, "claimed", "u", 0).await["remaining"], 2);
}

async fn refusals_name_the_field(rig: &Rig) {
    rig.put_rule(long_rule("c_known", "gcra", 5)).await;
    let good = commit_body("c_known", "k", 2, 1, "r", now_ms());
    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = good.clone();
        body.as_object_mut().expect("object").remove(field);
        body
    };
    let cases = [
        (with("action", json!("no such")), 400, "action"),
        (with("reserved", json!(1_000_000_001u64)), 400, "reserved"),
        (with("actual", json!(1_000_000_001u64)), 400, "actual"),
        (with("id", json!("")), 400, "id"),
        (with("id", json!("a{b}")), 400, "id"),
        (with("id", json!("x".repeat(129))), 400, "id"),
        (with("timeout_ms", json!(0)), 400, "timeout_ms"),
        (with("extra", json!(1)), 400, "extra"),
        (without("reserved_at_ms"), 400, "reserved_at_ms"),
        (without("id"), 400, "id"),
        (with("action", json!("c_missing")), 404, "action"),
    ];
    for (body, status, field) in cases {
        let (got, answer) = commit_http(rig, &body).await;
        assert_eq!(got, status, "{body} -> {answer}");
        if status == 400 {
            assert_eq!(answer["field"], field, "{body} -> {answer}");
        } else {
            assert_eq!(answer["error"], "unknown_action", "{answer}");
        }
    }
    // Nothing was changed by any refused commit.
    assert_eq!(throttle(rig, "c_known", "k", 0).await["remaining"], 5);
}

async fn openapi_lists_commit(rig: &Rig) {
    let doc: Value =
        crate::harness::get_json(&rig.http, format!("{}/v1/openapi.json", rig.admin)).await;
    assert!(doc["paths"]["/v1/commit"]["post"].is_object(), "{doc}");
    assert!(doc["components"]["schemas"]["CommitRequest"].is_object());
    assert!(doc["components"]["schemas"]["CommitResponse"].is_object());
    let keys = &doc["components"]["schemas"]["KeyBudget"]["properties"];
    assert!(
        keys["reserved_in_flight"].is_object() && keys["overshoot"].is_object(),
        "{doc}"
    );
    let throttle = &doc["components"]["schemas"]["ThrottleRequest"]["properties"];
    assert!(throttle["reservation_id"].is_object());
}

/// The key view's `budget` of `key` under `action` (`GET /v1/keys`).
async fn key_budget(rig: &Rig, key: &str, action: &str) -> Value {
    let view: Value =
        crate::harness::admin_get_json(&rig.http, format!("{}/v1/keys?key={key}", rig.admin)).await;
    let actions = view["actions"].as_array().expect("actions").clone();
    let state = actions.into_iter().find(|a| a["action"] == action);
    state.expect("the action")["budget"].clone()
}

/// A reservation with a `reservation_id` (over the exchange, as the filter sends it) is in flight
/// in the key view until its commit (over HTTP) removes it; the commit's overshoot stays; a
/// reservation without an id is decided the same and is not in flight; a bad id is refused.
async fn in_flight_until_committed(rig: &Rig) {
    rig.put_rule(
        json!({"action": "inflight", "algorithm": "token_bucket", "capacity": 1000,
                        "rate": {"count": 1000, "period": "1h"}}),
    )
    .await;
    let reserve = json!({"action": "inflight", "key": "acme", "quantity": 600,
                         "reservation_id": "w1:1"});
    let (status, answer) = over_exchange_at(rig, "/v1/throttle", &reserve).await;
    assert_eq!(
        (status, answer["allowed"].as_bool()),
        (200, Some(true)),
        "{answer}"
    );
    throttle(rig, "inflight", "acme", 100).await;
    let budget = key_budget(rig, "acme", "inflight").await;
    assert_eq!(
        (
            budget["reserved_in_flight"].as_u64(),
            budget["reservations_in_flight"].as_u64()
        ),
        (Some(600), Some(1)),
        "{budget}"
    );
    // Committed at 900: 300 beyond the reservation, 0 of it over the budget (700 + 300 = 1000).
    let body = commit_body("inflight", "acme", 600, 900, "w1:1", now_ms());
    let (status, done) = commit_http(rig, &body).await;
    assert_eq!(
        (status, done["debited"].as_u64()),
        (200, Some(300)),
        "{done}"
    );
    let budget = key_budget(rig, "acme", "inflight").await;
    assert_eq!(budget["reserved_in_flight"].as_u64(), Some(0), "{budget}");
    assert_eq!(budget["debited"].as_u64(), Some(300), "{budget}");
    // Another reservation overshoots: 50 reserved on a full bucket is denied, so reserve 0.
    let (_, _) = over_exchange_at(
        rig,
        "/v1/throttle",
        &json!({"action": "inflight",
        "key": "acme", "quantity": 0, "reservation_id": "w1:2"}),
    )
    .await;
    let (_, done) = commit_http(
        rig,
        &commit_body("inflight", "acme", 0, 40, "w1:2", now_ms()),
    )
    .await;
    assert_eq!(done["overshoot"].as_u64(), Some(40), "{done}");
    let budget = key_budget(rig, "acme", "inflight").await;
    assert_eq!(
        (budget["overshoot"].as_u64(), budget["debited"].as_u64()),
        (Some(40), Some(340)),
        "{budget}"
    );
    assert!(budget["overshoot_until_ms"].as_u64().is_some(), "{budget}");
    // The 40 are carried as debt (1,040 of 1,000 spent; 3.6 s per unit, so none drains here):
    // nothing is left, in the key view and for the next request.
    assert_eq!(budget["debt"].as_u64(), Some(40), "{budget}");
    assert_eq!(throttle(rig, "inflight", "acme", 1).await["allowed"], false);
    // The retry removes and adds nothing.
    commit_http(
        rig,
        &commit_body("inflight", "acme", 0, 40, "w1:2", now_ms()),
    )
    .await;
    assert_eq!(key_budget(rig, "acme", "inflight").await, budget);
    // A bad id is refused naming the field, as is one with a lease.
    for bad in [
        json!({"action": "inflight", "key": "k", "reservation_id": "a b"}),
        json!({"action": "inflight", "key": "k", "reservation_id": "x", "lease": true}),
    ] {
        let (status, e) = rig
            .http_post("/v1/throttle", bad.to_string().into_bytes())
            .await;
        assert_eq!(
            (status, e["field"].as_str()),
            (400, Some("reservation_id")),
            "{e}"
        );
    }
}

/// A decision-API call through the exchange's unary `Call` at `path`.
async fn over_exchange_at(rig: &Rig, path: &str, body: &Value) -> (u32, Value) {
    exchange_call(rig, 2, path, body).await
}

/// One unary `Call` of the exchange: request `id` for `path` with `body`; (status, JSON body).
async fn exchange_call(rig: &Rig, id: u64, path: &str, body: &Value) -> (u32, Value) {
    let mut grpc = tonic::client::Grpc::new(rig.client.clone());
    grpc.ready().await.expect("ready");
    let request = ExchangeRequest {
        id,
        path: path.to_owned(),
        body: body.to_string().into_bytes(),
    };
    let reply: ExchangeReply = grpc
        .unary(
            tonic::Request::new(request),
            PathAndQuery::from_static(CALL_PATH),
            ExchangeCodec::<ExchangeRequest, ExchangeReply>::default(),
        )
        .await
        .expect("call")
        .into_inner();
    (
        reply.status,
        serde_json::from_slice(&reply.body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_commit_over_http_and_exchange() {
    let rig = Rig::start(StoreChoice::Memory).await;
    refunds_retries_and_overshoot(&rig).await;
    a_commit_credits_only_what_was_reserved(&rig).await;
    refusals_name_the_field(&rig).await;
    openapi_lists_commit(&rig).await;
    in_flight_until_committed(&rig).await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_commit_over_http_and_exchange() {
    let redis = support::RedisServer::start();
    let rig = Rig::start(harness::redis(&redis.url())).await;
    refunds_retries_and_overshoot(&rig).await;
    a_commit_credits_only_what_was_reserved(&rig).await;
    refusals_name_the_field(&rig).await;
    // The id's mark shares the state's hash tag, with its TTL.
    let ttl: i64 = redis
        .cli(&["PTTL", "sluice:{c_gcra:k}:gcra:commit:req-1"])
        .trim()
        .parse()
        .expect("a PTTL");
    assert!(ttl > 3_500_000 && ttl <= 3_600_000, "{ttl}");
    in_flight_until_committed(&rig).await;
    // The budget record lives in the state's hash tag (one Cluster slot).
    let kind = redis.cli(&["TYPE", "sluice:{inflight:acme}:token_bucket:overshoot"]);
    assert_eq!(kind.trim(), "hash");
    rig.stop().await;
}
