//! History and top denied keys: what the dashboard charts (steps of counts per action, filter
//! reports applied once, the keys denied most). Stored with TTLs (an hour and a margin; last seen
//! a day), written in batches off the hot path, so a `volatile-*` eviction policy may evict them,
//! never the rules; losing some is a gap in a chart, never a wrong decision.

use async_trait::async_trait;
use sluice_core::Action;

use super::error::StoreError;
use crate::history::marks::ReportApplied;
use crate::history::{DeniedRecord, HistoryRecord, ReportMark, StoredHistory};

/// Steps of counts per action and the denied keys' minute buckets (see [`crate::history`]).
#[async_trait]
pub trait HistoryStore: Send + Sync + 'static {
    /// Adds counts to actions' history steps and raises their last-seen times.
    async fn record_history(&self, batch: &[HistoryRecord]) -> Result<(), StoreError>;

    /// Applies one action's filter-report counts once per (action, reporter, seq): when `mark.seq`
    /// is above the highest applied for (action, reporter), adds `record` (as `record_history`
    /// does) and raises the mark, in one atomic step; otherwise changes nothing. The marks are
    /// bounded per action ([`crate::history::marks`]): a new reporter makes room by dropping the
    /// least recently applied record (`Applied { dropped: 1 }` when it was settled, `shed: 1`
    /// when young); it is never refused. A record with zero counts and last seen 0 only raises
    /// the mark.
    async fn apply_report(
        &self,
        mark: &ReportMark,
        record: &HistoryRecord,
    ) -> Result<ReportApplied, StoreError>;

    /// The stored steps of `action` among the `steps` steps from `first_step_ms`, and when it was
    /// last seen (if within a day of `now_ms`).
    async fn read_history(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> Result<StoredHistory, StoreError>;

    /// Adds backend denials per key to the minute buckets top denied reads (each bucket keeps the
    /// [`crate::history::DENIED_KEEP`] keys denied most).
    async fn record_denied(&self, batch: &[DeniedRecord]) -> Result<(), StoreError>;

    /// The `limit` keys of `action` denied most over the last 5 minutes at `now_ms`, most denied
    /// first (ties by key).
    async fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError>;

    /// `key`'s backend denials under `action` per top-denied minute bucket read at `now_ms`,
    /// as (bucket start ms, denials), newest first, buckets without a denial left out (0 also
    /// when the key was trimmed from a bucket as one of a spray's least denied).
    async fn key_denied(
        &self,
        action: &Action,
        key: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, u64)>, StoreError>;
}
