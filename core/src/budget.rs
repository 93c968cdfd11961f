//! One key's budget record, beyond its throttle state: the reservations in flight and the debits
//! its commits made beyond their reservations (the words: docs/cost-budgets.md, "The words"). The dashboard shows them per key
//! (`KeyActionState.budget`); decisions never read them.
//!
//! - **In flight**: a throttle request that carries a `reservation_id` and is allowed is recorded
//!   as (id, units, time) until its commit removes it (once: a duplicate commit finds nothing), or
//!   until [`RESERVATION_IN_FLIGHT_MS`] has passed, when it stops counting: a request that was
//!   reset, or whose usage never came, is never committed. At most [`MAX_IN_FLIGHT_PER_KEY`] are
//!   listed; past it the expired ones are dropped, and if none has expired the new one is not
//!   recorded.
//! - **Overshoot**: each commit that debited (actual > reserved) adds its `debited` and its
//!   `overshoot` (the part that did not fit) to sums that count until [`budget_until_ms`] of the
//!   latest such commit: the end of a fixed window (so a new window starts from 0), and for the
//!   others the time by which the budget is surely whole again. A commit after that starts from 0.
//! - **Debt**: not part of this record. A debit that did not fit is carried in the throttle
//!   state itself (its level above the capacity, [`crate::commit`]), where every decision sees
//!   it; [`debt`] reads it from a peek for the key view.
//! - **Reset**: a key reset (`DELETE /v1/keys`) drops the record with the throttle state, in the
//!   same atomic step, and a later commit of a reservation made before it changes nothing
//!   ([`before_reset`]): the key is as if never seen.
//!
//! The memory store keeps this record; the Redis store keeps the same in two hashes next to the
//! state (`commit.lua` and `budget_record.lua` are its twins, held to it by the store suite).
//! Times are store times in whole milliseconds.

use std::collections::HashMap;

use crate::commit::{meter_level_ns, Commit, Committed};
use crate::decision::Decision;
use crate::limits::{LEASE_RETURN_SPAN_MS, MAX_IN_FLIGHT_PER_KEY, RESERVATION_IN_FLIGHT_MS};
use crate::params::Params;
use crate::state::State;
use crate::time::{Nanos, NANOS_PER_MILLI};
use crate::wire::KeyBudget;

/// When the budget a commit at `now` debited into is surely whole again, in ms since the epoch,
/// `state` being the key's state after the commit: a fixed window's end (calendar or not); for a
/// sliding window the end of the next window (its counts weigh until then); for a sliding log
/// one window after now; for the meters now plus the drain time of a full meter, or of the
/// meter's level when it is in debt (above full).
pub fn budget_until_ms(params: &Params, state: &State, now: Nanos) -> u64 {
    let now_ms = now / NANOS_PER_MILLI;
    match *params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => {
            let level = meter_level_ns(params, state, now).unwrap_or(0);
            now_ms + m.tolerance().max(level).div_ceil(NANOS_PER_MILLI)
        }
        Params::FixedWindow(w) => w.bounds(now).1 / NANOS_PER_MILLI,
        Params::SlidingWindow(w) => (now_ms / w.window_ms + 2) * w.window_ms,
        Params::SlidingLog(w) => now_ms + w.window_ms,
    }
}

/// The units a key's budget is spent above its size, read from a quantity-0 peek of its state
/// (the key view's `KeyBudget::debt`): a commit's debit that did not fit is carried
/// ([`crate::commit`]), and nothing is left until the limit has paid it back. A meter's debt is
/// its level above the tolerance (the peek's `reset_after` is the level in drain time), in
/// units rounded up (a fraction of a unit still owed leaves nothing); a window's or a sliding
/// log's is its count above the capacity (a sliding window's weighted count, rounded up).
pub fn debt(params: &Params, peek: &Decision) -> u64 {
    match *params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => peek
            .reset_after
            .saturating_sub(m.tolerance())
            .div_ceil(m.interval.max(1)),
        Params::FixedWindow(_) | Params::SlidingWindow(_) | Params::SlidingLog(_) => {
            let over = (peek.level - params.capacity() as f64).ceil();
            if over > 0.0 {
                over as u64
            } else {
                0
            }
        }
    }
}

