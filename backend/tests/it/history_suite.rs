//! The history, top-denied and last-seen conformance suite, at fixed times: the same answers from
//! the memory store, a real redis-server and a real 3-master Redis Cluster.

use crate::support::{RedisCluster, RedisServer};

use std::time::Duration;

use sluice_backend::history::marks::ReportApplied;
use sluice_backend::history::{
    DeniedRecord, HistoryRecord, ReportMark, Tally, DENIED_BUCKET_MS, DENIED_KEEP,
    LAST_SEEN_SPAN_MS,
};
use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::{Activity, HistoryStore, Store};
use sluice_core::wire::HISTORY_STEP_MS;
use sluice_core::Action;

/// A step start (2023-11-14T22:13:20Z).
const T0: u64 = 1_700_000_000_000;

fn action(name: &str) -> Action {
    Action::parse(name).expect("valid action")
}

fn tally(values: [u64; 6]) -> Tally {
    Tally::from_values(values)
}

fn record(a: &str, step_ms: u64, values: [u64; 6], seen: u64) -> HistoryRecord {
    HistoryRecord {
        action: action(a),
        step_ms,
        tally: tally(values),
        withdrawn: Tally::default(),
        last_seen_ms: seen,
    }
}

fn denied(a: &str, key: &str, at_ms: u64, n: u64) -> DeniedRecord {
    DeniedRecord {
        action: action(a),
        key: key.into(),
        at_ms,
        denied: n,
    }
}

/// Steps add up per (action, step), stay apart across actions and steps, are read only within
/// the range, and last seen is the newest time given (for a day).
pub async fn history_round_trip(store: &dyn Store) {
    let s = HISTORY_STEP_MS;
    store
        .record_history(&[
            record("h.post", T0, [1, 2, 3, 4, 5, 6], T0 + 10),
            record("h.post", T0 + 2 * s, [10, 0, 0, 0, 0, 0], T0 + 2 * s + 5),
            record("h.other", T0, [0, 0, 7, 0, 0, 0], T0 + 1),
            record("h.a:b", T0, [1, 0, 0, 0, 0, 0], T0 + 1),
        ])
        .await
        .expect("record");
    // The same step again adds; an older last-seen time does not lower it; a zero tally only
    // carries a last-seen time.
    store
        .record_history(&[
            record("h.post", T0, [1, 1, 1, 1, 1, 1], T0 + 3),
            record("h.seen", T0, [0; 6], T0 + 7),
        ])
        .await
        .expect("record");
    let now = T0 + 2 * s + 100;
    let h = store
        .read_history(&action("h.post"), T0, 3, now)
        .await
        .expect("read");
    let mut steps = h.steps.clone();
    steps.sort_by_key(|(at, _)| *at);
    assert_eq!(
        steps,
        vec![
            (T0, tally([2, 3, 4, 5, 6, 7])),
            (T0 + 2 * s, tally([10, 0, 0, 0, 0, 0]))
        ]
    );
    assert_eq!(h.last_seen_ms, Some(T0 + 2 * s + 5));
    // Only the range is read.
    let h = store
        .read_history(&action("h.post"), T0 + s, 1, now)
        .await
        .expect("read");
    assert!(h.steps.is_empty(), "{:?}", h.steps);
    let o = store
        .read_history(&action("h.other"), T0, 3, now)
        .await
        .expect("read");
    assert_eq!(o.steps, vec![(T0, tally([0, 0, 7, 0, 0, 0]))]);
    // `a:b` and `a` never share a key.
    let ab = store
        .read_history(&action("h.a:b"), T0, 1, now)
        .await
        .expect("read");
    assert_eq!(ab.steps, vec![(T0, tally([1, 0, 0, 0, 0, 0]))]);
    let seen = store
        .read_history(&action("h.seen"), T0, 3, now)
        .await
        .expect("read");
    assert_eq!((seen.steps.len(), seen.last_seen_ms), (0, Some(T0 + 7)));
    // Nothing for an action never recorded.
    let none = store
        .read_history(&action("h.never"), T0, 360, now)
        .await
        .expect("read");
    assert_eq!((none.steps.len(), none.last_seen_ms), (0, None));
    // Steps on both sides of a 10-minute boundary (where the Redis store changes hash), and a
    // whole hour read at once.
    let boundary = T0 - T0 % 600_000 + 600_000;
    store
        .record_history(&[
            record("h.span", boundary - s, [1, 0, 0, 0, 0, 0], 0),
            record("h.span", boundary, [2, 0, 0, 0, 0, 0], 0),
            record("h.span", boundary + 358 * s, [3, 0, 0, 0, 0, 0], 0),
        ])
        .await
        .expect("record");
    let span = store
        .read_history(&action("h.span"), boundary - s, 2, now)
        .await
        .expect("read");
    let mut steps = span.steps;
    steps.sort_by_key(|(at, _)| *at);
    assert_eq!(
        steps,
        vec![
            (boundary - s, tally([1, 0, 0, 0, 0, 0])),
            (boundary, tally([2, 0, 0, 0, 0, 0]))
        ]
    );
    let hour = store
        .read_history(&action("h.span"), boundary - s, 360, now)
        .await
        .expect("read");
    assert_eq!(hour.steps.len(), 3, "{:?}", hour.steps);
    // A day later the last-seen time is no longer reported.
    let later = store
        .read_history(
            &action("h.post"),
            T0,
            1,
            T0 + 2 * s + 5 + LAST_SEEN_SPAN_MS + 1,
        )
        .await
        .expect("read");
    assert_eq!(later.last_seen_ms, None);
}

