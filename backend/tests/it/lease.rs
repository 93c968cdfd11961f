//! Leases over HTTP, on the memory store and a real redis-server: a leased rule grants units in
//! the answer of `POST /v1/throttle` with `lease: true`, `remaining` excludes them, two "Envoys"
//! hammering one key never get more than the capacity debited in all, grants never take more
//! than half of what is left, and nothing is granted to a caller that did not ask, for a peek, or
//! under a shadow rule. The rules file and the admin API accept `lease` and refuse bad values
//! naming `lease.max` / `lease.ttl`.
use crate::harness;
use crate::support;

use std::path::Path;

use harness::{long_rule, Sluice, ALGORITHMS};
use serde_json::{json, Value};
use sluice_backend::StoreChoice;

/// A rule of `algorithm` with capacity `capacity` whose bound over a test is exactly the
/// capacity (see [`long_rule`]), leasing up to `max` units for 1 s.
fn leased_rule(action: &str, algorithm: &str, capacity: u64, max: u64) -> Value {
    let mut rule = long_rule(action, algorithm, capacity);
    rule["lease"] = json!({"max": max, "ttl": "1s"});
    rule
}

async fn ask(s: &Sluice, body: Value) -> Value {
    let (status, answer) = s.post_decision("/v1/throttle", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

macro_rules! both_stores {
    ($case:ident, $memory:ident, $redis:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            let s = Sluice::start(StoreChoice::Memory).await;
            $case(&s).await;
            s.stop().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            let redis = support::RedisServer::start();
            let s = Sluice::start(harness::redis(&redis.url())).await;
            $case(&s).await;
            s.stop().await;
        }
    };
}

/// A grant: units beyond the request, already out of `remaining`; the metric counts them.
async fn grants_units_and_remaining_excludes_them(s: &Sluice) {
    // gcra, 100 per hour: one unit back per 36 s, so nothing drains during the test.
    let rule = json!({"action": "hot", "algorithm": "gcra", "capacity": 100,
        "rate": {"count": 100, "period": "1h"}, "lease": {"max": 8, "ttl": "1s"}});
    assert_eq!(s.put_rule(rule).await.0, 200);
    let a = ask(s, json!({"action": "hot", "key": "k", "lease": true})).await;
    assert_eq!(a["allowed"], true);
    assert_eq!(a["lease"], json!({"units": 8, "ttl_ms": 1000}), "{a}");
    assert_eq!(
        a["remaining"], 91,
        "99 left after the request, 8 of them leased"
    );
    // Without the flag (absent, then false): the plain decision, no grant.
    let a = ask(s, json!({"action": "hot", "key": "k"})).await;
    assert!(a.get("lease").is_none(), "no lease asked, none given: {a}");
    assert_eq!(a["remaining"], 90);
    let a = ask(s, json!({"action": "hot", "key": "k", "lease": false})).await;
    assert!(a.get("lease").is_none(), "{a}");
    assert_eq!(a["remaining"], 89);
    // A peek never leases.
    let a = ask(
        s,
        json!({"action": "hot", "key": "k", "quantity": 0, "lease": true}),
    )
    .await;
    assert!(a.get("lease").is_none(), "{a}");
    assert_eq!(a["remaining"], 89);
    // A quantity of 5 leaves 84: 8 more (max) leased, 76 left.
    let a = ask(
        s,
        json!({"action": "hot", "key": "k", "quantity": 5, "lease": true}),
    )
    .await;
    assert_eq!(
        (a["lease"]["units"].clone(), a["remaining"].clone()),
        (json!(8), json!(76))
    );
    let metrics = s.metrics().await;
    assert!(
        metrics.contains(r#"sluice_lease_units_granted_total{action="hot"} 16"#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("lease"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
both_stores!(
    grants_units_and_remaining_excludes_them,
    memory_grants_units_and_remaining_excludes_them,
    redis_grants_units_and_remaining_excludes_them
);

/// Shadow rules never lease: they measure what enforcing would deny, request by request.
async fn shadow_rules_do_not_lease(s: &Sluice) {
    let mut rule = leased_rule("shadowed", "fixed_window", 10, 4);
    rule["mode"] = json!("shadow");
    assert_eq!(s.put_rule(rule).await.0, 200);
    for n in 0..12u64 {
        let a = ask(s, json!({"action": "shadowed", "key": "k", "lease": true})).await;
        assert!(a.get("lease").is_none(), "{a}");
        assert_eq!(a["allowed"], true);
        assert_eq!(a["would_deny"], n >= 10, "request {n}: {a}");
    }
}
both_stores!(
    shadow_rules_do_not_lease,
    memory_shadow_rules_do_not_lease,
    redis_shadow_rules_do_not_lease
);

/// One "Envoy": admits from its grant while it lasts, else asks (with `lease: true`). Returns
/// (admitted, units debited by the backend, callouts), stopping after `denials` denials in a row.
async fn envoy(s: &Sluice, action: &str, max: u64, denials: usize) -> (u64, u64, u64) {
    let http = harness::client();
    let (mut admitted, mut debited, mut callouts) = (0u64, 0u64, 0u64);
    let (mut held, mut denied_in_a_row) = (0u64, 0usize);
    // Bounded: at most 10,000 callouts whatever happens.
    while denied_in_a_row < denials && callouts < 10_000 {
        if held > 0 {
            held -= 1;
            admitted += 1;
            continue;
        }
        callouts += 1;
        let a: Value = http
            .post(format!("{}/v1/throttle", s.decision))
            .json(&json!({"action": action, "key": "hot", "lease": true}))
            .send()
            .await
            .expect("decision request")
            .json()
            .await
            .expect("json");
        if a["allowed"] != true {
            denied_in_a_row += 1;
            continue;
        }
        denied_in_a_row = 0;
        admitted += 1;
        let units = a["lease"]["units"].as_u64().unwrap_or(0);
        let remaining = a["remaining"].as_u64().expect("remaining");
        assert!(units <= max, "{action}: {units} units > max {max}");
        // At most half of what was left after the request: k ≤ (remaining + k) / 2.
        assert!(
            units <= remaining,
            "{action}: {units} units granted, {remaining} left: more than half"
        );
        debited += 1 + units;
        held = units;
    }
    (admitted, debited, callouts)
}

/// Two Envoys hammering one key of capacity C: C units debited in all, never more, and the whole
/// quota admitted (every grant is spent here: nothing expires within the test's pace).
async fn two_envoys_never_exceed_the_capacity(s: &Sluice) {
    for algorithm in ALGORITHMS {
        let action = format!("two-{algorithm}");
        let capacity = 300;
        assert_eq!(
            s.put_rule(leased_rule(&action, algorithm, capacity, 16))
                .await
                .0,
            200
        );
        let (a, b) = tokio::join!(envoy(s, &action, 16, 5), envoy(s, &action, 16, 5));
        let admitted = a.0 + b.0;
        let debited = a.1 + b.1;
        let callouts = a.2 + b.2;
        assert_eq!(
            debited, capacity,
            "{algorithm}: the backend debited {debited} for capacity {capacity}"
        );
        assert_eq!(admitted, capacity, "{algorithm}: admitted {admitted}");
        // Leases saved callouts: far fewer than one per admission (10 are the final denials).
        assert!(
            callouts < capacity / 2,
            "{algorithm}: {callouts} callouts for {admitted} admissions"
        );
        // And the key is now empty for everyone.
        let a = ask(s, json!({"action": action, "key": "hot", "lease": true})).await;
        assert_eq!(a["allowed"], false, "{algorithm}: {a}");
    }
}
both_stores!(
    two_envoys_never_exceed_the_capacity,
    memory_two_envoys_never_exceed_the_capacity,
    redis_two_envoys_never_exceed_the_capacity
);

#[tokio::test]
async fn the_admin_api_accepts_lease_and_refuses_bad_values_naming_the_field() {
    let s = Sluice::start(StoreChoice::Memory).await;
    let rule = leased_rule("leased", "gcra", 10, 64);
    assert_eq!(s.put_rule(rule.clone()).await.0, 200);
    let (status, got) = s.admin_get("/v1/rules/leased").await;
    assert_eq!(status, 200);
    assert_eq!(got["lease"], json!({"max": 64, "ttl": "1s"}), "{got}");
    let cases = [
        (json!({"max": 0, "ttl": "1s"}), "lease.max"),
        (json!({"max": 100_001, "ttl": "1s"}), "lease.max"),
        (json!({"max": -1, "ttl": "1s"}), "lease.max"),
        (json!({"max": 8, "ttl": "61s"}), "lease.ttl"),
        (json!({"max": 8, "ttl": "0ms"}), "lease.ttl"),
        (json!({"max": 8, "ttl": "soon"}), "lease.ttl"),
        (json!({"max": 8}), "lease.ttl"),
        (json!({"max": 8, "ttl": "1s", "share": 1}), "lease.share"),
        (json!(8), "lease"),
    ];
    for (lease, field) in cases {
        let mut bad = rule.clone();
        bad["lease"] = lease.clone();
        let (status, body) = s.put_rule(bad).await;
        assert_eq!(status, 400, "lease {lease}: {body}");
        assert_eq!(body["field"], field, "lease {lease}: {body}");
    }
    let (_, got) = s.admin_get("/v1/rules/leased").await;
    assert_eq!(got["lease"]["max"], 64, "nothing refused was stored");
    s.stop().await;
}

#[test]
fn the_rules_file_accepts_lease_and_refuses_bad_values_naming_the_field() {
    let path = Path::new("rules.yaml");
    let good = "rules:\n  - action: hot\n    algorithm: gcra\n    capacity: 100\n    rate: { count: 10, period: 1s }\n    lease: { max: 64, ttl: 1s }\n";
    let rules = sluice_backend::rules_file::parse(path, good).expect("a valid rules file");
    let lease = rules[0].lease().expect("the lease was read");
    assert_eq!((lease.max, lease.ttl.millis()), (64, 1000));
    for (bad, field) in [
        ("lease: { max: 0, ttl: 1s }", "lease.max"),
        ("lease: { max: 8, ttl: 2m }", "lease.ttl"),
    ] {
        let text = good.replace("lease: { max: 64, ttl: 1s }", bad);
        let error = sluice_backend::rules_file::parse(path, &text)
            .expect_err("refused")
            .to_string();
        assert!(error.contains(field), "{bad}: {error}");
    }
}
