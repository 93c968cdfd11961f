//! All-or-nothing checks (several limits on one request) (`DecisionStore::throttle_all`), on the memory store, a
//! real redis-server and a real 3-master Redis Cluster:
//! - three limits where the third denies: the first two keep exactly their counts (peeked before
//!   and after), for every algorithm, and every step equals core's `decide_all`;
//! - 64 concurrent clients: exactly the tightest capacity passes, and every limit is debited by
//!   exactly that many, nothing for the denied requests;
//! - the Cluster's refund: a reservation whose key another request changed meanwhile is not
//!   restored and is counted.
use crate::store_suite::rule;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::DecisionStore;
use sluice_backend::store::{CheckRequest, ManualClock, Store};
use sluice_core::all::{decide_all, Check, Part};
use sluice_core::{Algorithm, Mode, Rule, State};

/// Every algorithm's JSON name, from core's list.
fn algorithms() -> [&'static str; 6] {
    Algorithm::ALL.map(Algorithm::name)
}
/// Midnight UTC, 2024-01-01 (aligned to every window here).
const T0: u64 = 1_704_067_200_000_000_000;

fn limit_rule(action: &str, algorithm: &str, capacity: u64, mode: &str) -> Rule {
    let limit = if algorithm.ends_with("window") || algorithm == "sliding_log" {
        r#""window":"7d""#.to_owned()
    } else {
        r#""rate":{"count":1,"period":"1h"}"#.to_owned()
    };
    rule(&format!(
        r#"{{"action":"{action}","algorithm":"{algorithm}","capacity":{capacity},"mode":"{mode}",{limit}}}"#
    ))
}

async fn remaining(store: &dyn Store, rule: &Rule, key: &str) -> u64 {
    store.throttle(rule, key, 0).await.expect("peek").remaining
}

/// Per user 5, per IP 6, global 2 (all under one algorithm, fixed times): two requests pass,
/// the third is denied by the global limit and the first two keep exactly 3 and 4. Each answer
/// equals core's `decide_all` on a memory of the same history.
pub async fn third_limit_denies_and_the_others_keep_their_counts(
    store: &dyn Store,
    clock: &ManualClock,
    tag: &str,
) {
    for algorithm in algorithms() {
        let user = limit_rule(&format!("{tag}u-{algorithm}"), algorithm, 5, "enforce");
        let ip = limit_rule(&format!("{tag}i-{algorithm}"), algorithm, 6, "enforce");
        let global = limit_rule(&format!("{tag}g-{algorithm}"), algorithm, 2, "enforce");
        let checks = [
            CheckRequest {
                rule: &user,
                key: "alice",
                quantity: 1,
                part: Part::AllOrNothing,
            },
            CheckRequest {
                rule: &ip,
                key: "10.0.0.1",
                quantity: 1,
                part: Part::AllOrNothing,
            },
            CheckRequest {
                rule: &global,
                key: "",
                quantity: 1,
                part: Part::AllOrNothing,
            },
        ];
        let core: Vec<Check> = checks
            .iter()
            .enumerate()
            .map(|(slot, c)| Check {
                params: c.rule.params(),
                enforce: c.rule.mode() == Mode::Enforce,
                quantity: c.quantity,
                slot,
                part: Part::AllOrNothing,
            })
            .collect();
        let mut states = vec![State::Fresh; 3];
        clock.set(T0);
        for round in 0..3 {
            let got = store.throttle_all(&checks).await.expect("throttle_all");
            let want = decide_all(&core, &states, T0);
            assert_eq!(got.decisions, want.decisions, "{algorithm} round {round}");
            assert_eq!(got.denied, want.denied, "{algorithm} round {round}");
            assert_eq!(got.unrefunded, 0);
            for (slot, change) in want.changes.into_iter().enumerate() {
                if let Some(next) = change {
                    states[slot] = next;
                }
            }
        }
        // Exact counts after the denial: 5 − 2, 6 − 2, 2 − 2.
        assert_eq!(remaining(store, &user, "alice").await, 3, "{algorithm}");
        assert_eq!(remaining(store, &ip, "10.0.0.1").await, 4, "{algorithm}");
        assert_eq!(remaining(store, &global, "").await, 0, "{algorithm}");
        let denied = store.throttle_all(&checks).await.expect("throttle_all");
        assert_eq!(denied.denied, Some(2), "{algorithm}");
        assert!(!denied.decisions[2].allowed);
        assert_eq!(
            denied.decisions[0].remaining, 3,
            "the others answer what they have left"
        );
        assert_eq!(denied.decisions[1].remaining, 4);
        assert_eq!(remaining(store, &user, "alice").await, 3, "{algorithm}");
        assert_eq!(remaining(store, &ip, "10.0.0.1").await, 4, "{algorithm}");
        // A shadow third limit never denies: the first two are debited.
        let shadow = limit_rule(&format!("{tag}s-{algorithm}"), algorithm, 1, "shadow");
        let with_shadow = [
            checks[0],
            checks[1],
            CheckRequest {
                rule: &shadow,
                key: "",
                quantity: 2,
                part: Part::AllOrNothing,
            },
        ];
        let d = store
            .throttle_all(&with_shadow)
            .await
            .expect("throttle_all");
        assert_eq!(d.denied, None, "{algorithm}");
        assert!(!d.decisions[2].allowed, "the shadow rule would deny");
        assert_eq!(remaining(store, &user, "alice").await, 2, "{algorithm}");
        // The same state twice: the second check sees the first one's debit (2 left, 2 + 1).
        let twice = [
            CheckRequest {
                rule: &user,
                key: "alice",
                quantity: 2,
                part: Part::AllOrNothing,
            },
            CheckRequest {
                rule: &user,
                key: "alice",
                quantity: 1,
                part: Part::AllOrNothing,
            },
        ];
        let d = store.throttle_all(&twice).await.expect("throttle_all");
        assert_eq!(d.denied, Some(1), "{algorithm}");
        assert_eq!(remaining(store, &user, "alice").await, 2, "{algorithm}");
    }
}