/// Whether a commit of a reservation decided at `reserved_at` (store clock) comes from before
/// the key's latest reset, made at the store millisecond `reset_ms` (`None`: no reset remembered):
/// at or before that millisecond. Such a commit changes nothing. Why: the reset dropped the units
/// it reserved, so a refund could only give back units of reservations made since (admitting them
/// twice), and a debit would charge the fresh budget for spending the operator wiped. A
/// reservation in the reset's own millisecond counts as before it: its refund is lost, never one
/// given to the reservations after.
pub fn before_reset(reserved_at: Nanos, reset_ms: Option<u64>) -> bool {
    reset_ms.is_some_and(|reset| reserved_at / NANOS_PER_MILLI <= reset)
}

/// The commit a store applies for a caller's `claim`, given what the store recorded when the
/// reservation was decided (`recorded`: its units and the store millisecond it was recorded at,
/// [`BudgetRecord::reservation`]). Why: `reserved` and `reserved_at` are what a caller says, and a
/// caller could otherwise claim units it never reserved and have them credited (a fresh id,
/// `reserved: 5, actual: 0` on a spent budget gave back 5). So a commit refunds at most the units
/// recorded under its id, never from a time later than the record's; a commit with no record
/// refunds nothing and debits its whole `actual` (as a reservation of 0 would).
pub fn bounded_commit(claim: Commit, recorded: Option<(u64, u64)>) -> Commit {
    match recorded {
        Some((units, at_ms)) => Commit {
            reserved: claim.reserved.min(units),
            // The end of the record's millisecond: the decision was at or before it.
            reserved_at: claim
                .reserved_at
                .min(at_ms.saturating_mul(NANOS_PER_MILLI) + (NANOS_PER_MILLI - 1)),
            ..claim
        },
        None => Commit {
            reserved: 0,
            ..claim
        },
    }
}

/// How the sluice filter names the commit that gives a lease grant's unspent units back
/// (`lease-<grant id>`, filter/src/lease/returns.rs). Such a commit has no reservation of its own
/// recorded: its `reserved` (the units granted) is bounded instead by the key's lease pool, the
/// units granted as leases within [`LEASE_RETURN_SPAN_MS`] and not yet given back
/// ([`BudgetRecord::lease_pool`]).
pub const LEASE_RETURN_ID_PREFIX: &str = "lease-";

/// Whether a commit id is a lease return's ([`LEASE_RETURN_ID_PREFIX`]).
pub fn is_lease_return(id: &str) -> bool {
    id.starts_with(LEASE_RETURN_ID_PREFIX)
}

/// One key's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetRecord {
    /// The reservations in flight: id → (units, recorded at ms).
    in_flight: HashMap<String, (u64, u64)>,
    overshoot: u64,
    debited: u64,
    until_ms: u64,
    /// Lease units granted and not given back: (units, until ms, latest grant ms).
    leases: (u64, u64, u64),
}

/// Whether a reservation recorded at `at_ms` still counts at `now_ms`.
fn live(at_ms: u64, now_ms: u64) -> bool {
    at_ms.saturating_add(RESERVATION_IN_FLIGHT_MS) > now_ms
}

impl BudgetRecord {
    /// Records an allowed reservation of `units` under `id` at `now_ms` as in flight; false when
    /// the key already lists [`MAX_IN_FLIGHT_PER_KEY`] live ones (not recorded).
    pub fn record_reservation(&mut self, id: &str, units: u64, now_ms: u64) -> bool {
        if self.in_flight.len() >= MAX_IN_FLIGHT_PER_KEY && !self.in_flight.contains_key(id) {
            self.in_flight.retain(|_, (_, at)| live(*at, now_ms));
            if self.in_flight.len() >= MAX_IN_FLIGHT_PER_KEY {
                return false;
            }
        }
        self.in_flight.insert(id.to_owned(), (units, now_ms));
        true
    }

    /// Adds a lease grant of `units` at `now_ms` to the key's lease pool, which a lease return
    /// may then give back from ([`is_lease_return`]) for [`LEASE_RETURN_SPAN_MS`] after the
    /// latest grant.
    pub fn record_lease_grant(&mut self, units: u64, now_ms: u64) {
        let (pool, until, _) = self.leases;
        let pool = if until > now_ms { pool } else { 0 };
        self.leases = (
            pool.saturating_add(units),
            now_ms + LEASE_RETURN_SPAN_MS,
            now_ms,
        );
    }

