//! History and top denied for the memory store: per action, a ring of the last hour's steps, a
//! last-seen time, and the last few minute buckets of denied keys, each bounded.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use sluice_core::wire::{HISTORY_SPAN_MS, HISTORY_STEP_MS};
use sluice_core::Action;

use super::MemoryStore;
use crate::store::{HistoryStore, StoreError};

use crate::history::marks::{member, ReportApplied, ReporterMarks};
use crate::history::{
    denied_bucket, last_seen_within_span, rank_denied, DeniedRecord, HistoryRecord, ReportMark,
    StoredHistory, Tally, DENIED_BUCKETS, DENIED_BUCKET_MS, DENIED_KEEP, LAST_SEEN_SPAN_MS,
};

/// Steps kept per action: the span and one more (a read may straddle a step).
const STEPS_KEPT: usize = (HISTORY_SPAN_MS / HISTORY_STEP_MS) as usize + 1;

#[derive(Debug, Default)]
struct ActionLog {
    /// (step start, counts), oldest first, at most [`STEPS_KEPT`].
    steps: VecDeque<(u64, Tally)>,
    last_seen_ms: u64,
    /// (bucket start, key → denials), oldest first, at most [`DENIED_BUCKETS`].
    denied: VecDeque<(u64, HashMap<String, u64>)>,
}

impl ActionLog {
    fn add_step(&mut self, step_ms: u64, tally: &Tally) {
        let newest = self.steps.back().map_or(0, |(at, _)| *at);
        if step_ms + HISTORY_SPAN_MS < newest {
            return; // older than anything kept
        }
        match self.steps.binary_search_by_key(&step_ms, |(at, _)| *at) {
            Ok(i) => {
                if let Some((_, t)) = self.steps.get_mut(i) {
                    t.add(tally);
                }
            }
            Err(i) => self.steps.insert(i, (step_ms, *tally)),
        }
        let newest = self.steps.back().map_or(0, |(at, _)| *at);
        while self.steps.len() > STEPS_KEPT
            || self
                .steps
                .front()
                .is_some_and(|(at, _)| at + HISTORY_SPAN_MS < newest)
        {
            self.steps.pop_front();
        }
    }

    /// Takes counts back from a stored step (withdrawn decisions), never below zero.
    fn take_back(&mut self, step_ms: u64, withdrawn: &Tally) {
        if let Ok(i) = self.steps.binary_search_by_key(&step_ms, |(at, _)| *at) {
            if let Some((_, t)) = self.steps.get_mut(i) {
                let (held, back) = (t.values(), withdrawn.values());
                *t = Tally::from_values(std::array::from_fn(|k| held[k].saturating_sub(back[k])));
            }
        }
    }

    fn add_denied(&mut self, bucket: u64, key: &str, n: u64) {
        let newest = self.denied.back().map_or(0, |(at, _)| *at);
        if bucket + DENIED_BUCKETS * DENIED_BUCKET_MS <= newest {
            return;
        }
        let i = match self.denied.binary_search_by_key(&bucket, |(at, _)| *at) {
            Ok(i) => i,
            Err(i) => {
                self.denied.insert(i, (bucket, HashMap::new()));
                i
            }
        };
        if let Some((_, keys)) = self.denied.get_mut(i) {
            let count = keys.entry(key.to_owned()).or_default();
            *count = count.saturating_add(n);
            if keys.len() > DENIED_KEEP {
                // As the Redis store trims its zset: keep the most denied (ties: the greater key).
                let mut rows: Vec<(String, u64)> = keys.drain().collect();
                rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
                rows.truncate(DENIED_KEEP);
                keys.extend(rows);
            }
        }
        let newest = self.denied.back().map_or(0, |(at, _)| *at);
        while self
            .denied
            .front()
            .is_some_and(|(at, _)| at + DENIED_BUCKETS * DENIED_BUCKET_MS <= newest)
        {
            self.denied.pop_front();
        }
    }
}

/// Every action's history and denied keys, and the filter reports' marks.
#[derive(Debug, Default)]
pub(crate) struct HistoryLog {
    actions: Mutex<HashMap<Action, ActionLog>>,
    /// Per action (`None`: the set actions without a rule share) the reporters' sequence
    /// records, bounded ([`ReporterMarks`]).
    marks: Mutex<HashMap<Option<Action>, ReporterMarks>>,
}

