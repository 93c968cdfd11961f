//! RLQS shares kept in the store (`ShareStore`): backend replicas on one real redis-server
//! split a key's rule together, and the shares of a backend that stopped are taken over by one
//! live replica, which pays their refill until their TTL ends, then drops them. envoy-types'
//! tonic client stands in for Envoy's quota filter (helpers of `rlqs.rs`). The store's step is
//! also held to fixed times (a manual clock) on a redis-server and a Redis Cluster.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use serde_json::json;
use sluice_backend::store::redis::{RedisConfig, RedisTarget};
use sluice_backend::store::rlqs::{IndexTouch, ShareKey, ShareRecord, ShareStore, ShareSync};
use sluice_core::rlqs::shape::Shape as RuleShape;
use sluice_core::rlqs::DEFAULT_TTL_S;
use sluice_core::Action as SluiceAction;
use tokio::task::JoinHandle;

use crate::harness::redis;
use crate::rlqs::{actions, bucket, shape, token_bucket, usage, Quota, Rig, DENY_ALL};
use crate::support::{redis_at_fixed_times, RedisCluster, RedisServer};

const HASH: &str = "sluice:{user:alice}:rlqs";

async fn replica(server: &RedisServer) -> Rig {
    Rig::start(redis(&server.url())).await
}

async fn put_rule(rig: &Rig) {
    rig.put_rule(
        json!({"action": "user", "algorithm": "token_bucket", "capacity": 20,
                        "rate": {"count": 10, "period": "1s"}}),
    )
    .await;
}

/// The key's share records in Redis: replica id → (holders, burst, tokens_per_fill, fill,
/// expires_ms, paid_ms).
fn records(server: &RedisServer) -> Vec<(String, [u64; 6])> {
    let out = server.cli(&["HGETALL", HASH]);
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| {
            let v: Vec<u64> = c[1].split(' ').map(|x| x.parse().unwrap()).collect();
            (c[0].to_owned(), v.try_into().unwrap())
        })
        .collect()
}

/// What alice has left now (a peek: quantity 0 changes nothing).
async fn remaining(rig: &Rig) -> u64 {
    let body = json!({"action": "user", "key": "alice", "quantity": 0});
    let (status, answer) = rig
        .http_post("/v1/throttle", serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["remaining"].as_u64().unwrap()
}

/// (burst, rate) of a strategy: 0, 0 for `DENY_ALL`.
fn burst_rate(s: &Strategy) -> (u32, u32) {
    if *s == DENY_ALL {
        return (0, 0);
    }
    let (b, n, f) = shape(&token_bucket(s));
    assert_eq!(f, 1, "the rule's fill interval");
    (b, n)
}

/// Reads `q`'s assignments of alice for `within`, each with when it arrived.
fn collect(mut q: Quota, within: Duration) -> JoinHandle<Vec<(Instant, (u32, u32))>> {
    tokio::spawn(async move {
        // The whole stream moves here: its report side kept open (a dropped side ends it).
        let q = &mut q;
        let alice = bucket(&[("name", "user"), ("user", "alice")]);
        let end = Instant::now() + within;
        let mut got = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            let answer = match tokio::time::timeout(left, q.rx.message()).await {
                Ok(Ok(Some(answer))) => answer,
                Err(_) => break,
                other => panic!("the stream ended: {other:?}"),
            };
            let at = Instant::now();
            for (b, s, _) in actions(&answer) {
                if b == alice {
                    got.push((at, burst_rate(&s)));
                }
            }
        }
        got
    })
}