    /// The lease pool at `now_ms` as a record (units, latest grant ms), if it holds any.
    pub fn lease_pool(&self, now_ms: u64) -> Option<(u64, u64)> {
        let (pool, until, at) = self.leases;
        (until > now_ms && pool > 0).then_some((pool, at))
    }

    /// Takes `units` a lease return was bounded by out of the pool.
    pub fn spend_lease_pool(&mut self, units: u64) {
        self.leases.0 = self.leases.0.saturating_sub(units);
    }

    /// The reservation recorded in flight under `id`: (units, recorded at ms), live or not
    /// (a commit after [`RESERVATION_IN_FLIGHT_MS`] may still be owed its refund; the record
    /// is dropped only when the key's list is full or the record is spent).
    pub fn reservation(&self, id: &str) -> Option<(u64, u64)> {
        self.in_flight.get(id).copied()
    }

    /// Records that a commit of `id` (not a duplicate) at `now_ms` did `committed`: its
    /// reservation is no longer in flight, and a debit adds to the sums, which then count until
    /// `until_ms` ([`budget_until_ms`]).
    pub fn record_commit(&mut self, id: &str, committed: &Committed, until_ms: u64, now_ms: u64) {
        self.in_flight.remove(id);
        if committed.debited == 0 {
            return;
        }
        if self.until_ms <= now_ms {
            (self.overshoot, self.debited, self.until_ms) = (0, 0, 0);
        }
        self.overshoot += committed.overshoot;
        self.debited += committed.debited;
        self.until_ms = self.until_ms.max(until_ms);
    }

    /// The figures at `now_ms`.
    pub fn figures(&self, now_ms: u64) -> KeyBudget {
        let mut b = KeyBudget::default();
        for (units, at) in self.in_flight.values() {
            if live(*at, now_ms) {
                b.reserved_in_flight += units;
                b.reservations_in_flight += 1;
            }
        }
        if self.until_ms > now_ms {
            b.overshoot = self.overshoot;
            b.debited = self.debited;
            b.overshoot_until_ms = Some(self.until_ms);
        }
        b
    }

    /// The ids of the reservations it lists in flight (live or not): what a key reset drops, so that their
    /// commits change nothing ([`before_reset`]).
    pub fn in_flight_ids(&self) -> impl Iterator<Item = &str> {
        self.in_flight.keys().map(String::as_str)
    }

