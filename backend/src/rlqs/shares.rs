//! What this replica knows of the RLQS share records in the store ([`crate::store::rlqs`]):
//! its id, per key the syncs that failed in a row, and the records of stopped replicas it took
//! over (orphans), whose refill it pays until they expire. The ledger's side of the sync is
//! `ledger/registry.rs`; this file holds the state and the payments, and never the ledger.
//!
//! Bounds: one view per key this replica holds or pays an orphan of; one adopted record per
//! stopped replica per key, dropped at its expiry (at most the assignment TTL after the stop).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use sluice_core::rlqs::shape::Shape;
use sluice_core::rlqs::TICK_MS;
use sluice_core::time::{NANOS_PER_MILLI, NANOS_PER_SEC};
use sluice_core::Rule;

use super::pay;
use crate::log_limit::{LogLimit, LOG_EVERY};
use crate::state::App;
use crate::store::rlqs::{Orphan, ShareKey, ShareRecord};
use crate::store::StoreError;

/// A record not paid for this long (three ticks) is an orphan.
pub const STALE_MS: u64 = 3 * TICK_MS;

/// Failed syncs in a row after which the other replicas count as unknown.
pub const UNKNOWN_AFTER: u32 = 3;

/// Most stale keys the index sweep looks at per tick.
pub const SWEEP_LIMIT: usize = 64;

const NANO: u128 = NANOS_PER_SEC as u128;

/// A stopped replica's record this one took over.
#[derive(Debug, Clone)]
pub struct Adopted {
    record: ShareRecord,
    paid_ms: u64,
    expires_ms: u64,
    carry_nano: u128,
}

impl Adopted {
    /// Takes `orphan` over: its record marks when its replica last synced, which paid through
    /// the tick before at the latest, so the refill is owed from one tick earlier.
    pub fn new(orphan: Orphan) -> Adopted {
        Adopted {
            record: orphan.record,
            paid_ms: orphan.paid_ms.saturating_sub(TICK_MS),
            expires_ms: orphan.expires_ms,
            carry_nano: 0,
        }
    }

    /// Its token bucket (burst and rate) as recorded.
    fn shape(&self) -> Shape {
        Shape {
            max_tokens: self.record.burst,
            tokens_per_fill: self.record.tokens_per_fill,
            fill_interval_s: self.record.fill_interval_s.max(1),
        }
    }
}

/// What this replica knows of one key's records.
#[derive(Debug, Default)]
pub struct View {
    /// Syncs failed in a row.
    pub failures: u32,
    /// The store's time at the last sync, and when that was here.
    pub synced: Option<(u64, Instant)>,
    /// Stopped replicas' records taken over, paid until they expire.
    pub adopted: Vec<Adopted>,
}

impl View {
    /// The store's time now, estimated from the last sync.
    pub fn store_now(&self, now: Instant) -> Option<u64> {
        self.synced.map(|(ms, at)| {
            let since = now.saturating_duration_since(at).as_millis();
            ms.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
        })
    }

    /// Σ bursts and Σ rates (on `fill_s`) of the adopted records, and the store time the last
    /// one expires.
    pub fn adopted_total(&self, fill_s: u32) -> (u32, u32, u64) {
        self.adopted.iter().fold((0, 0, 0), |(b, n, e), a| {
            (
                b.saturating_add(a.record.burst),
                n.saturating_add(rate_on(a.shape(), fill_s)),
                e.max(a.expires_ms),
            )
        })
    }

