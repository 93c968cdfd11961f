//! History and top denied for the memory store: per action, a ring of the last hour's steps, a
//! last-seen time, and the last few minute buckets of denied keys, each bounded.

use async_trait::async_trait;
use sluice_core::Action;

use super::MemoryStore;
use crate::history::marks::ReportApplied;
use crate::history::{DeniedRecord, HistoryRecord, ReportMark, StoredHistory};
use crate::store::{HistoryStore, StoreError};

pub(super) mod state;

#[async_trait]
impl HistoryStore for MemoryStore {
    async fn record_history(&self, batch: &[HistoryRecord]) -> Result<(), StoreError> {
        self.history.record(batch);
        Ok(())
    }

    async fn apply_report(
        &self,
        mark: &ReportMark,
        record: &HistoryRecord,
    ) -> Result<ReportApplied, StoreError> {
        Ok(self.history.apply_report(mark, record))
    }

    async fn read_history(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> Result<StoredHistory, StoreError> {
        Ok(self.history.read(action, first_step_ms, steps, now_ms))
    }

    async fn record_denied(&self, batch: &[DeniedRecord]) -> Result<(), StoreError> {
        self.history.record_denied(batch);
        Ok(())
    }

    async fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(self.history.top_denied(action, now_ms, limit))
    }

    async fn key_denied(
        &self,
        action: &Action,
        key: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, u64)>, StoreError> {
        Ok(self.history.key_denied(action, key, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::state::*;
    use super::*;
    use crate::history::REPORT_MARK_TTL_MS;
    use crate::history::{Tally, DENIED_KEEP};
    use sluice_core::wire::HISTORY_STEP_MS;

    const T0: u64 = 1_700_000_000_000;

    fn action() -> Action {
        Action::parse("a").expect("action")
    }

    fn rec(step_ms: u64, allowed: u64) -> HistoryRecord {
        HistoryRecord {
            action: action(),
            step_ms,
            tally: Tally {
                allowed,
                ..Tally::default()
            },
            withdrawn: Tally::default(),
            last_seen_ms: step_ms + 1,
        }
    }

    #[test]
    fn the_ring_keeps_an_hour_of_steps() {
        let log = HistoryLog::default();
        for i in 0..1_000u64 {
            log.record(&[rec(T0 + i * HISTORY_STEP_MS, 1)]);
        }
        let newest = T0 + 999 * HISTORY_STEP_MS;
        let held = log.read(
            &action(),
            0,
            usize::MAX / 2 / HISTORY_STEP_MS as usize,
            newest,
        );
        assert_eq!(held.steps.len(), STEPS_KEPT);
        assert_eq!(held.last_seen_ms, Some(newest + 1));
        // A late record for a step long gone is ignored, one within the span adds.
        log.record(&[rec(T0, 5), rec(newest - HISTORY_STEP_MS, 5)]);
        let held = log.read(&action(), newest - HISTORY_STEP_MS, 1, newest);
        assert_eq!(
            held.steps,
            vec![(
                newest - HISTORY_STEP_MS,
                Tally {
                    allowed: 6,
                    ..Tally::default()
                }
            )]
        );
    }

    #[test]
    fn a_report_applies_once_per_action_and_reporter_in_seq_order() {
        let log = HistoryLog::default();
        let mark = |reporter: &str, seq| ReportMark {
            reporter: reporter.into(),
            seq,
            now_ms: T0,
            shared: false,
        };
        let applied = ReportApplied::Applied {
            dropped: 0,
            shed: 0,
        };
        assert_eq!(log.apply_report(&mark("r1", 1), &rec(T0, 3)), applied);
        assert_eq!(
            log.apply_report(&mark("r1", 1), &rec(T0, 3)),
            ReportApplied::Copy,
            "a copy"
        );
        assert_eq!(
            log.apply_report(&mark("r2", 1), &rec(T0, 1)),
            applied,
            "another reporter"
        );
        assert_eq!(log.apply_report(&mark("r1", 2), &rec(T0, 2)), applied);
        assert_eq!(
            log.apply_report(&mark("r1", 1), &rec(T0, 3)),
            ReportApplied::Copy,
            "a late copy"
        );
        let held = log.read(&action(), T0, 1, T0);
        assert_eq!(held.steps[0].1.allowed, 6);
        // Once the mark has expired the reporter starts again (a day later: a new VM's seq 1).
        let later = ReportMark {
            now_ms: T0 + REPORT_MARK_TTL_MS,
            ..mark("r1", 1)
        };
        assert_eq!(log.apply_report(&later, &rec(T0, 0)), applied);
    }

    #[test]
    fn denied_buckets_are_bounded_and_ranked() {
        let log = HistoryLog::default();
        let d = |key: &str, at_ms: u64, denied: u64| DeniedRecord {
            action: action(),
            key: key.into(),
            at_ms,
            denied,
        };
        for i in 0..(DENIED_KEEP as u64 + 50) {
            log.record_denied(&[d(&format!("spray{i}"), T0, 1)]);
        }
        assert_eq!(log.top_denied(&action(), T0, 1_000).len(), DENIED_KEEP);
        log.record_denied(&[
            d("mallory", T0, 40),
            d("mallory", T0 + 60_000, 2),
            d("eve", T0, 3),
        ]);
        let top = log.top_denied(&action(), T0 + 60_000, 2);
        assert_eq!(top, vec![("mallory".into(), 42), ("eve".into(), 3)]);
        // Ten minutes later the buckets have aged out of the read, and new writes drop them.
        assert!(log.top_denied(&action(), T0 + 600_000, 10).is_empty());
        log.record_denied(&[d("late", T0 + 600_000, 1)]);
        let actions = log.lock();
        let held = &actions[&action()].denied;
        assert_eq!(held.len(), 1);
    }
}
