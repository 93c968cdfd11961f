//! The storage conformance suite over both stores: the memory store and a real redis-server
//! (one per test, on a free loopback port), plus Redis-only failure cases: an unreachable or slow
//! server, shedding past the in-flight bound, settings refused before any connection, and a
//! script that fails inside Redis reported as that script's error, not as an outage.
#![cfg(test)]
use crate::debt_suite::budget_debt;
use crate::store_suite;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{
    ConnectError, RedisConfig, RedisField, RedisStore, RedisTarget,
};
use sluice_backend::store::DecisionStore;
use sluice_backend::store::RuleStore;
use sluice_backend::store::{HealthStore, ManualClock, Store, StoreError};
use store_suite::*;
use support::RedisServer;

async fn redis_store(server: &RedisServer) -> RedisStore {
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.timeout = Duration::from_secs(5);
    RedisStore::connect(config)
        .await
        .expect("connect to the test redis-server")
}

/// A case run on each store; `clocked`: each store decides at the time of a manual clock the
/// case sets (it starts at [`B`]).
macro_rules! both_stores {
    ($case:ident, $memory:ident, $redis:ident) => {
        #[tokio::test]
        async fn $memory() {
            $case(&MemoryStore::new()).await;
        }

        #[tokio::test]
        async fn $redis() {
            let server = RedisServer::start();
            $case(&redis_store(&server).await).await;
        }
    };
    (clocked $case:ident, $memory:ident, $redis:ident) => {
        #[tokio::test]
        async fn $memory() {
            let clock = ManualClock::new(B);
            $case(&MemoryStore::new().with_clock(clock.clone()), &clock).await;
        }

        #[tokio::test]
        async fn $redis() {
            let server = RedisServer::start();
            let clock = ManualClock::new(B);
            let store = redis_store(&server).await.with_clock(clock.clone());
            $case(&store, &clock).await;
        }
    };
}

both_stores!(clocked tables, memory_tables, redis_tables);
both_stores!(
    clocked cell_sequences,
    memory_cell_sequences_match_redis_cell,
    redis_cell_sequences_match_redis_cell
);
both_stores!(
    clocked awkward_subjects_are_independent,
    memory_awkward_subjects_are_independent,
    redis_awkward_subjects_are_independent
);
both_stores!(
    clocked peek_many_reports_without_writing,
    memory_peek_many_reports_without_writing,
    redis_peek_many_reports_without_writing
);
both_stores!(
    rules_round_trip,
    memory_rules_round_trip,
    redis_rules_round_trip
);
both_stores!(clocked budget_figures, memory_budget_figures, redis_budget_figures);
both_stores!(clocked budget_reset, memory_budget_reset, redis_budget_reset);
both_stores!(
    clocked budget_debt,
    memory_budget_debt_is_carried,
    redis_budget_debt_is_carried
);
both_stores!(
    activity_round_trip,
    memory_activity_round_trip,
    redis_activity_round_trip
);
both_stores!(
    touched_round_trip,
    memory_touched_round_trip,
    redis_touched_round_trip
);

both_stores!(clocked commit_tables, memory_commit_tables, redis_commit_tables);
both_stores!(
    clocked lease_returns_are_bounded_by_the_grants,
    memory_lease_returns_are_bounded_by_the_grants,
    redis_lease_returns_are_bounded_by_the_grants
);
both_stores!(
    clocked commit_receipts_are_bounded,
    memory_commit_receipts_are_bounded,
    redis_commit_receipts_are_bounded
);

async fn commit_randomized(store: &dyn Store, clock: &ManualClock) {
    commit_randomized_against_core(store, clock, 0xc0, 40).await;
}
both_stores!(
    clocked commit_randomized,
    memory_commit_matches_core_on_random_sequences,
    redis_commit_lua_matches_core_on_random_sequences
);

