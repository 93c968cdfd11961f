//! Two replicas (two `run` instances) on one real redis-server: a rule written through A is in
//! force on B within 1 s; traffic through A shows in B's levels within 1 s and the levels fall
//! once traffic stops; B's SSE stream carries the rule change and level snapshots.

use crate::harness;
use crate::support;

use std::time::{Duration, Instant};

use harness::{eventually, Sluice, TOKEN};
use serde_json::{json, Value};

async fn pair() -> (support::RedisServer, Sluice, Sluice) {
    let redis = support::RedisServer::start();
    let a = Sluice::start(harness::redis(&redis.url())).await;
    let b = Sluice::start(harness::redis(&redis.url())).await;
    (redis, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_written_through_a_is_in_force_on_b_within_one_second() {
    let (_redis, a, b) = pair().await;
    assert_eq!(b.throttle("post", "u", 0).await.0, 404);

    let rule = json!({"action": "post", "algorithm": "gcra", "capacity": 3, "rate": {"count": 1, "period": "1h"}});
    assert_eq!(a.put_rule(rule).await.0, 200);
    eventually(
        Duration::from_secs(1),
        "B uses the rule written through A",
        || async {
            let (status, body) = b.throttle("post", "u", 0).await;
            (status == 200 && body["capacity"] == 3).then_some(())
        },
    )
    .await;

    // A change, then a delete, travel the same way.
    let changed =
        json!({"action": "post", "algorithm": "fixed_window", "capacity": 7, "window": "1h"});
    assert_eq!(a.put_rule(changed).await.0, 200);
    eventually(
        Duration::from_secs(1),
        "B uses the changed rule",
        || async {
            let (_, body) = b.throttle("post", "u", 0).await;
            (body["algorithm"] == "fixed_window" && body["capacity"] == 7).then_some(())
        },
    )
    .await;
    let r = a
        .admin_req(reqwest::Method::DELETE, "/v1/rules/post")
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 204);
    eventually(
        Duration::from_secs(1),
        "B forgets the deleted rule",
        || async { (b.throttle("post", "u", 0).await.0 == 404).then_some(()) },
    )
    .await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_through_a_shows_in_b_levels_within_one_second_and_then_drains() {
    let (_redis, a, b) = pair().await;
    // Drains fully in 1 s: capacity 10 leaking 10 per second.
    let rule = json!({"action": "reply", "algorithm": "leaky_bucket", "capacity": 10, "rate": {"count": 10, "period": "1s"}});
    assert_eq!(a.put_rule(rule).await.0, 200);
    eventually(Duration::from_secs(1), "B has the rule", || async {
        (b.throttle("reply", "x", 0).await.0 == 200).then_some(())
    })
    .await;

    for _ in 0..10 {
        assert_eq!(a.throttle("reply", "alice", 1).await.0, 200);
    }
    let sent = Instant::now();
    let seen = eventually(
        Duration::from_secs(1),
        "A's traffic in B's levels",
        || async {
            let (status, body) = b.admin_get("/v1/levels?action=reply").await;
            assert_eq!(status, 200);
            let keys = body["actions"][0]["keys"].as_array()?.clone();
            let alice = keys.into_iter().find(|k| k["key"] == "alice")?;
            (alice["level"].as_f64()? > 0.5).then_some(alice)
        },
    )
    .await;
    assert!(sent.elapsed() <= Duration::from_secs(1));
    let first_level = seen["level"].as_f64().expect("level");
    assert!(first_level <= 10.0, "{seen}");

    // No more traffic: the level falls to (nearly) empty, read through B.
    let drained = eventually(Duration::from_secs(3), "alice's level drains", || async {
        let (_, body) = b.admin_get("/v1/levels?action=reply").await;
        let alice = body["actions"][0]["keys"]
            .as_array()?
            .iter()
            .find(|k| k["key"] == "alice")?
            .clone();
        (alice["remaining"].as_u64()? == 10).then_some(alice)
    })
    .await;
    let last = drained["level"].as_f64().expect("level");
    assert!(last < 1.0 && last < first_level, "{drained}");
    a.stop().await;
    b.stop().await;
}

/// Reads SSE events (name, data) from a streaming response until `want` returns Some or the
/// deadline passes.
async fn next_event<T>(
    response: &mut reqwest::Response,
    buffer: &mut String,
    within: Duration,
    mut want: impl FnMut(&str, &Value) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut name = "message".to_owned();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if data.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&data).expect("SSE data is JSON");
            if let Some(found) = want(&name, &value) {
                return found;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "wanted SSE event not seen within {within:?}"
        );
        match tokio::time::timeout(left, response.chunk()).await {
            Ok(Ok(Some(chunk))) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) => panic!("SSE stream ended"),
            Ok(Err(e)) => panic!("SSE stream failed: {e}"),
            Err(_) => panic!("wanted SSE event not seen within {within:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_event_stream_carries_rules_on_connect_and_change_and_level_snapshots() {
    let (_redis, a, b) = pair().await;
    let first = json!({"action": "like", "algorithm": "token_bucket", "capacity": 20, "rate": {"count": 2, "period": "1s"}});
    assert_eq!(a.put_rule(first).await.0, 200);
    eventually(Duration::from_secs(1), "B has the rule", || async {
        (b.throttle("like", "x", 0).await.0 == 200).then_some(())
    })
    .await;

    let mut events = b
        .http
        .get(format!("{}/v1/events", b.admin))
        .bearer_auth(TOKEN)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("events");
    assert_eq!(events.status().as_u16(), 200);
    assert!(events
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream")));
    let mut buffer = String::new();
    let on_connect = next_event(
        &mut events,
        &mut buffer,
        Duration::from_secs(2),
        |name, data| (name == "rules").then(|| data.clone()),
    )
    .await;
    assert_eq!(on_connect["rules"][0]["action"], "like");
    let version = on_connect["version"].as_u64().expect("version");

    let second =
        json!({"action": "login", "algorithm": "sliding_window", "capacity": 5, "window": "1m"});
    assert_eq!(a.put_rule(second).await.0, 200);
    let changed = next_event(
        &mut events,
        &mut buffer,
        Duration::from_secs(2),
        |name, data| {
            (name == "rules" && data["rules"].as_array().map_or(0, Vec::len) == 2)
                .then(|| data.clone())
        },
    )
    .await;
    assert!(changed["version"].as_u64().expect("version") > version);

    for _ in 0..3 {
        a.throttle("like", "dave", 1).await;
    }
    let levels = next_event(
        &mut events,
        &mut buffer,
        Duration::from_secs(3),
        |name, data| {
            let like = data["actions"]
                .as_array()?
                .iter()
                .find(|x| x["action"] == "like")?
                .clone();
            (name == "levels" && like["keys"].as_array()?.iter().any(|k| k["key"] == "dave"))
                .then_some(data.clone())
        },
    )
    .await;
    assert!(levels["at_ms"].as_u64().is_some());

    // Graceful shutdown ends the stream (it does not hold the server open).
    b.stop().await;
    let end = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match events.chunk().await {
                Ok(Some(_)) => continue,
                _ => return,
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the SSE stream ends at shutdown");
    a.stop().await;
}
