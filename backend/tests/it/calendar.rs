//! Calendar windows (fixed_window's `calendar`) on the memory store, a real redis-server and a
//! Redis Cluster, held to sluice_core at fixed clocks around month, week and day edges and around
//! daylight-saving changes in named zones (no sleeps): every decision and every commit equals
//! core's on the state core's own transitions reached, so the Lua twin (prelude.lua's window_of:
//! its own arithmetic for offsets, the boundaries core passes for named zones) and core agree at
//! the edges.
use std::sync::Arc;
use std::time::Duration;

use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::{ManualClock, Store};
use sluice_core::commit::{commit, Commit};
use sluice_core::{Limit, Nanos, Params, Rule, State};

use crate::store_suite::rule;
use crate::support::{RedisCluster, RedisServer};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
// 2027-03-01T00:00:00Z (a Monday, after a 28-day February), and 2028-03-01T00:00:00Z (after a
// leap February, a Wednesday).
const MAR_2027: Nanos = 1_803_859_200 * S;
const MAR_2028: Nanos = 1_835_481_600 * S;
const H: u64 = 3_600 * S;
// Europe/Paris 2026: local midnights of March 29 (clocks go 02:00 CET -> 03:00 CEST at 01:00Z),
// October 25 (03:00 CEST -> 02:00 CET at 01:00Z), April 1; America/New_York 2026-11-01
// (02:00 EDT -> 01:00 EST at 06:00Z).
const PARIS_MAR_29: Nanos = 1_774_738_800 * S;
const PARIS_APR_1: Nanos = 1_774_994_400 * S;
const PARIS_OCT_25: Nanos = 1_792_879_200 * S;
const NY_NOV_1: Nanos = 1_793_505_600 * S;

/// Times around the edges: just before, at and after midnight, in UTC and at +08:00 / -03:30,
/// and around Paris's and New York's daylight-saving changes.
fn times() -> Vec<Nanos> {
    let mut out = Vec::new();
    let (s, ms) = (S as i64, MS as i64);
    for edge in [
        MAR_2027 - 8 * H,
        MAR_2027,
        MAR_2028,
        MAR_2028 + 3 * H + 1_800 * S,
        PARIS_MAR_29,
        PARIS_MAR_29 + 2 * H,
        PARIS_APR_1,
        PARIS_OCT_25 + 3 * H,
        PARIS_OCT_25 + 25 * H,
        NY_NOV_1 + 6 * H,
        NY_NOV_1 + 25 * H,
    ] {
        for d in [-2 * s, -ms, -1, 0, 1, ms, 2 * s] {
            out.push(edge.wrapping_add_signed(d));
        }
    }
    // In order: a named zone's script gets the boundaries around the time asked, so a state
    // stored more than a window after it would be refused (a_named_zone_tolerates_...).
    out.sort_unstable();
    out
}

async fn agrees_with_core(store: &dyn Store, clock: &ManualClock) {
    for (unit, zone) in [
        ("month", "UTC"),
        ("month", "+08:00"),
        ("month", "-03:30"),
        ("week", "UTC"),
        ("day", "+08:00"),
        ("month", "Europe/Paris"),
        ("week", "Europe/Paris"),
        ("day", "Europe/Paris"),
        ("day", "America/New_York"),
    ] {
        let action = format!("cal-{unit}-{}", zone.replace([':', '+', '/'], "_"));
        let r: Rule = rule(&format!(
            r#"{{"action":"{action}","algorithm":"fixed_window","capacity":5,"calendar":{{"unit":"{unit}","zone":"{zone}"}}}}"#
        ));
        let params = r.params();
        let mut state = State::Fresh;
        for (i, t) in times().into_iter().enumerate() {
            let q = [2, 3, 1, 4][i % 4];
            let (want, next) = params.decide(&state, t, q);
            clock.set(t);
            let got = store.throttle(&r, "k", q).await.expect("throttle");
            assert_eq!(got, want, "{unit} {zone} step {i} ({})", store.kind());
            state = next;
            if i % 3 == 0 && want.allowed {
                let c = Commit {
                    reserved: q,
                    actual: 1,
                    reserved_at: t,
                };
                let (done, next) = commit(&params, &state, t + MS, c);
                let id = format!("r{i}");
                // Recorded in flight at its decision, as a throttle with a reservation_id does.
                let held = store.record_reservation(&r, "k", &id, q).await;
                assert!(held.expect("record"), "{unit} {zone} step {i}");
                clock.set(t + MS);
                let got = store.commit(&r, "k", &id, c).await.expect("commit");
                assert_eq!(
                    got.committed,
                    done,
                    "{unit} {zone} commit {i} ({})",
                    store.kind()
                );
                if let Some(next) = next {
                    state = next;
                }
            }
        }
    }
}

