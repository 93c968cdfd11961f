//! What happened to each action over the last hour (10 s steps), the keys denied most over the
//! last 5 minutes, and one key's standing on every action: the operator's questions during an
//! incident, answered from the store so every replica answers the same.
//!
//! Counts reach the store without a store round trip per decision: the decision path adds to the
//! activity batch ([`crate::activity`]), filter reports add to [`pending::HistoryPending`], and
//! the activity flush writes both every ≤ 250 ms.

pub mod attempts;
pub mod body;
pub mod edge;
pub mod marks;
pub mod pending;
pub mod report;
pub mod view;

use sluice_core::wire::{StepCounts, HISTORY_SPAN_MS, HISTORY_STEP_MS, TOP_DENIED_SPAN_MS};
use sluice_core::Action;

/// How long an action's last-seen time is kept: a day (an action unseen for longer is marked
/// "likely no route" by the dashboard).
pub const LAST_SEEN_SPAN_MS: u64 = 24 * 60 * 60 * 1000;
/// Width of one top-denied bucket: a minute.
pub const DENIED_BUCKET_MS: u64 = 60_000;
/// Buckets read for top denied: the current minute and the five before it, so the 5 minutes
/// before now are always covered (at most 6 minutes are).
pub const DENIED_BUCKETS: u64 = TOP_DENIED_SPAN_MS / DENIED_BUCKET_MS + 1;
/// Most keys one top-denied bucket keeps per action; beyond it the least denied are dropped (a
/// spray of denied keys cannot grow it), so counts are those of the heavy hitters.
pub const DENIED_KEEP: usize = 200;
/// How long a stored history step outlives the span it is read for (replicas' clocks may differ
/// and a read may straddle a step).
pub const HISTORY_TTL_MS: u64 = HISTORY_SPAN_MS + 10 * 60 * 1000;
/// How long a stored top-denied bucket lives.
pub const DENIED_TTL_MS: u64 = (DENIED_BUCKETS + 1) * DENIED_BUCKET_MS;

/// Requests of one action in one step, by outcome: the stored form of a history step is the
/// wire's [`StepCounts`] itself, so the six counters are defined once, in core. Stored and
/// pending tallies leave `at_ms` 0 (the step's start is kept beside them) and
/// [`body::assemble`] sets it when the step is answered; Redis keeps only
/// [`StepCounts::values`], so its stored form does not change.
pub type Tally = StepCounts;

/// Counts to add to one action's step, and when the action was last seen (0: not in this record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRecord {
    /// The action.
    pub action: Action,
    /// Start of the step, in ms since the epoch (a multiple of `HISTORY_STEP_MS`).
    pub step_ms: u64,
    /// The counts to add.
    pub tally: Tally,
    /// Counts to take back (decisions withdrawn: their caller had given up on them, see
    /// [`edge`]); a stored count never goes below zero.
    pub withdrawn: Tally,
    /// When the action was last seen in these counts, in ms since the epoch (0: not seen).
    pub last_seen_ms: u64,
}

/// How long the highest report `seq` applied per (action, reporter) is kept: a day, like last
/// seen. A copy is resent within a tick or two of its first; a reporter silent for a day is gone.
/// Each action keeps at most `MAX_REPORTERS_PER_ACTION` of them ([`marks`]).
pub const REPORT_MARK_TTL_MS: u64 = LAST_SEEN_SPAN_MS;

/// A filter report's identity, for one action: the record is applied only when `seq` is higher
/// than the highest applied for (action, reporter), and that mark is raised in the same atomic
/// step (see core's `FilterReport`), within the action's bound ([`marks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportMark {
    /// The reporter id (checked by core: 1–64 of `[A-Za-z0-9_.:-]`).
    pub reporter: String,
    /// The report's sequence number.
    pub seq: u64,
    /// Now, in ms since the epoch (the mark lives [`REPORT_MARK_TTL_MS`] from it).
    pub now_ms: u64,
    /// The action has no rule here: its mark is kept in the set all such actions share, under
    /// `<action>/<reporter>` ([`marks::member`]), so minted action names stay within one bound.
    /// Its record adds no counts.
    pub shared: bool,
}

