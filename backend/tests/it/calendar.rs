//! Calendar windows (fixed_window's `calendar`) on the memory store and a real redis-server, held
//! to sluice_core at fixed clocks around month, week and day edges (no sleeps): every decision
//! and every commit equals core's on the state core's own transitions reached, so the Lua twin
//! (prelude.lua's window_of) and core's calendar arithmetic agree at the edges.
use std::time::Duration;

use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::Store;
use sluice_core::commit::{commit, Commit};
use sluice_core::{Nanos, Rule, State};

use crate::store_suite::rule;
use crate::support::RedisServer;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
// 2027-03-01T00:00:00Z (a Monday, after a 28-day February), and 2028-03-01T00:00:00Z (after a
// leap February, a Wednesday).
const MAR_2027: Nanos = 1_803_859_200 * S;
const MAR_2028: Nanos = 1_835_481_600 * S;
const H: u64 = 3_600 * S;

/// Times around the edges: just before, at and after midnight, in UTC and at +08:00 / -03:30.
fn times() -> Vec<Nanos> {
    let mut out = Vec::new();
    let (s, ms) = (S as i64, MS as i64);
    for edge in [
        MAR_2027 - 8 * H,
        MAR_2027,
        MAR_2028,
        MAR_2028 + 3 * H + 1_800 * S,
    ] {
        for d in [-2 * s, -ms, -1, 0, 1, ms, 2 * s] {
            out.push(edge.wrapping_add_signed(d));
        }
    }
    out
}

async fn agrees_with_core(store: &dyn Store) {
    for (unit, zone) in [
        ("month", "UTC"),
        ("month", "+08:00"),
        ("month", "-03:30"),
        ("week", "UTC"),
        ("day", "+08:00"),
    ] {
        let action = format!("cal-{unit}-{}", zone.replace([':', '+'], "_"));
        let r: Rule = rule(&format!(
            r#"{{"action":"{action}","algorithm":"fixed_window","capacity":5,"calendar":{{"unit":"{unit}","zone":"{zone}"}}}}"#
        ));
        let params = r.params();
        let mut state = State::Fresh;
        for (i, t) in times().into_iter().enumerate() {
            let q = [2, 3, 1, 4][i % 4];
            let (want, next) = params.decide(&state, t, q);
            let got = store.throttle(&r, "k", q, Some(t)).await.expect("throttle");
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
                let got = store
                    .commit(&r, "k", &id, c, Some(t + MS))
                    .await
                    .expect("commit");
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
async fn a_month_resets_on_the_first(store: &dyn Store) {
    let r = rule(
        r#"{"action":"cal-budget","algorithm":"fixed_window","capacity":1000000,"calendar":{"unit":"month"}}"#,
    );
    let feb = MAR_2027 - S;
    let d = store
        .throttle(&r, "t", 999_999, Some(feb))
        .await
        .expect("throttle");
    assert!(d.allowed);
    assert_eq!(d.reset_after, S);
    let d = store
        .throttle(&r, "t", 2, Some(feb))
        .await
        .expect("throttle");
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(S));
    let d = store
        .throttle(&r, "t", 1_000_000, Some(MAR_2027))
        .await
        .expect("throttle");
    assert!(d.allowed, "{}", store.kind());
    assert_eq!(d.reset_after, 31 * 24 * H);
}

#[tokio::test]
async fn memory_calendar_windows_agree_with_core() {
    let store = MemoryStore::new();
    agrees_with_core(&store).await;
    a_month_resets_on_the_first(&store).await;
}

#[tokio::test]
async fn redis_calendar_windows_agree_with_core() {
    let server = RedisServer::start();
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.timeout = Duration::from_secs(5);
    let store = RedisStore::connect(config).await.expect("connect");
    agrees_with_core(&store).await;
    a_month_resets_on_the_first(&store).await;
}
