//! The incident views over HTTP, on the memory store and a real redis-server: `POST /v1/report`
//! (metrics, history, refusals naming the field), `GET /v1/history` (every step, zeros, totals,
//! both ranges), `GET /v1/keys` (each rule's state for one key without consuming anything, odd
//! and long keys), `GET /v1/top-denied`, and two replicas over one Redis answering the same.

use crate::harness;
use crate::support::RedisServer;

use std::time::Duration;

use harness::{eventually, Sluice, TOKEN};
use serde_json::{json, Value};
use sluice_backend::StoreChoice;
use sluice_core::limits::MAX_REPORT_ACTIONS;

/// Percent-encodes every byte that is not unreserved (as `encodeURIComponent` does).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Sends raw bytes to a listener and returns the answer's status.
async fn raw_status(base: &str, request: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {:.200}", text))
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn rules(s: &Sluice) {
    for rule in [
        json!({"action": "post", "algorithm": "sliding_log", "capacity": 2, "window": "1h"}),
        json!({"action": "dry", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1h"}, "mode": "shadow"}),
    ] {
        assert_eq!(s.put_rule(rule).await.0, 200);
    }
}

fn action<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["actions"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["action"] == name))
        .unwrap_or(&Value::Null)
}

/// Decisions and a report, then the history, metrics, key view and top denied they produce.
async fn the_views_add_up(s: &Sluice) {
    rules(s).await;
    for (act, key, allowed) in [
        ("post", "alice", true),
        ("post", "mallory", true),
        ("post", "mallory", true),
        ("post", "mallory", false),
        ("post", "mallory", false),
        ("post", "alice", true),
        ("post", "alice", false),
        ("dry", "bob", true),
        ("dry", "bob", true), // a shadow would-denial: Envoy lets it through
    ] {
        let (status, body) = s.throttle(act, key, 1).await;
        assert_eq!(
            (status, body["allowed"] == allowed),
            (200, true),
            "{act} {key}: {body}"
        );
    }
    let report = json!({"actions": [
        {"action": "post", "leased": 5, "cached_denied": 4, "failed_timeout": 2, "failed_error": 1, "passed_unchecked": 3},
        {"action": "ghost", "cached_denied": 9, "failed_error": 1, "passed_unchecked": 1},
        {"action": "dry"}
    ], "reporter": "worker-0", "seq": 1});
    // Sent twice, as a filter does when the first answer was lost: the copy counts nowhere.
    for _ in 0..2 {
        let r = s.post_report(&report).await;
        assert_eq!(r.text().await.expect("body"), "");
    }

    // Prometheus, at once: under the action's name, or "(unknown)" for an action without a rule.
    let m = s.metrics().await;
    for (series, want) in [
        (
            r#"sluice_filter_decisions_total{action="post",outcome="leased"}"#,
            5.0,
        ),
        (
            r#"sluice_filter_decisions_total{action="post",outcome="cached_denied"}"#,
            4.0,
        ),
        (
            r#"sluice_filter_decisions_total{action="post",outcome="passed_unchecked"}"#,
            3.0,
        ),
        (
            r#"sluice_filter_failures_total{action="post",reason="timeout"}"#,
            2.0,
        ),
        (
            r#"sluice_filter_failures_total{action="post",reason="error"}"#,
            1.0,
        ),
        (
            r#"sluice_filter_decisions_total{action="(unknown)",outcome="cached_denied"}"#,
            9.0,
        ),
        (
            r#"sluice_filter_decisions_total{action="(unknown)",outcome="passed_unchecked"}"#,
            1.0,
        ),
    ] {
        assert_eq!(metric(&m, series), Some(want), "{series} in\n{m}");
    }
    assert!(
        !m.contains("ghost"),
        "an action without a rule is never a label"
    );

    // The history, within a flush: every step, zeros included, totals that add up.
    let body = eventually(
        Duration::from_secs(3),
        "history holds the report",
        || async {
            let (status, body) = s.admin_get("/v1/history?range=5m").await;
            assert_eq!(status, 200, "{body}");
            (action(&body, "post")["totals"]["leased"] == 5
                && action(&body, "post")["totals"]["denied"] == 3)
                .then_some(body)
        },
    )
    .await;
    assert_eq!(
        (body["step_ms"].as_u64(), body["range"].as_str()),
        (Some(10_000), Some("5m"))
    );
    let names: Vec<&str> = body["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter_map(|a| a["action"].as_str())
        .collect();
    assert_eq!(
        names,
        ["dry", "post"],
        "actions with rules, sorted; none for ghost"
    );
    let post = action(&body, "post");
    let totals = &post["totals"];
    assert_eq!(
        [
            &totals["allowed"],
            &totals["denied"],
            &totals["leased"],
            &totals["cached_denied"],
            &totals["failed"],
            &totals["passed_unchecked"],
            &totals["at_ms"]
        ],
        [
            &json!(4),
            &json!(3),
            &json!(5),
            &json!(4),
            &json!(3),
            &json!(3),
            &json!(0)
        ]
    );
    let dry = action(&body, "dry");
    assert_eq!(
        (
            dry["totals"]["allowed"].as_u64(),
            dry["totals"]["denied"].as_u64()
        ),
        (Some(2), Some(0))
    );
    let steps = post["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 30);
    let at = body["at_ms"].as_u64().expect("at_ms");
    assert_eq!(
        steps[29]["at_ms"].as_u64(),
        Some(at - at % 10_000),
        "the last step holds now"
    );
    for pair in steps.windows(2) {
        assert_eq!(
            pair[1]["at_ms"].as_u64().unwrap() - pair[0]["at_ms"].as_u64().unwrap(),
            10_000
        );
    }
    let sum: u64 = steps.iter().map(|x| x["allowed"].as_u64().unwrap()).sum();
    assert_eq!(sum, 4);
    assert!(
        steps
            .iter()
            .filter(|x| x["allowed"] == 0 && x["denied"] == 0 && x["leased"] == 0)
            .count()
            >= 28
    );
    let seen = post["last_seen_ms"].as_u64().expect("last seen");
    assert!(seen <= at && at - seen < 60_000, "{seen} vs {at}");

    let (status, hour) = s.admin_get("/v1/history").await;
    assert_eq!((status, hour["range"].as_str()), (200, Some("1h")));
    assert_eq!(
        action(&hour, "post")["steps"].as_array().map(Vec::len),
        Some(360)
    );
    assert_eq!(action(&hour, "post")["totals"]["leased"], 5);
    for bad in ["range=2h", "range=", "range=5m&range=1h", "range=%FF"] {
        let (status, body) = s.admin_get(&format!("/v1/history?{bad}")).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (400, Some("range")),
            "{bad}: {body}"
        );
    }

    // One key on every action, consuming nothing.
    for _ in 0..3 {
        let (status, view) = s.admin_get("/v1/keys?key=alice").await;
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["key"], "alice");
        let post = action(&view, "post");
        assert_eq!(
            (post["level"].as_f64(), post["remaining"].as_u64()),
            (Some(2.0), Some(0))
        );
        assert_eq!(
            (
                post["capacity"].as_u64(),
                post["algorithm"].as_str(),
                post["mode"].as_str()
            ),
            (Some(2), Some("sliding_log"), Some("enforce"))
        );
        let retry = post["retry_after_ms"]
            .as_u64()
            .expect("a retry-after while full");
        assert!(retry > 0 && retry <= 3_600_000, "{retry}");
        assert!(post["last_seen_ms"].as_u64().is_some(), "{view}");
        let dry = action(&view, "dry");
        assert_eq!(
            (dry["level"].as_f64(), dry["remaining"].as_u64()),
            (Some(0.0), Some(1))
        );
        assert_eq!(
            (
                dry["retry_after_ms"].is_null(),
                dry["last_seen_ms"].is_null()
            ),
            (true, true)
        );
    }
    let (_, d) = s.throttle("dry", "alice", 1).await;
    assert_eq!(
        (d["allowed"].as_bool(), d["would_deny"].as_bool()),
        (Some(true), Some(false)),
        "the peeks took nothing: {d}"
    );

    // A key with an override is shown under the override, not the action's rule.
    let r = s
        .admin_req(reqwest::Method::PUT, "/v1/rules/post/overrides/vip")
        .json(&json!({"algorithm": "sliding_log", "capacity": 20, "window": "1h"}))
        .send()
        .await
        .expect("put override");
    assert_eq!(r.status().as_u16(), 200);
    let (_, view) = s.admin_get("/v1/keys?key=vip").await;
    assert_eq!(
        action(&view, "post")["capacity"].as_u64(),
        Some(20),
        "{view}"
    );
    let (_, view) = s.admin_get("/v1/keys?key=alice").await;
    assert_eq!(
        action(&view, "post")["capacity"].as_u64(),
        Some(2),
        "{view}"
    );
    // So does the live view, next to keys under the action's rule.
    s.throttle("post", "vip", 1).await;
    let capacity_of = |levels: &Value, key: &str| {
        action(levels, "post")["keys"]
            .as_array()
            .and_then(|keys| keys.iter().find(|k| k["key"] == key))
            .and_then(|k| k["capacity"].as_u64())
    };
    eventually(Duration::from_secs(5), "vip in the live view", || async {
        let (_, levels) = s.admin_get("/v1/levels?action=post").await;
        (capacity_of(&levels, "vip") == Some(20) && capacity_of(&levels, "alice") == Some(2))
            .then_some(())
    })
    .await;

    // Keys of any text: empty, odd bytes, 10 KB (looked up exactly as the decision API stores it).
    let long = "x".repeat(10_000);
    let longest = "z".repeat(60_000);
    for key in [
        "",
        "{tag}",
        "a b+c%2F/é\u{0}\"<img>",
        "sha256:0000",
        long.as_str(),
        longest.as_str(),
    ] {
        let (status, body) = s.throttle("post", key, 1).await;
        assert_eq!(status, 200, "{body}");
        let (status, view) = s.admin_get(&format!("/v1/keys?key={}", encode(key))).await;
        assert_eq!(status, 200, "{key:?}: {view}");
        assert_eq!(view["key"].as_str(), Some(key));
        let post = action(&view, "post");
        assert_eq!(
            (post["level"].as_f64(), post["remaining"].as_u64()),
            (Some(1.0), Some(1)),
            "{key:?}: {view}"
        );
    }
    for (query, why) in [
        ("".to_owned(), "missing"),
        ("?other=1".to_owned(), "missing"),
        ("?key=%FF".to_owned(), "not UTF-8"),
        ("?key=%E2%9C".to_owned(), "truncated UTF-8"),
        ("?key=%zz".to_owned(), "bad escape"),
        ("?key=a&key=b".to_owned(), "twice"),
    ] {
        let (status, body) = s.admin_get(&format!("/v1/keys{query}")).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (400, Some("key")),
            "{why}: {body}"
        );
    }

    // A URI over 64 KiB is refused by the HTTP server itself (it cannot name a key).
    let huge = format!(
        "GET /v1/keys?key={} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n",
        "y".repeat(70 * 1024)
    );
    let status = raw_status(&s.admin, huge.as_bytes()).await;
    assert!((400..500).contains(&status), "{status}");

    // The keys denied most (shadow would-denials are not denials).
    let (status, top) = s.admin_get("/v1/top-denied").await;
    assert_eq!(status, 200, "{top}");
    assert_eq!(top["span_ms"], 300_000);
    let names: Vec<&str> = top["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .filter_map(|a| a["action"].as_str())
        .collect();
    assert_eq!(names, ["post"], "{top}");
    assert_eq!(
        action(&top, "post")["keys"],
        json!([{"key": "mallory", "denied": 2}, {"key": "alice", "denied": 1}])
    );
}

/// Every refusal of a report names its field; nothing of a refused report is counted.
async fn bad_reports_are_refused(s: &Sluice) {
    let post = |body: String| {
        s.http
            .post(format!("{}/v1/report", s.decision))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let many: Vec<Value> = (0..=MAX_REPORT_ACTIONS)
        .map(|_| json!({"action": "post", "leased": 1}))
        .collect();
    for (body, field) in [
        ("{".to_owned(), "body"),
        ("[]".to_owned(), "body"),
        ("{}".to_owned(), "actions"),
        (
            r#"{"actions": [{"action": "bad action", "leased": 1}]}"#.to_owned(),
            "actions[0].action",
        ),
        (
            r#"{"actions": [{"action": "post"}, {"action": ""}]}"#.to_owned(),
            "actions[1].action",
        ),
        (
            r#"{"actions": [{"action": "post", "leased": -1}]}"#.to_owned(),
            "actions[0].leased",
        ),
        (
            r#"{"actions": [{"action": "post", "leased": 1.5}]}"#.to_owned(),
            "actions[0].leased",
        ),
        (
            r#"{"actions": [{"action": "post", "failed_timeout": 1, "passed_unchecked": 2}]}"#
                .to_owned(),
            "actions[0].passed_unchecked",
        ),
        (
            r#"{"actions": [{"action": "post", "extra": 1}]}"#.to_owned(),
            "actions[0].extra",
        ),
        (json!({"actions": many}).to_string(), "actions"),
    ] {
        let r = post(body.clone()).await.expect("report");
        let status = r.status().as_u16();
        let answer: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (status, answer["field"].as_str()),
            (400, Some(field)),
            "{body:.80}: {answer}"
        );
        assert_eq!(answer["error"], "invalid_request");
    }
    let big = format!(
        r#"{{"actions": [{{"action": "post"}}], "pad": "{}"}}"#,
        "x".repeat(70 * 1024)
    );
    let r = post(big).await.expect("report");
    assert_eq!(r.status().as_u16(), 413);
    let m = s.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"sluice_filter_decisions_total{action="post",outcome="leased"}"#
        ),
        None,
        "nothing refused was counted"
    );
    // The report is the filter's: not on the admin listener; the views are the admin's.
    let r = s
        .http
        .post(format!("{}/v1/report", s.admin))
        .bearer_auth(TOKEN)
        .json(&json!({"actions": []}))
        .send()
        .await
        .expect("admin");
    assert!(matches!(r.status().as_u16(), 404 | 405), "{}", r.status());
    for path in ["/v1/history", "/v1/keys?key=a", "/v1/top-denied"] {
        let r = s
            .http
            .get(format!("{}{path}", s.admin))
            .send()
            .await
            .expect("admin");
        assert_eq!(r.status().as_u16(), 401, "{path}");
        let r = s
            .http
            .get(format!("{}{path}", s.decision))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("decision");
        assert_eq!(r.status().as_u16(), 404, "{path} on the decision listener");
    }
}

