//! `?scope=active` on the per-action lists (`GET /v1/history`, `GET /v1/keys`, `GET /v1/levels`)
//! over HTTP, on the memory store and a real redis-server: only the actions with something to
//! show, every action without it (as before), `scope` refused naming it otherwise. And, on
//! Redis, a rule set whose per-rule reads would put more commands in flight than
//! `--max-in-flight` allows answers 200, not 503 `overloaded` (they run 64 at a time).

use crate::harness;
use crate::support::RedisServer;

use std::time::Duration;

use harness::{eventually, Sluice};
use serde_json::{json, Value};
use sluice_backend::StoreChoice;

fn actions(body: &Value) -> Vec<String> {
    body["actions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["action"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn only_what_is_active(s: &Sluice) {
    for action in ["busy", "idle", "other"] {
        let rule =
            json!({"action": action, "algorithm": "fixed_window", "capacity": 5, "window": "1h"});
        assert_eq!(s.put_rule(rule).await.0, 200);
    }
    for _ in 0..2 {
        assert_eq!(s.throttle("busy", "alice", 1).await.0, 200);
    }
    let history = eventually(
        Duration::from_secs(5),
        "the history to count busy",
        || async {
            let (status, body) = s.admin_get("/v1/history?range=5m&scope=active").await;
            (status == 200 && actions(&body) == ["busy"]).then_some(body)
        },
    )
    .await;
    assert_eq!(history["actions"][0]["totals"]["allowed"], 2);
    let (_, every) = s.admin_get("/v1/history?range=5m").await;
    assert_eq!(
        actions(&every),
        ["busy", "idle", "other"],
        "no scope: every rule"
    );
    let (_, every) = s.admin_get("/v1/history?scope=all").await;
    assert_eq!(actions(&every).len(), 3);

    let (status, alice) = s.admin_get("/v1/keys?key=alice&scope=active").await;
    assert_eq!(status, 200);
    assert_eq!(actions(&alice), ["busy"]);
    assert_eq!(alice["actions"][0]["remaining"], 3);
    let (_, bob) = s.admin_get("/v1/keys?key=bob&scope=active").await;
    assert_eq!(
        actions(&bob),
        Vec::<String>::new(),
        "bob has no state anywhere"
    );
    let (_, bob) = s.admin_get("/v1/keys?key=bob").await;
    assert_eq!(actions(&bob).len(), 3);

    eventually(
        Duration::from_secs(5),
        "the levels to show busy",
        || async {
            let (status, body) = s.admin_get("/v1/levels?scope=active").await;
            (status == 200 && actions(&body) == ["busy"]).then_some(())
        },
    )
    .await;
    let (_, every) = s.admin_get("/v1/levels").await;
    assert_eq!(actions(&every).len(), 3);

    for path in [
        "/v1/history?scope=busy",
        "/v1/keys?key=alice&scope=",
        "/v1/levels?scope=ALL",
    ] {
        let (status, body) = s.admin_get(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["field"], "scope", "{path}: {body}");
    }
}

#[tokio::test]
async fn memory_store_lists_only_what_is_active() {
    let s = Sluice::start(StoreChoice::Memory).await;
    only_what_is_active(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn redis_store_lists_only_what_is_active() {
    let redis = RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    only_what_is_active(&s).await;
    s.stop().await;
}

/// 300 rules: the key view's four reads per rule are 1,200 commands, past the default
/// `--max-in-flight` of 1,024 if they all ran at once (every one then failed with 503
/// `overloaded`, and so did decisions meanwhile).
#[tokio::test]
async fn redis_per_rule_reads_stay_within_max_in_flight() {
    let redis = RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    for i in 0..300 {
        let rule = json!({"action": format!("r{i:03}"), "algorithm": "gcra", "capacity": 5,
                          "rate": {"count": 1, "period": "1s"}});
        assert_eq!(s.put_rule(rule).await.0, 200);
    }
    assert_eq!(s.throttle("r042", "alice", 1).await.0, 200);
    for path in [
        "/v1/keys?key=alice",
        "/v1/keys?key=alice&scope=active",
        "/v1/history?range=1h",
        "/v1/top-denied",
        "/v1/levels",
    ] {
        let (status, body) = s.admin_get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, all) = s.admin_get("/v1/keys?key=alice").await;
    assert_eq!(actions(&all).len(), 300);

    // The views of what is active read the one touched action, not the 300 rules: Redis counts
    // the commands each view costs (the replica's own flushes and rule polls add a few).
    let calls = || {
        redis
            .cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|line| {
                line.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum::<u64>()
    };
    for (path, want) in [
        ("/v1/keys?key=alice&scope=active", vec!["r042"]),
        ("/v1/history?range=1h&scope=active", vec!["r042"]),
        ("/v1/levels?scope=active", vec!["r042"]),
        ("/v1/top-denied", vec![]),
    ] {
        let before = calls();
        let (status, body) = s.admin_get(path).await;
        let cost = calls() - before;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(actions(&body), want, "{path}");
        assert!(
            cost < 40,
            "{path} cost {cost} Redis commands for one active action of 300"
        );
    }
    let before = calls();
    s.admin_get("/v1/keys?key=alice").await;
    let every = calls() - before;
    assert!(
        every >= 300,
        "scope=all still reads every rule: {every} commands"
    );
    s.stop().await;
}