#[tokio::test]
async fn two_replicas_split_one_key_within_the_rule() {
    let server = RedisServer::start();
    let a = replica(&server).await;
    put_rule(&a).await;
    let b = replica(&server).await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);

    let mut qa = Quota::open(&a).await;
    qa.report("edge", vec![usage(alice.clone(), 0)]).await;
    let first = burst_rate(&actions(&qa.next().await.unwrap())[0].1);
    assert_eq!(first, (20, 10), "alone on both replicas: the whole rule");

    // A second Envoy on the other replica: it must not get a share the first still holds.
    let mut qb = Quota::open(&b).await;
    qb.report("edge", vec![usage(alice.clone(), 0)]).await;
    let joined = burst_rate(&actions(&qb.next().await.unwrap())[0].1);
    assert_eq!(
        joined,
        (0, 0),
        "replica a holds the whole rule: nothing is left for b yet"
    );

    // Both replicas' ticks: a lowers to its half, b is granted once a's record has dropped.
    let window = Duration::from_secs(8);
    let (ga, gb) = (collect(qa, window), collect(qb, window));
    let (ga, gb) = (ga.await.unwrap(), gb.await.unwrap());
    let mut events: Vec<(Instant, char, (u32, u32))> = ga
        .iter()
        .map(|&(t, s)| (t, 'a', s))
        .chain(gb.iter().map(|&(t, s)| (t, 'b', s)))
        .collect();
    events.sort_by_key(|e| e.0);
    let (mut now_a, mut now_b) = (first, joined);
    for (_, who, s) in &events {
        if *who == 'a' {
            now_a = *s;
        } else {
            now_b = *s;
        }
        println!("{who}: {s:?} -> a {now_a:?} + b {now_b:?}");
        assert!(
            now_a.0 + now_b.0 <= 20 && now_a.1 + now_b.1 <= 10,
            "Σ over the replicas past the rule: a {now_a:?} + b {now_b:?}"
        );
    }
    assert_eq!(now_a, (10, 5), "a lowered to its half");
    assert_eq!(now_b.1, 5, "b raised to its half of the rate: {now_b:?}");
    assert!(now_b.0 >= 1 && now_b.0 <= 10, "b's burst: {now_b:?}");

    let recs = records(&server);
    assert_eq!(recs.len(), 2, "{recs:?}");
    let burst: u64 = recs.iter().map(|(_, r)| r[1]).sum();
    let rate: u64 = recs.iter().map(|(_, r)| r[2]).sum();
    assert!(burst <= 20 && rate <= 10, "{recs:?}");
    // Both keys carry a TTL (a `volatile-*` eviction policy may take them; docs/storage.md).
    for k in [HASH, "{sluice:rlqs}:keys"] {
        let ttl: i64 = server.cli(&["PTTL", k]).trim().parse().unwrap();
        assert!(ttl > 0, "{k}: PTTL {ttl}");
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_stopped_backends_shares_are_taken_over_by_one_replica_and_paid_until_their_ttl() {
    let server = RedisServer::start();
    let a = replica(&server).await;
    put_rule(&a).await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut qa = Quota::open(&a).await;
    qa.report("edge", vec![usage(alice.clone(), 0)]).await;
    let granted = burst_rate(&actions(&qa.next().await.unwrap())[0].1);
    let reported = Instant::now();
    assert_eq!(granted, (20, 10));
    let old = records(&server);
    assert_eq!(old.len(), 1, "{old:?}");
    let (old_id, old_rec) = old[0].clone();
    assert_eq!(old_rec[1..4], [20, 10, 1], "{old_rec:?}");

    // The backend stops (its Envoy still enforces the share until its TTL); two replicas start
    // on the same Redis, and neither holds the key.
    a.stop().await;
    drop(qa);
    let b = replica(&server).await;
    let c = replica(&server).await;

    // One of them takes the orphan over (within the stale mark, 3 ticks, and a tick).
    let deadline = Instant::now() + Duration::from_secs(8);
    let claimer = loop {
        let recs = records(&server);
        if !recs.iter().any(|(id, _)| *id == old_id) && !recs.is_empty() {
            break recs;
        }
        assert!(Instant::now() < deadline, "no claim: {recs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let claimed_at = reported.elapsed();
    println!("claimed after {claimed_at:?}: {claimer:?}");
    assert_eq!(claimer.len(), 1, "one claimer only: {claimer:?}");
    assert_eq!(
        claimer[0].1[0..3],
        [0, 20, 10],
        "no holder of its own, the orphan's burst and rate"
    );

    // Until the share's TTL ends its refill is debited: the key stays spent. Unpaid, it would
    // have refilled to 20 within 2 s of the stop.
    let ttl = Duration::from_secs(DEFAULT_TTL_S);
    let mut checked = 0;
    while reported.elapsed() < ttl - Duration::from_millis(1_500) {
        let (rb, rc) = (remaining(&b).await, remaining(&c).await);
        assert!(
            rb <= 1 && rc <= 1,
            "refill left unpaid at {:?}: {rb}/{rc}",
            reported.elapsed()
        );
        let recs = records(&server);
        assert!(recs.len() <= 1, "a second claimer: {recs:?}");
        checked += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(checked >= 3, "checked {checked} times");

    // Then dropped: the record goes, and the key refills.
    let deadline = reported + ttl + Duration::from_secs(4);
    loop {
        if records(&server).is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still held: {:?}",
            records(&server)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("dropped after {:?}", reported.elapsed());
    // One claimer by the counters too, and what it paid: the orphan's rate (10/s) from one tick
    // before its last sync until its expiry, 12 s after that sync: 130 units.
    let counted = |name: &'static str| {
        let (b, c) = (&b, &c);
        async move {
            let of = |v: Option<String>| v.map_or(0.0, |v| v.parse::<f64>().unwrap());
            of(b.metric(name).await) + of(c.metric(name).await)
        }
    };
    let taken = counted("sluice_rlqs_shares_taken_over_total").await;
    let units = counted("sluice_rlqs_taken_over_units_total").await;
    println!("taken over {taken}, refill paid for it {units} units");
    assert_eq!(taken, 1.0);
    assert!((125.0..=135.0).contains(&units), "{units}");
    let refill_deadline = Instant::now() + Duration::from_secs(10);
    while remaining(&b).await < 5 {
        assert!(Instant::now() < refill_deadline, "the key never refilled");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.stop().await;
    c.stop().await;
}

/// The store's step itself at fixed times (a manual clock, no ledger): records add up, a
/// replica's ceiling is its holders' part within what the others hold, a stale record has one
/// claimer, expired records go, and the index finds and then forgets a key nobody syncs.
async fn share_records_at_fixed_times(target: RedisTarget) {
    const T0: u64 = 1_800_000_000_000; // ms
    let mut config = RedisConfig::new(target);
    config.timeout = Duration::from_secs(5);
    let (store, clock) = redis_at_fixed_times(config, T0 * 1_000_000).await;
    let at = |ms: u64| clock.set((T0 + ms) * 1_000_000);
    let rule = RuleShape {
        max_tokens: 20,
        tokens_per_fill: 10,
        fill_interval_s: 1,
    };
    let key = ShareKey {
        action: SluiceAction::parse("user").unwrap(),
        key: "alice".to_owned(),
    };
    let holding = |holders, burst, tokens_per_fill| ShareRecord {
        holders,
        burst,
        tokens_per_fill,
        fill_interval_s: 1,
    };
    let sync = |instance: &'static str, mine: ShareRecord| ShareSync {
        instance,
        rule,
        mine,
        expires_in_ms: 12_000,
        stale_ms: 3_000,
    };
    let whole = |b, n| RuleShape {
        max_tokens: b,
        tokens_per_fill: n,
        fill_interval_s: 1,
    };

    let a = store
        .sync_shares(&key, &sync("a", holding(1, 0, 0)))
        .await
        .unwrap();
    assert_eq!(
        (a.ceiling, a.live, a.now_ms),
        (rule, 1, T0),
        "alone: the whole rule"
    );
    // b joins: a's record holds the whole rule (its ceiling, above what it granted yet).
    let b = store
        .sync_shares(&key, &sync("b", holding(1, 0, 0)))
        .await
        .unwrap();
    assert_eq!(
        (b.ceiling, b.others, b.live),
        (whole(0, 0), holding(1, 20, 10), 2)
    );
    // a's next sync: its half; it still pays its old share (a lowering in flight), recorded.
    at(1_000);
    let a = store
        .sync_shares(&key, &sync("a", holding(1, 20, 10)))
        .await
        .unwrap();
    assert_eq!((a.ceiling, a.others), (whole(10, 5), holding(1, 0, 0)));
    at(2_000);
    store
        .sync_shares(&key, &sync("a", holding(1, 10, 5)))
        .await
        .unwrap();
    let b = store
        .sync_shares(&key, &sync("b", holding(1, 0, 0)))
        .await
        .unwrap();
    assert_eq!(b.ceiling, whole(10, 5), "a lowered: b gets the other half");

    // a stops paying; 3 s later b and c sync at the same instant: one claimer only.
    at(2_500);
    store
        .sync_shares(&key, &sync("b", holding(1, 10, 5)))
        .await
        .unwrap();
    at(5_000);
    let b = store
        .sync_shares(&key, &sync("b", holding(1, 10, 5)))
        .await
        .unwrap();
    let c = store
        .sync_shares(&key, &sync("c", ShareRecord::default()))
        .await
        .unwrap();
    assert_eq!(b.orphans.len(), 1, "{b:?}");
    let orphan = &b.orphans[0];
    assert_eq!(
        (
            orphan.instance.as_str(),
            orphan.record,
            orphan.paid_ms,
            orphan.expires_ms
        ),
        ("a", holding(1, 10, 5), T0 + 2_000, T0 + 14_000)
    );
    assert!(c.orphans.is_empty(), "a second claimer: {c:?}");
    // b's record is its ceiling, the whole rule (alone now; the orphan it pays is its to count
    // inside it): c sees b alone, and no room.
    assert_eq!(
        (c.others, c.live),
        (holding(1, 20, 10), 1),
        "c sees b alone"
    );
    assert_eq!(c.ceiling, whole(0, 0), "c holds nothing: no part");

    // The index: b marks the key; nobody syncs it for 3 s; it is found stale, then dropped
    // once found empty.
    let touch = |held, empty| IndexTouch {
        held,
        empty,
        stale_ms: 3_000,
        limit: 10,
    };
    let one = std::slice::from_ref(&key);
    assert!(store
        .touch_share_keys(&touch(one, &[]))
        .await
        .unwrap()
        .keys
        .is_empty());
    at(8_000);
    let stale = store.touch_share_keys(&touch(&[], &[])).await.unwrap();
    assert_eq!((stale.now_ms, stale.keys.as_slice()), (T0 + 8_000, one));
    // Past every expiry: b's record goes by itself, and b (holding nothing) deletes its own.
    at(30_000);
    let b = store
        .sync_shares(&key, &sync("b", ShareRecord::default()))
        .await
        .unwrap();
    assert_eq!(
        (b.live, b.others, b.orphans.len()),
        (0, holding(0, 0, 0), 0)
    );
    assert!(store
        .touch_share_keys(&touch(&[], one))
        .await
        .unwrap()
        .keys
        .is_empty());
}

#[tokio::test]
async fn share_records_add_up_with_one_claimer_on_a_redis_server() {
    let server = RedisServer::start();
    share_records_at_fixed_times(RedisTarget::Single(server.url())).await;
}

#[tokio::test]
async fn share_records_add_up_with_one_claimer_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    share_records_at_fixed_times(RedisTarget::Cluster(cluster.urls())).await;
}

#[tokio::test]
async fn a_redis_that_lost_its_data_gets_the_records_back_on_the_next_tick() {
    let mut server = RedisServer::start();
    let port = server.port;
    let a = replica(&server).await;
    put_rule(&a).await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut qa = Quota::open(&a).await;
    qa.report("edge", vec![usage(alice.clone(), 0)]).await;
    assert_eq!(
        burst_rate(&actions(&qa.next().await.unwrap())[0].1),
        (20, 10)
    );
    assert_eq!(records(&server).len(), 1);

    // Redis restarts empty (no persistence): the rules and the share records are gone. The
    // replica's next syncs write its record again, so other replicas count its share.
    server.kill();
    drop(server);
    let server = RedisServer::start_on_port(port);
    assert!(records(&server).is_empty());
    let deadline = Instant::now() + Duration::from_secs(10);
    let back = loop {
        let recs = records(&server);
        if !recs.is_empty() {
            break recs;
        }
        assert!(Instant::now() < deadline, "the record never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("back: {back:?}");
    let (_, rec) = &back[0];
    assert_eq!(rec[0], 1, "its one holder: {back:?}");
    assert!(rec[1] <= 20 && rec[2] <= 10, "within the rule: {back:?}");
    drop(qa);
    a.stop().await;
}

/// Issue 39: a rule's one token per interval held through two replicas of one holder each was
/// rounded down to 0 on both. The remainder now goes to one replica in turn (ids in order,
/// rotated every `REMAINDER_ROTATE_MS` of store time): Σ parts stays the rule's, and the
/// other replica gets it on the next turn once the first has lowered.
#[tokio::test]
async fn a_one_token_refill_through_two_replicas_goes_to_one_of_them_in_turn() {
    use sluice_backend::store::rlqs::REMAINDER_ROTATE_MS;
    const T0: u64 = 1_800_000_000_000; // ms; T0 / REMAINDER_ROTATE_MS is even: a's turn
    let server = RedisServer::start();
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.timeout = Duration::from_secs(5);
    let (store, clock) = redis_at_fixed_times(config, T0 * 1_000_000).await;
    let at = |ms: u64| clock.set((T0 + ms) * 1_000_000);
    let one = RuleShape {
        max_tokens: 1,
        tokens_per_fill: 1,
        fill_interval_s: 60,
    };
    let key = ShareKey {
        action: SluiceAction::parse("user").unwrap(),
        key: "alice".to_owned(),
    };
    let holding = |burst, tokens_per_fill| ShareRecord {
        holders: 1,
        burst,
        tokens_per_fill,
        fill_interval_s: 60,
    };
    let sync = |instance: &'static str, mine: ShareRecord| ShareSync {
        instance,
        rule: one,
        mine,
        expires_in_ms: 12_000,
        stale_ms: 3_000,
    };
    let parts = |c: RuleShape| (c.max_tokens, c.tokens_per_fill);
    let a = store
        .sync_shares(&key, &sync("a", holding(0, 0)))
        .await
        .unwrap();
    assert_eq!(parts(a.ceiling), (1, 1), "alone: the whole rule");
    let b = store
        .sync_shares(&key, &sync("b", holding(0, 0)))
        .await
        .unwrap();
    assert_eq!(
        parts(b.ceiling),
        (0, 0),
        "a's turn, and a's record holds it"
    );
    // Both keep syncing (a record not paid for 3 s would be taken over as an orphan).
    for ms in [1_000, 3_000] {
        at(ms);
        let a = store
            .sync_shares(&key, &sync("a", holding(1, 1)))
            .await
            .unwrap();
        assert_eq!(
            parts(a.ceiling),
            (1, 1),
            "a keeps the unit (rounded down: 0)"
        );
        let b = store
            .sync_shares(&key, &sync("b", holding(0, 0)))
            .await
            .unwrap();
        assert_eq!(parts(b.ceiling), (0, 0));
    }
    // b's turn: a lowers (its record drops once it holds nothing), then b gets the unit.
    at(REMAINDER_ROTATE_MS);
    let a = store
        .sync_shares(&key, &sync("a", holding(1, 1)))
        .await
        .unwrap();
    assert_eq!(parts(a.ceiling), (0, 0), "b's turn");
    let b = store
        .sync_shares(&key, &sync("b", holding(0, 0)))
        .await
        .unwrap();
    assert_eq!(
        parts(b.ceiling),
        (0, 0),
        "a still holds it: within what the others hold"
    );
    at(REMAINDER_ROTATE_MS + 1_000);
    store
        .sync_shares(&key, &sync("a", holding(0, 0)))
        .await
        .unwrap();
    let b = store
        .sync_shares(&key, &sync("b", holding(0, 0)))
        .await
        .unwrap();
    assert_eq!(parts(b.ceiling), (1, 1), "b's turn, a lowered");
}