    /// Whether nothing in it counts at `now_ms` any more (the record can be dropped).
    pub fn is_spent(&self, now_ms: u64) -> bool {
        self.until_ms <= now_ms
            && self.leases.1 <= now_ms
            && self.in_flight.values().all(|(_, at)| !live(*at, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Rule;

    fn params(json: &str) -> Params {
        serde_json::from_str::<Rule>(json).unwrap().params()
    }

    fn debit(debited: u64, overshoot: u64) -> Committed {
        Committed {
            debited,
            overshoot,
            ..Committed::default()
        }
    }

    #[test]
    fn a_reservation_is_in_flight_until_its_commit_once() {
        let mut r = BudgetRecord::default();
        assert!(r.record_reservation("a", 500, 1_000));
        assert!(r.record_reservation("b", 200, 1_010));
        let f = r.figures(1_020);
        assert_eq!((f.reserved_in_flight, f.reservations_in_flight), (700, 2));
        r.record_commit("a", &debit(0, 0), 0, 1_030);
        assert_eq!(r.figures(1_040).reserved_in_flight, 200);
        // The same commit again (callers pass only first commits; a removal is idempotent).
        r.record_commit("a", &debit(0, 0), 0, 1_050);
        assert_eq!(r.figures(1_060).reserved_in_flight, 200);
    }

    #[test]
    fn a_reservation_at_or_before_the_resets_millisecond_is_before_it() {
        let ms = NANOS_PER_MILLI;
        assert!(!before_reset(5_000 * ms, None), "no reset");
        assert!(before_reset(4_999 * ms + ms - 1, Some(5_000)));
        assert!(before_reset(5_000 * ms + ms - 1, Some(5_000)), "its own ms");
        assert!(!before_reset(5_001 * ms, Some(5_000)));
    }

    #[test]
    fn a_commit_refunds_at_most_what_was_recorded_and_never_without_a_record() {
        let ms = NANOS_PER_MILLI;
        let claim = Commit {
            reserved: 5,
            actual: 0,
            reserved_at: 9_000 * ms,
        };
        // No record: nothing given back, the actual cost debited whole.
        let c = bounded_commit(Commit { actual: 7, ..claim }, None);
        assert_eq!((c.reserved, c.actual), (0, 7));
        assert_eq!(bounded_commit(claim, None).reserved, 0);
        // A record of 3 at 4 s: at most 3, from no later than 4 s.
        let c = bounded_commit(claim, Some((3, 4_000)));
        assert_eq!((c.reserved, c.reserved_at), (3, 4_000 * ms + ms - 1));
        // A claim of less, or of earlier, stands (the caller gives up its own refund).
        let c = bounded_commit(
            Commit {
                reserved: 2,
                reserved_at: 1_000 * ms,
                ..claim
            },
            Some((3, 4_000)),
        );
        assert_eq!((c.reserved, c.reserved_at), (2, 1_000 * ms));
    }

    #[test]
    fn lease_grants_pool_until_given_back_or_the_span_ends() {
        let mut r = BudgetRecord::default();
        assert_eq!(r.lease_pool(1_000), None);
        r.record_lease_grant(10, 1_000);
        r.record_lease_grant(6, 2_000);
        assert_eq!(r.lease_pool(2_500), Some((16, 2_000)));
        r.spend_lease_pool(10);
        assert_eq!(r.lease_pool(2_500), Some((6, 2_000)));
        assert_eq!(r.lease_pool(2_000 + LEASE_RETURN_SPAN_MS), None);
        assert!(!r.is_spent(2_500));
        assert!(is_lease_return("lease-00000000000000ab") && !is_lease_return("w1:1"));
        // Nothing in flight is shown for it.
        assert_eq!(r.figures(2_500), KeyBudget::default());
    }

    #[test]
    fn a_reservation_never_committed_stops_counting_after_the_bound() {
        let mut r = BudgetRecord::default();
        r.record_reservation("kept", 300, 5_000);
        let last = 5_000 + RESERVATION_IN_FLIGHT_MS - 1;
        assert_eq!(r.figures(last).reserved_in_flight, 300);
        assert_eq!(r.figures(last + 1).reserved_in_flight, 0);
        assert!(r.is_spent(last + 1));
    }

    #[test]
    fn a_full_record_drops_expired_reservations_then_refuses() {
        let mut r = BudgetRecord::default();
        for i in 0..MAX_IN_FLIGHT_PER_KEY {
            assert!(r.record_reservation(&format!("old{i}"), 1, 0));
        }
        assert!(
            !r.record_reservation("new", 1, 10),
            "all live: not recorded"
        );
        assert!(
            r.record_reservation("new", 1, RESERVATION_IN_FLIGHT_MS),
            "all expired: dropped, recorded"
        );
        assert_eq!(
            r.figures(RESERVATION_IN_FLIGHT_MS).reservations_in_flight,
            1
        );
    }

    #[test]
    fn overshoot_sums_within_the_budget_and_starts_again_after_it() {
        let mut r = BudgetRecord::default();
        r.record_commit("a", &debit(300, 0), 60_000, 1_000);
        r.record_commit("b", &debit(200, 150), 60_000, 2_000);
        let f = r.figures(59_999);
        assert_eq!(
            (f.debited, f.overshoot, f.overshoot_until_ms),
            (500, 150, Some(60_000))
        );
        assert_eq!(r.figures(60_000), KeyBudget::default());
        r.record_commit("c", &debit(10, 10), 120_000, 61_000);
        assert_eq!(
            (r.figures(61_000).debited, r.figures(61_000).overshoot),
            (10, 10)
        );
    }

    #[test]
    fn a_reservation_id_is_checked_and_never_leased() {
        use crate::wire::ThrottleRequest;
        let parse = |json: &str| {
            let r: ThrottleRequest = serde_json::from_str(json).unwrap();
            r.validate().map(|_| r.reservation_id).map_err(|e| e.field)
        };
        assert_eq!(
            parse(r#"{"action":"t","key":"k","quantity":5,"reservation_id":"w1-7"}"#),
            Ok(Some("w1-7".to_owned()))
        );
        assert_eq!(parse(r#"{"action":"t","key":"k"}"#), Ok(None));
        for bad in [
            r#"{"action":"t","key":"k","reservation_id":""}"#,
            r#"{"action":"t","key":"k","reservation_id":"a b"}"#,
            r#"{"action":"t","key":"k","reservation_id":"x","lease":true}"#,
        ] {
            assert_eq!(parse(bad), Err("reservation_id".to_owned()), "{bad}");
        }
    }

    #[test]
    fn the_budget_ends_per_algorithm() {
        let ms = NANOS_PER_MILLI;
        let fixed =
            params(r#"{"action":"a","algorithm":"fixed_window","capacity":5,"window":"60s"}"#);
        let fresh = State::Fresh;
        assert_eq!(budget_until_ms(&fixed, &fresh, 61_500 * ms), 120_000);
        let sliding =
            params(r#"{"action":"a","algorithm":"sliding_window","capacity":5,"window":"60s"}"#);
        assert_eq!(budget_until_ms(&sliding, &fresh, 61_500 * ms), 180_000);
        let log = params(r#"{"action":"a","algorithm":"sliding_log","capacity":5,"window":"60s"}"#);
        assert_eq!(budget_until_ms(&log, &fresh, 61_500 * ms + 7), 121_500);
        let bucket = params(
            r#"{"action":"a","algorithm":"token_bucket","capacity":10,"rate":{"count":1,"period":"3s"}}"#,
        );
        assert_eq!(budget_until_ms(&bucket, &fresh, 1_000 * ms), 31_000);
        // In debt: a full bucket (30 s of refill) and 12 units (36 s) more, from 1 s.
        let full = bucket.decide(&fresh, 1_000 * ms, 10).1;
        let c = crate::commit::Commit {
            reserved: 0,
            actual: 12,
            reserved_at: 1_000 * ms,
        };
        let owed = crate::commit::commit(&bucket, &full, 1_000 * ms, c)
            .1
            .expect("debited");
        assert_eq!(budget_until_ms(&bucket, &owed, 1_000 * ms), 67_000);
    }

    /// The debt read from a peek, per algorithm: 12 units debited onto a full limit of 10 leave
    /// 12 owed and nothing left; half a unit's drain later a meter still owes 12 (rounded up).
    #[test]
    fn the_debt_is_the_level_above_the_capacity() {
        let ms = NANOS_PER_MILLI;
        let now = 61_500 * ms;
        for json in [
            r#"{"action":"a","algorithm":"gcra","capacity":10,"rate":{"count":1,"period":"3s"}}"#,
            r#"{"action":"a","algorithm":"leaky_bucket","capacity":10,"rate":{"count":1,"period":"3s"}}"#,
            r#"{"action":"a","algorithm":"token_bucket","capacity":10,"rate":{"count":1,"period":"3s"}}"#,
            r#"{"action":"a","algorithm":"fixed_window","capacity":10,"window":"60s"}"#,
            r#"{"action":"a","algorithm":"sliding_window","capacity":10,"window":"60s"}"#,
            r#"{"action":"a","algorithm":"sliding_log","capacity":10,"window":"60s"}"#,
        ] {
            let p = params(json);
            let full = p.decide(&State::Fresh, now, 10).1;
            assert_eq!(debt(&p, &p.decide(&full, now, 0).0), 0, "{json}");
            let c = crate::commit::Commit {
                reserved: 0,
                actual: 12,
                reserved_at: now,
            };
            let (done, owed) = crate::commit::commit(&p, &full, now, c);
            let owed = owed.expect("debited");
            assert_eq!((done.debited, done.overshoot), (12, 12), "{json}");
            let peek = p.decide(&owed, now, 0).0;
            // A sliding log carries one more capacity of entries (crate::commit::carry_bound).
            let owes = if matches!(p, Params::SlidingLog(_)) {
                10
            } else {
                12
            };
            assert_eq!((debt(&p, &peek), peek.remaining), (owes, 0), "{json}");
            assert!(!p.decide(&owed, now, 1).0.allowed, "{json}");
            if matches!(
                p,
                Params::Gcra(_) | Params::LeakyBucket(_) | Params::TokenBucket(_)
            ) {
                let later = p.decide(&owed, now + 1_500 * ms, 0).0;
                assert_eq!(debt(&p, &later), 12, "{json}");
                // Paid back after 12 units' drain (36 s): then one unit's drain for one request.
                let paid = now + 36_000 * ms;
                assert_eq!(debt(&p, &p.decide(&owed, paid, 0).0), 0, "{json}");
                assert!(!p.decide(&owed, paid, 1).0.allowed, "{json}");
                assert!(p.decide(&owed, paid + 3_000 * ms, 1).0.allowed, "{json}");
            }
        }
    }
}