/// Top denied sums a key's minute buckets over the last 5 minutes (the current minute and the
/// five before), ranks most denied first (ties by key), and keeps each bucket bounded.
pub async fn top_denied_round_trip(store: &dyn Store) {
    let m = DENIED_BUCKET_MS;
    let long = "k".repeat(10_000);
    store
        .record_denied(&[
            denied("t.post", "mallory", T0, 5),
            denied("t.post", "mallory", T0 + m, 5),
            denied("t.post", "eve", T0 + 2 * m, 3),
            denied("t.post", "", T0 + 2 * m, 3),
            denied("t.post", "{tag}%/\u{0}✓", T0 + 2 * m, 2),
            denied("t.post", &long, T0 + 2 * m, 1),
            denied("t.post", "old", T0 - 10 * m, 100),
            denied("t.other", "mallory", T0, 1),
        ])
        .await
        .expect("record");
    let now = T0 + 2 * m + 30_000;
    let top = store
        .top_denied(&action("t.post"), now, 10)
        .await
        .expect("top");
    assert_eq!(
        top,
        vec![
            ("mallory".to_owned(), 10),
            (String::new(), 3),
            ("eve".to_owned(), 3),
            ("{tag}%/\u{0}✓".to_owned(), 2),
            (long.clone(), 1),
        ]
    );
    assert_eq!(
        store
            .top_denied(&action("t.post"), now, 2)
            .await
            .expect("top")
            .len(),
        2
    );
    // One key's own minutes, newest first, zeros and other actions left out.
    let mine = |key: &'static str| async move {
        store
            .key_denied(&action("t.post"), key, now)
            .await
            .expect("key denied")
    };
    let minute = |at: u64| at - at % m;
    assert_eq!(
        mine("mallory").await,
        vec![(minute(T0 + m), 5), (minute(T0), 5)]
    );
    assert_eq!(mine("eve").await, vec![(minute(T0 + 2 * m), 3)]);
    assert_eq!(mine("").await, vec![(minute(T0 + 2 * m), 3)]);
    assert!(mine("nobody").await.is_empty());
    assert!(mine("old").await.is_empty(), "older than the buckets read");
    // Five minutes on, the first bucket (T0) is still read; at six minutes it is not.
    let at = |mins: u64| T0 + mins * m + 1;
    let first = |top: Vec<(String, u64)>| {
        top.into_iter()
            .find(|(k, _)| k == "mallory")
            .map(|(_, n)| n)
    };
    assert_eq!(
        first(
            store
                .top_denied(&action("t.post"), at(5), 10)
                .await
                .expect("top")
        ),
        Some(10)
    );
    assert_eq!(
        first(
            store
                .top_denied(&action("t.post"), at(6), 10)
                .await
                .expect("top")
        ),
        Some(5)
    );
    assert!(store
        .top_denied(&action("t.post"), at(8), 10)
        .await
        .expect("top")
        .is_empty());
    assert!(store
        .top_denied(&action("t.none"), now, 10)
        .await
        .expect("top")
        .is_empty());

    // A spray of denied keys keeps a bucket bounded and the heavy hitter on top.
    let spray: Vec<DeniedRecord> = (0..DENIED_KEEP as u64 + 100)
        .map(|i| denied("t.spray", &format!("spray{i}"), T0, 1))
        .collect();
    for chunk in spray.chunks(50) {
        store.record_denied(chunk).await.expect("record");
        store
            .record_denied(&[denied("t.spray", "victim", T0, 2)])
            .await
            .expect("record");
    }
    let all = store
        .top_denied(&action("t.spray"), T0 + 1, 100_000)
        .await
        .expect("top");
    assert_eq!(
        all.len(),
        DENIED_KEEP,
        "one bucket holds at most DENIED_KEEP keys"
    );
    let rounds = spray.chunks(50).count() as u64;
    assert_eq!(all[0], ("victim".to_owned(), 2 * rounds));
}