/// Seed and size of the randomized comparison; override with SLUICE_CONFORMANCE_SEED and
/// SLUICE_CONFORMANCE_SEQUENCES to explore further.
async fn randomized(store: &dyn Store, clock: &ManualClock) {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let sequences = env("SLUICE_CONFORMANCE_SEQUENCES", 60) as usize;
    randomized_against_core(
        store,
        clock,
        env("SLUICE_CONFORMANCE_SEED", 0x5111ce),
        sequences,
        40,
    )
    .await;
}
both_stores!(
    clocked randomized,
    memory_matches_core_on_random_sequences,
    redis_lua_matches_core_on_random_sequences
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_concurrency_admits_exactly_the_bound() {
    let clock = ManualClock::new(B);
    let store = MemoryStore::new().with_clock(clock.clone());
    concurrency_admits_exactly_the_bound(Arc::new(store), &clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_concurrency_admits_exactly_the_bound() {
    let server = RedisServer::start();
    let clock = ManualClock::new(B);
    let store = redis_store(&server).await.with_clock(clock.clone());
    concurrency_admits_exactly_the_bound(Arc::new(store), &clock).await;
}

#[tokio::test]
async fn redis_rules_version_is_none_on_an_empty_redis() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    assert_eq!(store.rules_version().await.expect("version"), None);
    let snap = store.load_rules().await.expect("load");
    assert_eq!((snap.version, snap.rules.len()), (None, 0));
    let v = store
        .put_rule(&rule(
            r#"{"action":"x","algorithm":"gcra","capacity":1,"rate":{"count":1,"period":"1s"}}"#,
        ))
        .await;
    assert_eq!(v.expect("put"), 1);
    server.cli(&["FLUSHALL"]);
    assert_eq!(
        store.rules_version().await.expect("version"),
        None,
        "a wiped Redis has no version"
    );
}

#[tokio::test]
async fn redis_wrong_type_is_a_clear_error_and_the_next_request_works() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    let gcra =
        rule(r#"{"action":"w","algorithm":"gcra","capacity":2,"rate":{"count":1,"period":"1s"}}"#);
    let leaky = rule(
        r#"{"action":"w","algorithm":"leaky_bucket","capacity":2,"rate":{"count":1,"period":"1s"}}"#,
    );
    let log = rule(r#"{"action":"w","algorithm":"sliding_log","capacity":2,"window":"1s"}"#);
    server.cli(&["LPUSH", "sluice:{w:bad}:gcra", "x"]);
    server.cli(&["SET", "sluice:{w:bad}:leaky_bucket", "x"]);
    server.cli(&["SET", "sluice:{w:bad}:sliding_log", "x"]);
    server.cli(&["SET", "sluice:{w:garbage}:gcra", "not-a-time"]);
    server.cli(&[
        "HSET",
        "sluice:{w:garbage}:leaky_bucket",
        "level",
        "1.5e3",
        "last",
        "0",
    ]);
    for (rule, key, redis_key) in [
        (&gcra, "bad", "sluice:{w:bad}:gcra"),
        (&leaky, "bad", "sluice:{w:bad}:leaky_bucket"),
        (&log, "bad", "sluice:{w:bad}:sliding_log"),
        (&gcra, "garbage", "sluice:{w:garbage}:gcra"),
        (&leaky, "garbage", "sluice:{w:garbage}:leaky_bucket"),
    ] {
        match err(store.throttle(rule, key, 1).await) {
            StoreError::WrongType { key, detail } => {
                assert_eq!(key, redis_key);
                assert!(detail.contains("WRONGTYPE"), "{detail}");
            }
            other => panic!("{redis_key}: expected WrongType, got {other:?}"),
        }
        assert!(
            store
                .throttle(rule, "good", 1)
                .await
                .expect("a good key still works")
                .allowed
        );
    }
    let cell = sluice_core::cell::CellArgs::new(1, 1, 1, 1).expect("args");
    server.cli(&["HSET", "sluice:cell:{c}", "a", "b"]);
    assert!(matches!(
        err(store.cell_throttle("c", cell).await),
        StoreError::WrongType { .. }
    ));
    store.ping().await.expect("the server is still up");
}

#[tokio::test]
async fn redis_unreachable_is_unavailable() {
    let port = support::free_port();
    let mut config = RedisConfig::new(RedisTarget::Single(format!("redis://127.0.0.1:{port}/")));
    config.timeout = Duration::from_millis(500);
    match RedisStore::connect(config).await {
        Err(ConnectError::Store(StoreError::Unavailable(_))) => {}
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("connected to a closed port"),
    }
}

#[tokio::test]
async fn redis_commands_beyond_max_in_flight_are_shed_at_once() {
    let server = RedisServer::start();
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.max_in_flight = 1;
    config.timeout = Duration::from_secs(5);
    let store = RedisStore::connect(config).await.expect("connect");
    let r = rule(
        r#"{"action":"o","algorithm":"gcra","capacity":100,"rate":{"count":1,"period":"1s"}}"#,
    );
    let results = futures::future::join_all((0..8).map(|_| store.throttle(&r, "k", 1))).await;
    let shed = results
        .iter()
        .filter(|r| matches!(r, Err(StoreError::Overloaded(1))))
        .count();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!((ok, shed), (1, 7), "{results:?}");
}

#[tokio::test]
async fn redis_slow_server_times_out() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.timeout = Duration::from_millis(200);
    let store = RedisStore::connect(config).await.expect("connect");
    store.ping().await.expect("ping");
    let port = server.port;
    let sleeper = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "DEBUG",
                "SLEEP",
                "1.5",
            ])
            .output()
            .expect("redis-cli")
    });
    // Wait (bounded) until the server is busy sleeping: a PING through the store times out.
    let r = rule(
        r#"{"action":"slow","algorithm":"gcra","capacity":1,"rate":{"count":1,"period":"1s"}}"#,
    );
    let mut saw_timeout = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        match store.throttle(&r, "k", 0).await {
            Err(StoreError::Timeout(200)) => {
                saw_timeout = true;
                break;
            }
            // Not asleep yet (redis-cli is still starting): poll again shortly.
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(other) => panic!("expected a timeout, got {other:?}"),
        }
    }
    sleeper.join().expect("sleeper");
    assert!(saw_timeout, "no timeout while the server slept");
}