/// A month's budget resets on the 1st: the last second of February denies, March's first allows
/// the whole budget again, and reports a reset 31 days away.
async fn a_month_resets_on_the_first(store: &dyn Store, clock: &ManualClock) {
    let r = rule(
        r#"{"action":"cal-budget","algorithm":"fixed_window","capacity":1000000,"calendar":{"unit":"month"}}"#,
    );
    let feb = MAR_2027 - S;
    clock.set(feb);
    let d = store.throttle(&r, "t", 999_999).await.expect("throttle");
    assert!(d.allowed);
    assert_eq!(d.reset_after, S);
    clock.set(feb);
    let d = store.throttle(&r, "t", 2).await.expect("throttle");
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(S));
    clock.set(MAR_2027);
    let d = store.throttle(&r, "t", 1_000_000).await.expect("throttle");
    assert!(d.allowed, "{}", store.kind());
    assert_eq!(d.reset_after, 31 * 24 * H);
}

/// A Paris month and a Paris day across the spring change: the budget resets at local midnight
/// (22:00Z on March 31, CEST), and the day of the change is 23 hours long.
async fn a_paris_month_resets_at_local_midnight(store: &dyn Store, clock: &ManualClock) {
    let month = rule(
        r#"{"action":"cal-paris","algorithm":"fixed_window","capacity":1000,"calendar":{"unit":"month","zone":"Europe/Paris"}}"#,
    );
    clock.set(PARIS_APR_1 - S);
    let d = store.throttle(&month, "t", 1000).await.expect("throttle");
    assert!(d.allowed);
    assert_eq!(d.reset_after, S, "{}", store.kind());
    clock.set(PARIS_APR_1 - 1);
    let d = store.throttle(&month, "t", 1).await.expect("throttle");
    assert_eq!((d.allowed, d.retry_after), (false, Some(1)));
    clock.set(PARIS_APR_1);
    let d = store.throttle(&month, "t", 1000).await.expect("throttle");
    assert!(d.allowed, "{}", store.kind());
    // April is 30 days, all in CEST.
    assert_eq!(d.reset_after, 30 * 24 * H);
    let day = rule(
        r#"{"action":"cal-paris-day","algorithm":"fixed_window","capacity":5,"calendar":{"unit":"day","zone":"Europe/Paris"}}"#,
    );
    clock.set(PARIS_MAR_29);
    let d = store.throttle(&day, "t", 1).await.expect("throttle");
    assert_eq!(d.reset_after, 23 * H, "{}", store.kind());
}

/// With Redis `TIME` (no fixed time) a named zone's window is the one core computes now, give or
/// take the second between the reads.
async fn named_zone_on_the_real_clock(store: &dyn Store) {
    let r = rule(
        r#"{"action":"cal-now","algorithm":"fixed_window","capacity":5,"calendar":{"unit":"day","zone":"America/New_York"}}"#,
    );
    let Params::FixedWindow(p) = r.params() else {
        panic!("fixed_window");
    };
    let before = sluice_backend::clock::now_ns();
    let d = store.throttle(&r, "k", 1).await.expect("throttle");
    let after = sluice_backend::clock::now_ns();
    assert!(d.allowed && d.remaining == 4, "{d:?}");
    let end = p.bounds(before).1;
    let reset = before + d.reset_after;
    assert!(
        reset >= end.saturating_sub(after - before + S) && reset <= end + S,
        "{} resets at {reset}, core's window ends at {end}",
        store.kind()
    );
}