/// 64 clients at once, 8 requests each, under three limits of capacities 40, 60 and 30 that do
/// not drain during the test: exactly 30 pass, and afterwards the limits have exactly 10, 30
/// and 0 left (the 482 denied requests debited nothing). On a Cluster (`atomic` false) what
/// holds is weaker and still exact: never more than 30 pass, and the three limits together are
/// debited by exactly 3 × passed + the reservations the store reported unrefunded. Returns the
/// unrefunded count.
pub async fn concurrent_clients_debit_exactly_the_passed(
    store: Arc<dyn Store>,
    tag: &str,
    atomic: bool,
) -> usize {
    let mut unrefunded_total = 0;
    for algorithm in algorithms() {
        let rules = Arc::new([
            limit_rule(&format!("{tag}cu-{algorithm}"), algorithm, 40, "enforce"),
            limit_rule(&format!("{tag}ci-{algorithm}"), algorithm, 60, "enforce"),
            limit_rule(&format!("{tag}cg-{algorithm}"), algorithm, 30, "enforce"),
        ]);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let store = store.clone();
                let rules = rules.clone();
                tokio::spawn(async move {
                    let checks = [
                        CheckRequest {
                            rule: &rules[0],
                            key: "u",
                            quantity: 1,
                            part: Part::AllOrNothing,
                        },
                        CheckRequest {
                            rule: &rules[1],
                            key: "ip",
                            quantity: 1,
                            part: Part::AllOrNothing,
                        },
                        CheckRequest {
                            rule: &rules[2],
                            key: "",
                            quantity: 1,
                            part: Part::AllOrNothing,
                        },
                    ];
                    let (mut passed, mut unrefunded) = (0u64, 0usize);
                    for _ in 0..8 {
                        let d = store.throttle_all(&checks).await.expect("throttle_all");
                        assert_eq!(d.decisions.len(), 3);
                        if d.denied.is_none() {
                            passed += 1;
                        }
                        unrefunded += d.unrefunded;
                    }
                    (passed, unrefunded)
                })
            })
            .collect();
        let (mut passed, mut unrefunded) = (0, 0);
        for task in tasks {
            let (p, u) = task.await.expect("task");
            passed += p;
            unrefunded += u;
        }
        let left = [
            remaining(store.as_ref(), &rules[0], "u").await,
            remaining(store.as_ref(), &rules[1], "ip").await,
            remaining(store.as_ref(), &rules[2], "").await,
        ];
        if atomic {
            assert_eq!(
                passed, 30,
                "{algorithm}: exactly the tightest capacity passes"
            );
            assert_eq!(unrefunded, 0);
            assert_eq!(
                left,
                [10, 30, 0],
                "{algorithm}: denied requests debited nothing"
            );
        } else {
            assert!(passed <= 30, "{algorithm}: {passed} passed");
            let debited = (40 - left[0]) + (60 - left[1]) + (30 - left[2]);
            assert_eq!(
                debited,
                3 * passed + unrefunded as u64,
                "{algorithm}: passed {passed}, unrefunded {unrefunded}, left {left:?}"
            );
            eprintln!(
                "cluster {algorithm}: passed {passed}, unrefunded {unrefunded}, left {left:?}"
            );
        }
        unrefunded_total += unrefunded;
    }
    unrefunded_total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_decides_several_limits_all_or_nothing() {
    let clock = ManualClock::new(T0);
    let at_fixed_times = MemoryStore::new().with_clock(clock.clone());
    third_limit_denies_and_the_others_keep_their_counts(&at_fixed_times, &clock, "m").await;
    concurrent_clients_debit_exactly_the_passed(Arc::new(MemoryStore::new()), "m", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_decides_several_limits_all_or_nothing_in_one_script() {
    let redis = support::RedisServer::start();
    let mut config = RedisConfig::new(RedisTarget::Single(redis.url()));
    config.timeout = Duration::from_secs(5);
    let store = Arc::new(RedisStore::connect(config.clone()).await.expect("connect"));
    let (at_fixed_times, clock) = support::redis_at_fixed_times(config, T0).await;
    third_limit_denies_and_the_others_keep_their_counts(&at_fixed_times, &clock, "r").await;
    concurrent_clients_debit_exactly_the_passed(store.clone(), "r", true).await;
    // One script call per request: the denied ones leave no trace in the keyspace (a fresh
    // global key denied at once is not created).
    let solo = limit_rule("r-none", "gcra", 1, "enforce");
    let zero = limit_rule("r-zero", "fixed_window", 1, "enforce");
    let d = store
        .throttle_all(&[
            CheckRequest {
                rule: &solo,
                key: "k",
                quantity: 1,
                part: Part::AllOrNothing,
            },
            CheckRequest {
                rule: &zero,
                key: "k",
                quantity: 2,
                part: Part::AllOrNothing,
            },
        ])
        .await
        .expect("throttle_all");
    assert_eq!(d.denied, Some(1));
    assert_eq!(redis.cli(&["EXISTS", "sluice:{r-none:k}:gcra"]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_reserves_and_refunds_several_limits() {
    let cluster = support::RedisCluster::start();
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = Duration::from_secs(5);
    let store = Arc::new(RedisStore::connect(config.clone()).await.expect("connect"));
    let (at_fixed_times, clock) = support::redis_at_fixed_times(config, T0).await;
    third_limit_denies_and_the_others_keep_their_counts(&at_fixed_times, &clock, "c").await;
    randomized_all_against_core(&at_fixed_times, &clock, "rc", 0xc1a5, 15, false).await;
    concurrent_clients_debit_exactly_the_passed(store.clone(), "c", false).await;
}

/// Random requests of 2 to 4 checks under rules of random algorithms, capacities, spans and
/// modes, some checks counted on their own (Part::OnItsOwn, Part::PastTheLimit), at fixed times (forward, repeated,
/// sometimes a little back), with quantities from 0 to
/// beyond the capacity: every answer (each decision, exactly, and which check denied) equals
/// core's `decide_all` on states kept beside it. With `duplicates`, checks may name the same
/// rule and key (the second sees the first one's debit); the Cluster, which decides checks in
/// different slots, gets distinct ones.
pub async fn randomized_all_against_core(
    store: &dyn Store,
    clock: &ManualClock,
    tag: &str,
    seed: u64,
    sequences: usize,
    duplicates: bool,
) {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut compared = 0;
    let mut denied = 0;
    for n in 0..sequences {
        let rules: Vec<Rule> = (0..4)
            .map(|i| {
                let algorithm = algorithms()[rng.random_range(0..6)];
                let capacity = rng.random_range(1..=6u64);
                let span = ["7ms", "250ms", "1s", "60s"][rng.random_range(0..4)];
                let mode = if rng.random_bool(0.15) { "shadow" } else { "enforce" };
                let limit = if algorithm.ends_with("window") || algorithm == "sliding_log" {
                    format!(r#""window":"{span}""#)
                } else {
                    format!(r#""rate":{{"count":1,"period":"{span}"}}"#)
                };
                rule(&format!(
                    r#"{{"action":"{tag}x{n}-{i}","algorithm":"{algorithm}","capacity":{capacity},"mode":"{mode}",{limit}}}"#
                ))
            })
            .collect();
        let mut states: HashMap<(usize, String), State> = HashMap::new();
        let mut now = T0 + rng.random_range(0..1_000_000_000u64);
        for step in 0..25 {
            match rng.random_range(0..10) {
                0 => {}
                1 => now -= rng.random_range(0..5_000_000u64),
                _ => now += rng.random_range(0..400_000_000u64),
            }
            let count = rng.random_range(2..=4usize);
            let mut picks: Vec<(usize, String)> = Vec::new();
            while picks.len() < count {
                let pick = (
                    rng.random_range(0..4usize),
                    ["a", "b"][rng.random_range(0..2)].to_owned(),
                );
                if duplicates || !picks.iter().any(|p| p.0 == pick.0) {
                    picks.push(pick);
                }
            }
            let quantities: Vec<u64> = picks
                .iter()
                .map(|(r, _)| match rng.random_range(0..8) {
                    0 => 0,
                    1 => rules[*r].params().capacity() + 1,
                    2 => rng.random_range(1..=rules[*r].params().capacity()),
                    _ => 1,
                })
                .collect();
            // Some checks counted on their own (the peer's semantics): never denying the request,
            // taking what is left when they do not fit.
            let parts: Vec<Part> = picks
                .iter()
                .map(|_| match rng.random_range(0..10) {
                    0..=1 => Part::OnItsOwn,
                    2..=3 => Part::PastTheLimit,
                    _ => Part::AllOrNothing,
                })
                .collect();
            let requests: Vec<CheckRequest<'_>> = picks
                .iter()
                .zip(&quantities)
                .zip(&parts)
                .map(|(((r, key), &quantity), &part)| CheckRequest {
                    rule: &rules[*r],
                    key,
                    quantity,
                    part,
                })
                .collect();
            let mut slots: Vec<(usize, String)> = Vec::new();
            let core: Vec<Check> = picks
                .iter()
                .zip(&quantities)
                .zip(&parts)
                .map(|((pick, &quantity), &part)| {
                    let slot = slots.iter().position(|s| s == pick).unwrap_or_else(|| {
                        slots.push(pick.clone());
                        slots.len() - 1
                    });
                    Check {
                        params: rules[pick.0].params(),
                        enforce: rules[pick.0].mode() == Mode::Enforce,
                        quantity,
                        slot,
                        part,
                    }
                })
                .collect();
            let before: Vec<State> = slots
                .iter()
                .map(|s| states.get(s).cloned().unwrap_or_default())
                .collect();
            let want = decide_all(&core, &before, now);
            clock.set(now);
            let got = store.throttle_all(&requests).await.expect("throttle_all");
            assert_eq!(
                (got.decisions.clone(), got.denied),
                (want.decisions.clone(), want.denied),
                "seed {seed} sequence {n} step {step} at {now}: checks {picks:?} x {quantities:?}, rules {:?}",
                rules.iter().map(|r| r.to_json().to_string()).collect::<Vec<_>>()
            );
            for (slot, change) in want.changes.into_iter().enumerate() {
                if let Some(next) = change {
                    states.insert(slots[slot].clone(), next);
                }
            }
            compared += 1;
            denied += usize::from(got.denied.is_some());
        }
    }
    assert_eq!(compared, sequences * 25);
    // Both outcomes were exercised, not just one.
    assert!(
        denied > compared / 10 && denied < compared * 9 / 10,
        "{denied} of {compared} denied"
    );
    eprintln!("{tag}: {compared} requests compared with core, {denied} denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_matches_core_on_random_requests() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::new().with_clock(clock.clone());
    randomized_all_against_core(&store, &clock, "rm", 0x5eed, 40, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_matches_core_on_random_requests() {
    let redis = support::RedisServer::start();
    let mut config = RedisConfig::new(RedisTarget::Single(redis.url()));
    config.timeout = Duration::from_secs(5);
    let (store, clock) = support::redis_at_fixed_times(config, T0).await;
    randomized_all_against_core(&store, &clock, "rr", 0x5eed, 40, true).await;
}

/// The Cluster's refund (`throttle_refund.lua`) is a compare-and-set on a real redis-server: it
/// puts a key back to its state before a reservation only while the key still holds exactly what
/// the reservation left (or, for a key that did not exist, deletes it); once another request has
/// changed the key it writes nothing and answers 0, so that request's debit is never erased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_refund_restores_only_an_untouched_key() {
    let redis = support::RedisServer::start();
    let client = redis::Client::open(redis.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let refund = redis::Script::new(include_str!("../../lua/throttle_refund.lua"));
    let dump = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("DUMP")
                .arg("k")
                .query_async::<Option<Vec<u8>>>(&mut conn)
                .await
                .expect("dump")
                .unwrap_or_default()
        }
    };
    let hset = |conn: &mut redis::aio::MultiplexedConnection, count: u64| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("HSET")
                .arg("k")
                .arg("count")
                .arg(count)
                .query_async::<i64>(&mut conn)
                .await
                .expect("hset");
        }
    };
    let count = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("HGET")
                .arg("k")
                .arg("count")
                .query_async::<Option<u64>>(&mut conn)
                .await
                .expect("hget")
        }
    };
    // Before: count 1 with a TTL. The reservation left count 2.
    hset(&mut conn, 1).await;
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("k")
        .arg(600_000)
        .query_async(&mut conn)
        .await
        .expect("pexpire");
    let before = dump(&mut conn).await;
    hset(&mut conn, 2).await;
    let after = dump(&mut conn).await;
    // The refund of the one unit reserved at `before` and left at `after`, as the store sends it.
    let refund_k = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let mut invocation = refund.key("k");
        invocation.arg("1").arg(&before).arg("600000").arg(&after);
        async move {
            invocation
                .invoke_async::<i64>(&mut conn)
                .await
                .expect("refund")
        }
    };
    // Another request took one more (count 3): no refund, nothing written.
    hset(&mut conn, 3).await;
    let done = refund_k(&mut conn).await;
    assert_eq!((done, count(&mut conn).await), (0, Some(3)));
    // Untouched since the reservation: restored to count 1, TTL kept.
    hset(&mut conn, 2).await;
    let done = refund_k(&mut conn).await;
    assert_eq!((done, count(&mut conn).await), (1, Some(1)));
    let ttl: i64 = redis::cmd("PTTL")
        .arg("k")
        .query_async(&mut conn)
        .await
        .expect("pttl");
    assert!(ttl > 500_000, "{ttl}");
    // A key the reservation created: deleted by its refund.
    let _: i64 = redis::cmd("DEL")
        .arg("k")
        .query_async(&mut conn)
        .await
        .expect("del");
    hset(&mut conn, 1).await;
    let created = dump(&mut conn).await;
    let done: i64 = refund
        .key("k")
        .arg("0")
        .arg("")
        .arg("0")
        .arg(&created)
        .invoke_async(&mut conn)
        .await
        .expect("refund");
    assert_eq!((done, count(&mut conn).await), (1, None));
}