/// A key's last-seen time comes from the recent activity.
pub async fn key_last_seen_round_trip(store: &dyn Store) {
    let a = action("s.post");
    store
        .record_activity(&[Activity {
            action: a.clone(),
            key: "alice".into(),
            last_seen_ms: T0 + 42,
            allowed: 1,
            denied: 0,
        }])
        .await
        .expect("activity");
    assert_eq!(
        store.key_last_seen(&a, "alice").await.expect("seen"),
        Some(T0 + 42)
    );
    assert_eq!(store.key_last_seen(&a, "bob").await.expect("seen"), None);
    assert_eq!(
        store
            .key_last_seen(&action("s.none"), "alice")
            .await
            .expect("seen"),
        None
    );
}

/// A filter report applies once per (action, reporter, seq), in seq order, whatever the copies.
pub async fn reports_apply_once(store: &dyn Store) {
    let mark = |reporter: &str, seq| ReportMark {
        reporter: reporter.into(),
        seq,
        now_ms: T0,
        shared: false,
    };
    let passed = |n| record("rep", T0, [0, 0, 0, 0, n, n], T0 + 5);
    let apply = |m: ReportMark, r: HistoryRecord| async move {
        store.apply_report(&m, &r).await.expect("apply")
    };
    let applied = ReportApplied::Applied {
        dropped: 0,
        shed: 0,
    };
    let copy = ReportApplied::Copy;
    assert_eq!(apply(mark("w1", 1), passed(3)).await, applied);
    assert_eq!(apply(mark("w1", 1), passed(3)).await, copy, "a copy");
    assert_eq!(
        apply(mark("w2", 1), passed(1)).await,
        applied,
        "another reporter"
    );
    assert_eq!(apply(mark("w1", 2), passed(2)).await, applied);
    assert_eq!(apply(mark("w1", 1), passed(3)).await, copy, "a late copy");
    // The mark is per action: the same report's other action is applied once too.
    let other = || record("rep2", T0, [0, 0, 0, 1, 0, 0], 0);
    assert_eq!(apply(mark("w1", 2), other()).await, applied);
    assert_eq!(apply(mark("w1", 2), other()).await, copy);
    // A zero record only raises the mark (an action without a rule, in the shared set).
    let shared = ReportMark {
        shared: true,
        ..mark("w1", 3)
    };
    assert_eq!(
        apply(shared.clone(), record("rep", T0, [0; 6], 0)).await,
        applied
    );
    assert_eq!(apply(shared, record("rep", T0, [0; 6], 0)).await, copy);
    assert_eq!(apply(mark("w1", 3), passed(3)).await, applied);
    assert_eq!(apply(mark("w1", 3), passed(9)).await, copy);
    let held = store
        .read_history(&action("rep"), T0, 1, T0)
        .await
        .expect("read");
    assert_eq!(held.steps, vec![(T0, tally([0, 0, 0, 0, 9, 9]))]);
    assert_eq!(held.last_seen_ms, Some(T0 + 5));
}