/// Decisions sent with a `decision_id`, then a report naming some as given up on (their answers
/// reached the filter after its timeout): those are withdrawn from the history and counted as
/// withdrawn, once, however many copies of the report arrive.
async fn a_report_withdraws_what_its_sender_gave_up_on(s: &Sluice) {
    rules(s).await;
    for (id, act, key, allowed) in [
        (11, "post", "wally", true),
        (12, "post", "wanda", true),
        (13, "post", "wanda", true),
        (14, "post", "wanda", false),
        (21, "dry", "walt", true),
        (22, "dry", "walt", true), // a shadow would-denial
    ] {
        let r = s
            .http
            .post(format!("{}/v1/throttle", s.decision))
            .json(&json!({"action": act, "key": key, "decision_id": id}))
            .send()
            .await
            .expect("throttle");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["allowed"], allowed, "{id}: {body}");
    }
    let totals = |body: &Value, name: &str, field: &str| {
        action(body, name)["totals"][field].as_u64().unwrap_or(0)
    };
    eventually(
        Duration::from_secs(3),
        "the decisions in the history",
        || async {
            let (_, body) = s.admin_get("/v1/history?range=5m").await;
            (totals(&body, "post", "allowed") == 3
                && totals(&body, "post", "denied") == 1
                && totals(&body, "dry", "allowed") == 2)
                .then_some(())
        },
    )
    .await;
    let report = json!({"actions": [
        {"action": "post", "failed_timeout": 2, "passed_unchecked": 2},
        {"action": "dry", "failed_timeout": 1, "passed_unchecked": 1}
    ], "reporter": "worker-7", "seq": 1, "gave_up": [11, 14, 22, 999]});
    for _ in 0..2 {
        s.post_report(&report).await;
    }
    let m = s.metrics().await;
    for (series, want) in [
        (
            r#"sluice_decisions_withdrawn_total{action="post",outcome="allowed"}"#,
            Some(1.0),
        ),
        (
            r#"sluice_decisions_withdrawn_total{action="post",outcome="denied"}"#,
            Some(1.0),
        ),
        (
            r#"sluice_decisions_withdrawn_total{action="dry",outcome="shadow_denied"}"#,
            Some(1.0),
        ),
        (r#"sluice_late_debits_total{action="post"}"#, Some(1.0)),
        (r#"sluice_late_debits_total{action="dry"}"#, None),
    ] {
        assert_eq!(metric(&m, series), want, "{series} in\n{m}");
    }
    // What Envoy did, once each: 2 allowed + 2 passed unchecked of "post" (the denial nobody saw
    // is gone), 1 + 1 of "dry".
    eventually(
        Duration::from_secs(3),
        "the withdrawals in the history",
        || async {
            let (_, body) = s.admin_get("/v1/history?range=5m").await;
            let got = [
                totals(&body, "post", "allowed"),
                totals(&body, "post", "denied"),
                totals(&body, "post", "passed_unchecked"),
                totals(&body, "dry", "allowed"),
                totals(&body, "dry", "passed_unchecked"),
            ];
            (got == [2, 0, 2, 1, 1]).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn memory_store_views_add_up() {
    let s = Sluice::start(StoreChoice::Memory).await;
    bad_reports_are_refused(&s).await;
    the_views_add_up(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn redis_store_views_add_up() {
    let redis = RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    bad_reports_are_refused(&s).await;
    the_views_add_up(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn memory_store_withdraws_what_a_report_gave_up_on() {
    let s = Sluice::start(StoreChoice::Memory).await;
    a_report_withdraws_what_its_sender_gave_up_on(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn redis_store_withdraws_what_a_report_gave_up_on() {
    let redis = RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    a_report_withdraws_what_its_sender_gave_up_on(&s).await;
    s.stop().await;
}

/// Two replicas over one Redis: decisions through one, a report to the other, and both answer
/// the same history and top denied.
#[tokio::test]
async fn replicas_over_one_redis_show_the_same() {
    let redis = RedisServer::start();
    let a = Sluice::start(harness::redis(&redis.url())).await;
    let b = Sluice::start(harness::redis(&redis.url())).await;
    assert_eq!(
        a.put_rule(
            json!({"action": "post", "algorithm": "sliding_log", "capacity": 1, "window": "1h"})
        )
        .await
        .0,
        200
    );
    eventually(Duration::from_secs(2), "replica b has the rule", || async {
        (b.throttle("post", "first", 1).await.0 == 200).then_some(())
    })
    .await;
    for _ in 0..3 {
        a.throttle("post", "mallory", 1).await;
    }
    let (status, _) = b
        .post_decision(
            "/v1/report",
            json!({"actions": [{"action": "post", "cached_denied": 7}]}),
        )
        .await;
    assert_eq!(status, 204);
    let want = json!({"at_ms": 0, "allowed": 2, "leased": 0, "denied": 2, "cached_denied": 7, "passed_unchecked": 0, "failed": 0});
    for s in [&a, &b] {
        eventually(
            Duration::from_secs(3),
            "both replicas see every count",
            || async {
                let (_, body) = s.admin_get("/v1/history?range=5m").await;
                (action(&body, "post")["totals"] == want).then_some(())
            },
        )
        .await;
        let (_, top) = s.admin_get("/v1/top-denied").await;
        assert_eq!(
            action(&top, "post")["keys"],
            json!([{"key": "mallory", "denied": 2}])
        );
    }
    a.stop().await;
    b.stop().await;
}