    /// Pays the refill the adopted records earned up to `now_ms` (their expiry at most), as
    /// post-debits (never denied, carried as debt); drops those paid through their expiry. A
    /// failed payment is retried on the next sync. Returns the units paid.
    pub async fn pay_adopted(
        &mut self,
        app: &App,
        rule: &Arc<Rule>,
        key: &str,
        now_ms: u64,
    ) -> u64 {
        let mut paid = 0u64;
        for a in &mut self.adopted {
            let to = now_ms.min(a.expires_ms);
            if to <= a.paid_ms {
                continue;
            }
            let earned = a.carry_nano
                + a.shape()
                    .refill_nano_units((to - a.paid_ms).saturating_mul(NANOS_PER_MILLI));
            // The last payment rounds up: a fraction left over is still owed.
            let units = if to == a.expires_ms {
                earned.div_ceil(NANO)
            } else {
                earned / NANO
            };
            let units = u64::try_from(units).unwrap_or(u64::MAX);
            if units > 0 {
                if let Err(e) = pay::post_debit(app, rule, key, units).await {
                    store_failed("a stopped replica's refill could not be paid (retried)", &e);
                    continue;
                }
            }
            a.carry_nano = earned.saturating_sub(u128::from(units) * NANO);
            a.paid_ms = to;
            paid = paid.saturating_add(units);
        }
        self.adopted.retain(|a| a.paid_ms < a.expires_ms);
        paid
    }
}

/// This replica's id and its view of the store's records.
pub struct Registry {
    /// This replica's id: random, so a restarted backend is a new replica and its old records
    /// become orphans it can take over.
    pub instance: String,
    /// Per key this replica has a record of.
    pub views: HashMap<ShareKey, View>,
    /// Keys found with no record at all, to drop from the index on the next sweep.
    pub empty: Vec<ShareKey>,
    /// The store failed since the last tick's first step: syncs fail at once until the next.
    pub unreachable: bool,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            instance: format!("{:016x}", rand::random::<u64>()),
            views: HashMap::new(),
            empty: Vec::new(),
            unreachable: false,
        }
    }
}

impl Registry {
    /// Keys this replica pays orphans of.
    pub fn adopting(&self) -> impl Iterator<Item = &ShareKey> {
        self.views
            .iter()
            .filter(|(_, v)| !v.adopted.is_empty())
            .map(|(k, _)| k)
    }
}

/// The longest a sync step may take (or the store deadline, if shorter). Redis answers one in
/// well under a millisecond; a bound this short keeps an outage from slowing the ledger's tick,
/// whose other steps (paying refill, halving rates the store cannot pay) must keep their pace.
pub const STEP_DEADLINE: Duration = Duration::from_millis(200);

/// Runs a share step under [`STEP_DEADLINE`]; failures are counted like any store call's.
pub async fn bounded<T>(
    app: &App,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    app.store_call_within(STEP_DEADLINE.min(app.store_deadline), call)
        .await
}

/// Per process: a store outage fails every sync of every key on every tick.
static FAILURES: LazyLock<LogLimit> = LazyLock::new(|| LogLimit::new(LOG_EVERY));

/// Logs a failed step with the store, at most one line per kind per [`LOG_EVERY`] with the
/// count since the previous line: an outage fails every key's sync every tick.
pub fn store_failed(what: &'static str, error: &dyn std::fmt::Display) {
    if let Some(count) = FAILURES.admit(what) {
        let every = LOG_EVERY.as_secs();
        tracing::warn!(count, error = %error,
            "rlqs: {what} ({count} since the last line; at most one line per {every} s)");
    }
}

/// `s`'s rate on a fill interval of `fill_s` seconds, rounded up.
pub fn rate_on(s: Shape, fill_s: u32) -> u32 {
    let (n, f) = (
        u64::from(s.tokens_per_fill),
        u64::from(s.fill_interval_s.max(1)),
    );
    u32::try_from((n * u64::from(fill_s.max(1))).div_ceil(f)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_move_between_fill_intervals_rounded_up() {
        let s = Shape {
            max_tokens: 0,
            tokens_per_fill: 3,
            fill_interval_s: 2,
        };
        assert_eq!(rate_on(s, 2), 3);
        assert_eq!(rate_on(s, 1), 2, "1.5 per second rounds up");
        assert_eq!(rate_on(s, 4), 6);
    }
}