async fn whole_suite(store: &dyn Store) {
    reports_apply_once(store).await;
    history_round_trip(store).await;
    top_denied_round_trip(store).await;
    key_last_seen_round_trip(store).await;
}

#[tokio::test]
async fn memory_store_passes_the_history_suite() {
    whole_suite(&MemoryStore::with_max_keys(1_000)).await;
}

#[tokio::test]
async fn redis_store_passes_the_history_suite_and_every_count_expires() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(RedisConfig::new(RedisTarget::Single(redis.url())))
        .await
        .expect("connect");
    whole_suite(&store).await;
    // Every key history writes carries a TTL (so volatile-* eviction may take it, never the
    // rules): a 10-minute block of steps an hour and ten minutes, last seen a day, a denied
    // bucket seven minutes.
    let ttl = |key: &str| -> i64 { redis.cli(&["PTTL", key]).trim().parse().expect("a PTTL") };
    let step = ttl(&format!("{{sluice:history:h.post}}:{}", T0 - T0 % 600_000));
    assert!((3_600_000..=4_200_000).contains(&step), "{step}");
    let seen = ttl("{sluice:history:h.post}:seen");
    assert!(
        (LAST_SEEN_SPAN_MS as i64 - 60_000..=LAST_SEEN_SPAN_MS as i64).contains(&seen),
        "{seen}"
    );
    let bucket = ttl(&format!(
        "{{sluice:denied:t.post}}:{}",
        sluice_backend::history::denied_bucket(T0)
    ));
    assert!((360_000..=420_000).contains(&bucket), "{bucket}");
    let keys = redis.cli(&["KEYS", "*"]);
    for key in keys.lines().filter(|k| !k.is_empty()) {
        assert!(ttl(key) > 0, "{key} has no TTL");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_passes_the_history_suite() {
    let cluster = RedisCluster::start();
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = Duration::from_secs(5);
    let store = RedisStore::connect(config)
        .await
        .expect("connect to the cluster");
    whole_suite(&store).await;
}

/// A history write Redis refuses (Redis killed) is kept and written by a later flush once Redis is
/// back, so a short outage loses no history; the live activity of the refused flush is dropped
/// (and counted), as before.
#[tokio::test]
async fn history_refused_by_a_dead_redis_is_written_when_it_is_back() {
    use sluice_backend::activity::{write_flush, ActivityBook};
    use sluice_backend::metrics::Metrics;
    use std::time::Instant;

    let mut redis = RedisServer::start();
    let port = redis.port;
    let mut config = RedisConfig::new(RedisTarget::Single(redis.url()));
    config.timeout = Duration::from_millis(300);
    let store = RedisStore::connect(config).await.expect("connect");
    let (book, metrics) = (ActivityBook::new(), Metrics::new());
    let a = action("outage");
    let now = T0 + 5_000;
    book.record(&a, "k", true, now);
    let flush = book.take_flush(Instant::now(), |_| false);
    write_flush(&book, &store, &metrics, flush, now)
        .await
        .expect("redis up");

    redis.kill();
    book.record(&a, "k", false, now + 1);
    book.record(&a, "k", false, now + 2);
    let flush = book.take_flush(Instant::now(), |_| false);
    assert!(write_flush(&book, &store, &metrics, flush, now)
        .await
        .is_err());

    let _redis = RedisServer::start_on_port(port);
    // The connection manager reconnects on its own; keep flushing (nothing new) until it has.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let flush = book.take_flush(Instant::now(), |_| false);
        if write_flush(&book, &store, &metrics, flush, now)
            .await
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "redis did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let h = store.read_history(&a, T0, 1, now).await.expect("read");
    // The restarted Redis is empty: what it holds is exactly the flush it refused.
    assert_eq!(h.steps, vec![(T0, tally([0, 0, 2, 0, 0, 0]))]);
    assert_eq!(h.last_seen_ms, Some(now + 2));
    assert!(
        metrics.encode().contains("sluice_activity_dropped_total 2"),
        "the refused flush's activity record and denied-key record are counted as dropped"
    );
}