impl HistoryLog {
    fn lock(&self) -> MutexGuard<'_, HashMap<Action, ActionLog>> {
        self.actions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds step counts and last-seen times; forgets actions silent for a day.
    pub(crate) fn record(&self, batch: &[HistoryRecord]) {
        let mut actions = self.lock();
        let mut latest = 0;
        for r in batch {
            let log = actions.entry(r.action.clone()).or_default();
            if !r.tally.is_zero() {
                log.add_step(r.step_ms, &r.tally);
            }
            if !r.withdrawn.is_zero() {
                log.take_back(r.step_ms, &r.withdrawn);
            }
            log.last_seen_ms = log.last_seen_ms.max(r.last_seen_ms);
            latest = latest.max(r.step_ms).max(r.last_seen_ms);
        }
        actions.retain(|_, log| {
            let newest = log
                .steps
                .back()
                .map_or(0, |(at, _)| *at)
                .max(log.last_seen_ms)
                .max(log.denied.back().map_or(0, |(at, _)| *at));
            newest + LAST_SEEN_SPAN_MS >= latest
        });
    }

    /// Applies `record` unless a report of `mark.reporter` with this or a higher seq was applied
    /// for the action; the marks' lock is held across the check, the raise and the record, so
    /// two copies arriving together apply once. Bounded per action ([`ReporterMarks`]): a new
    /// reporter's record may drop the oldest settled one, or find the set full (not applied).
    pub(crate) fn apply_report(&self, mark: &ReportMark, record: &HistoryRecord) -> ReportApplied {
        let mut marks = self
            .marks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let scope = (!mark.shared).then(|| record.action.clone());
        let member = member(record.action.as_str(), &mark.reporter, mark.shared);
        let applied = marks
            .entry(scope)
            .or_default()
            .apply(&member, mark.seq, mark.now_ms);
        if applied == ReportApplied::Copy || applied == ReportApplied::Full {
            return applied;
        }
        if !record.tally.is_zero() || !record.withdrawn.is_zero() || record.last_seen_ms > 0 {
            self.record(std::slice::from_ref(record));
        }
        applied
    }

    /// The stored steps of `action` in the range, and its last-seen time.
    pub(crate) fn read(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> StoredHistory {
        let actions = self.lock();
        let Some(log) = actions.get(action) else {
            return StoredHistory::default();
        };
        let end = first_step_ms.saturating_add(steps as u64 * HISTORY_STEP_MS);
        StoredHistory {
            steps: log
                .steps
                .iter()
                .filter(|(at, _)| (first_step_ms..end).contains(at))
                .copied()
                .collect(),
            last_seen_ms: last_seen_within_span(log.last_seen_ms, now_ms),
        }
    }

    /// Adds denials per key to their minute buckets.
    pub(crate) fn record_denied(&self, batch: &[DeniedRecord]) {
        let mut actions = self.lock();
        for r in batch {
            actions.entry(r.action.clone()).or_default().add_denied(
                denied_bucket(r.at_ms),
                &r.key,
                r.denied,
            );
        }
    }

    /// `key`'s denials per bucket read at `now_ms`, newest first, zeros left out.
    pub(crate) fn key_denied(&self, action: &Action, key: &str, now_ms: u64) -> Vec<(u64, u64)> {
        let actions = self.lock();
        let Some(log) = actions.get(action) else {
            return Vec::new();
        };
        let newest = denied_bucket(now_ms);
        let oldest = newest.saturating_sub((DENIED_BUCKETS - 1) * DENIED_BUCKET_MS);
        log.denied
            .iter()
            .rev()
            .filter(|(at, _)| (oldest..=newest).contains(at))
            .filter_map(|(at, keys)| keys.get(key).filter(|n| **n > 0).map(|n| (*at, *n)))
            .collect()
    }

    /// The `limit` keys denied most over the buckets read at `now_ms`.
    pub(crate) fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Vec<(String, u64)> {
        let actions = self.lock();
        let Some(log) = actions.get(action) else {
            return Vec::new();
        };
        let newest = denied_bucket(now_ms);
        let oldest = newest.saturating_sub((DENIED_BUCKETS - 1) * DENIED_BUCKET_MS);
        let mut sums: HashMap<&str, u64> = HashMap::new();
        for (_, keys) in log
            .denied
            .iter()
            .filter(|(at, _)| (oldest..=newest).contains(at))
        {
            for (key, n) in keys {
                let sum = sums.entry(key.as_str()).or_default();
                *sum = sum.saturating_add(*n);
            }
        }
        rank_denied(
            sums.into_iter().map(|(k, n)| (k.to_owned(), n)).collect(),
            limit,
        )
    }
}

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
    use super::*;
    use crate::history::REPORT_MARK_TTL_MS;

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
        let applied = ReportApplied::Applied { dropped: 0 };
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