#[tokio::test]
async fn memory_idle_keys_are_evicted() {
    let clock = ManualClock::new(B);
    let store = MemoryStore::new().with_clock(clock.clone());
    let r = rule(r#"{"action":"e","algorithm":"fixed_window","capacity":5,"window":"1s"}"#);
    for i in 0..5_000u64 {
        clock.set(B + i);
        store
            .throttle(&r, &format!("k{i}"), 1)
            .await
            .expect("memory");
    }
    assert!(
        store.state_count() >= 4_000,
        "entries stay while live: {}",
        store.state_count()
    );
    // Much later, traffic on other keys sweeps the idle ones away shard by shard.
    for i in 0..20_000u64 {
        clock.set(B + 3_600 * 1_000_000_000 + i);
        store
            .throttle(&r, &format!("new{}", i % 10), 1)
            .await
            .expect("memory");
    }
    assert!(
        store.state_count() <= 100,
        "idle keys remain: {}",
        store.state_count()
    );
}

#[tokio::test]
async fn bad_settings_are_refused_before_any_connection_naming_the_field() {
    // Nothing listens on this port: a connection attempt would be Unavailable, so a Config
    // error shows that the setting was refused before any was made.
    let closed = format!("redis://127.0.0.1:{}/", support::free_port());
    let single = || RedisConfig::new(RedisTarget::Single(closed.clone()));
    let mut cases: Vec<(&str, RedisConfig, RedisField)> = Vec::new();
    let mut c = single();
    c.key_prefix = "tenant{a}".into();
    cases.push(("a prefix with braces", c, RedisField::KeyPrefix));
    let mut c = single();
    c.key_prefix = String::new();
    cases.push(("an empty prefix", c, RedisField::KeyPrefix));
    let mut c = single();
    c.max_in_flight = 0;
    cases.push(("no command in flight", c, RedisField::MaxInFlight));
    let mut c = single();
    c.timeout = Duration::ZERO;
    cases.push(("a zero timeout", c, RedisField::Timeout));
    cases.push((
        "a URL that does not parse",
        RedisConfig::new(RedisTarget::Single("127.0.0.1:6379".into())),
        RedisField::Url,
    ));
    cases.push((
        "a bad cluster node URL",
        RedisConfig::new(RedisTarget::Cluster(vec![
            closed.clone(),
            "redis://127.0.0.1:notaport".into(),
        ])),
        RedisField::ClusterUrls,
    ));
    cases.push((
        "a cluster without nodes",
        RedisConfig::new(RedisTarget::Cluster(Vec::new())),
        RedisField::ClusterUrls,
    ));
    for (what, config, field) in cases {
        match RedisStore::connect(config).await {
            Err(ConnectError::Config(e)) => assert_eq!(e.field(), field, "{what}: {e}"),
            Err(other) => panic!("{what}: expected a configuration error, got {other:?}"),
            Ok(_) => panic!("{what}: accepted"),
        }
    }
}

/// A rule of each algorithm, named after it.
fn one_rule_per_algorithm() -> Vec<sluice_core::Rule> {
    crate::store_suite::ALGORITHMS
        .iter()
        .map(|a| {
            let limit = if matches!(*a, "gcra" | "leaky_bucket" | "token_bucket") {
                r#""rate":{"count":1,"period":"1s"}"#
            } else {
                r#""window":"1s""#
            };
            rule(&format!(
                r#"{{"action":"{a}","algorithm":"{a}","capacity":5,{limit}}}"#
            ))
        })
        .collect()
}

#[tokio::test]
async fn a_script_failing_inside_redis_is_a_script_error_naming_it_not_an_outage() {
    // A Redis whose TIME command was renamed away: every algorithm script reads the time with
    // redis.call('TIME') and fails inside Redis ("ERR Unknown Redis command called from script").
    let server = RedisServer::start_with(&["--rename-command", "TIME", ""]);
    let store = redis_store(&server).await;
    let fixed_time = redis_store(&server)
        .await
        .with_clock(ManualClock::new(1_700_000_000_000_000_000));
    store.ping().await.expect("the server answers");
    for r in one_rule_per_algorithm() {
        let algorithm = r.algorithm().name();
        match store.throttle(&r, "k", 1).await {
            Err(StoreError::Script { script, message }) => {
                assert_eq!(script, algorithm);
                assert!(message.contains("Unknown Redis command"), "{message}");
            }
            other => panic!("{algorithm}: expected a script error, got {other:?}"),
        }
        match store.peek_many(&r, &["k".to_owned()]).await {
            Err(StoreError::Script { script, .. }) => assert_eq!(script, algorithm),
            other => panic!("{algorithm} peek: expected a script error, got {other:?}"),
        }
        // At a given time the script does not call TIME, and the same server answers: the
        // connection was never the problem.
        assert!(
            fixed_time
                .throttle(&r, "k", 1)
                .await
                .expect("fixed time")
                .allowed
        );
    }
    let err = store
        .throttle(&one_rule_per_algorithm()[0], "k", 1)
        .await
        .expect_err("still failing");
    assert_eq!(
        err.to_string().split(':').next().unwrap_or_default(),
        "the Redis script gcra failed",
        "{err}"
    );
}