/// The cases at fixed times on `store` (deciding at `clock`), then on the store's own clock on
/// `real` (the same store without a clock of the test's).
async fn whole(store: &dyn Store, clock: &ManualClock, real: &dyn Store) {
    agrees_with_core(store, clock).await;
    a_month_resets_on_the_first(store, clock).await;
    a_paris_month_resets_at_local_midnight(store, clock).await;
    named_zone_on_the_real_clock(real).await;
}

#[tokio::test]
async fn memory_calendar_windows_agree_with_core() {
    let clock = ManualClock::new(0);
    let store = MemoryStore::new().with_clock(clock.clone());
    whole(&store, &clock, &MemoryStore::new()).await;
}

/// Two connections to one Redis: one passing the test's clock to the scripts, one leaving them
/// Redis `TIME`.
async fn both_clocks(config: RedisConfig) -> (RedisStore, Arc<ManualClock>, RedisStore) {
    let (fixed, clock) = crate::support::redis_at_fixed_times(config.clone(), 0).await;
    let real = RedisStore::connect(config).await.expect("connect");
    (fixed, clock, real)
}

/// The whole calendar suite on `target`, with a 5 s store timeout.
async fn whole_on(target: RedisTarget) {
    let mut config = RedisConfig::new(target);
    config.timeout = Duration::from_secs(5);
    let (store, clock, real) = both_clocks(config).await;
    whole(&store, &clock, &real).await;
}

#[tokio::test]
async fn redis_calendar_windows_agree_with_core() {
    let server = RedisServer::start();
    whole_on(RedisTarget::Single(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_calendar_windows_agree_with_core() {
    let cluster = RedisCluster::start();
    whole_on(RedisTarget::Cluster(cluster.urls())).await;
}

/// The script of a named zone's window, called as the store calls it but with the backend's clock
/// (the boundaries' centre) apart from Redis's time: up to a window apart it finds the window
/// core finds; beyond, it refuses, naming the time it could not place, rather than count in a
/// wrong window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_zone_tolerates_a_window_of_clock_skew_and_refuses_more() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let script = redis::Script::new(&format!(
        "{}\n{}",
        include_str!("../../lua/prelude.lua"),
        include_str!("../../lua/fixed_window.lua")
    ));
    let r = rule(
        r#"{"action":"skew","algorithm":"fixed_window","capacity":5,"calendar":{"unit":"day","zone":"Europe/Paris"}}"#,
    );
    let Limit::Calendar(cal) = r.limit() else {
        panic!("a calendar");
    };
    // Redis at 00:30 local on the 23-hour day; the backend's clock around it.
    let redis_now = PARIS_MAR_29 + H / 2;
    let want = r.params().decide(&State::Fresh, redis_now, 1).0;
    // The script called on `key` as the store calls it, the backend's clock at `backend_now`.
    let call = |key: String, backend_now: u64| {
        let mut invocation = script.key(key);
        invocation
            .arg(redis_now.to_string())
            .arg("1")
            .arg("600000")
            .arg(cal.script_arg(backend_now))
            .arg("5")
            .arg("0");
        invocation
    };
    for (i, backend_now) in [
        redis_now,
        redis_now - H,      // the backend an hour behind: still the day before
        redis_now + 22 * H, // ahead, late on the same (short) day
        redis_now + 23 * H, // ahead by a day: Redis's day is its "before"
        redis_now - 24 * H, // behind by a day: Redis's day is its "after"
    ]
    .into_iter()
    .enumerate()
    {
        let reply: Vec<redis::Value> = call(format!("k{i}"), backend_now)
            .invoke_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("skew {i}: {e}"));
        let reset = match &reply[3] {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::Int(n) => n.to_string(),
            other => panic!("reset {other:?}"),
        };
        assert_eq!(reset, want.reset_after.to_string(), "skew {i}");
    }
    for backend_now in [redis_now + 3 * 24 * H, redis_now - 2 * 24 * H] {
        let err = call("far".to_owned(), backend_now)
            .invoke_async::<Vec<redis::Value>>(&mut conn)
            .await
            .expect_err("no window for Redis's time");
        let text = err.to_string();
        assert!(
            text.contains("do not hold") && text.contains(&(redis_now / 1_000_000).to_string()),
            "{text}"
        );
    }
}