/// Backend denials of one key, to add to the top-denied bucket holding `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedRecord {
    /// The action.
    pub action: Action,
    /// The key, as the decision API received it.
    pub key: String,
    /// When, in ms since the epoch (its minute picks the bucket).
    pub at_ms: u64,
    /// Denials to add.
    pub denied: u64,
}

/// One action's stored history over a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredHistory {
    /// The steps holding anything, as (step start ms, counts), in any order.
    pub steps: Vec<(u64, Tally)>,
    /// When the action was last seen, if within [`LAST_SEEN_SPAN_MS`] of the read.
    pub last_seen_ms: Option<u64>,
}

/// Start of the step holding `ms`.
pub fn step_start(ms: u64) -> u64 {
    ms - ms % HISTORY_STEP_MS
}

/// Start of the top-denied bucket holding `ms`.
pub fn denied_bucket(ms: u64) -> u64 {
    ms - ms % DENIED_BUCKET_MS
}

/// The top-denied buckets read at `now_ms`, newest first.
pub fn denied_buckets(now_ms: u64) -> Vec<u64> {
    let newest = denied_bucket(now_ms);
    (0..DENIED_BUCKETS)
        .filter_map(|i| newest.checked_sub(i * DENIED_BUCKET_MS))
        .collect()
}

/// Whether a last-seen time read at `now_ms` is recent enough to report.
pub fn last_seen_within_span(last_seen_ms: u64, now_ms: u64) -> Option<u64> {
    (last_seen_ms > 0 && now_ms.saturating_sub(last_seen_ms) <= LAST_SEEN_SPAN_MS)
        .then_some(last_seen_ms)
}

/// Orders (key, denied) pairs most denied first, ties by key, and keeps `limit`.
pub fn rank_denied(mut keys: Vec<(String, u64)>, limit: usize) -> Vec<(String, u64)> {
    keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    keys.truncate(limit);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_buckets_start_on_their_boundaries() {
        assert_eq!(step_start(1_700_000_012_345), 1_700_000_010_000);
        assert_eq!(step_start(1_700_000_010_000), 1_700_000_010_000);
        assert_eq!(denied_bucket(1_700_000_012_345), 1_699_999_980_000);
        let buckets = denied_buckets(1_700_000_012_345);
        assert_eq!(buckets.len(), 6);
        assert_eq!(buckets[0], 1_699_999_980_000);
        assert_eq!(buckets[5], 1_699_999_980_000 - 300_000);
        // Near the epoch there are fewer buckets, never an underflow.
        assert_eq!(denied_buckets(61_000), vec![60_000, 0]);
    }

    #[test]
    fn last_seen_is_reported_for_a_day() {
        let now = 2 * LAST_SEEN_SPAN_MS;
        assert_eq!(last_seen_within_span(now - 5, now), Some(now - 5));
        assert_eq!(
            last_seen_within_span(now - LAST_SEEN_SPAN_MS, now),
            Some(now - LAST_SEEN_SPAN_MS)
        );
        assert_eq!(
            last_seen_within_span(now - LAST_SEEN_SPAN_MS - 1, now),
            None
        );
        assert_eq!(last_seen_within_span(0, now), None);
    }

    #[test]
    fn ranking_is_most_denied_first_then_by_key() {
        let ranked = rank_denied(
            vec![
                ("b".into(), 2),
                ("a".into(), 2),
                ("c".into(), 9),
                ("d".into(), 1),
            ],
            3,
        );
        assert_eq!(
            ranked,
            vec![("c".into(), 9), ("a".into(), 2), ("b".into(), 2)]
        );
    }
}
