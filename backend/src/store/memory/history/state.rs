//! The memory store's history state ([`HistoryLog`]), apart from the trait that serves it
//! (`../history.rs`), so that `mod.rs` holds it without importing the trait's file.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use sluice_core::wire::{HISTORY_SPAN_MS, HISTORY_STEP_MS};
use sluice_core::Action;

use crate::history::marks::{member, ReportApplied, ReporterMarks};
use crate::history::{
    denied_bucket, last_seen_within_span, rank_denied, DeniedRecord, HistoryRecord, ReportMark,
    StoredHistory, Tally, DENIED_BUCKETS, DENIED_BUCKET_MS, DENIED_KEEP, LAST_SEEN_SPAN_MS,
};

/// Steps kept per action: the span and one more (a read may straddle a step).
pub(crate) const STEPS_KEPT: usize = (HISTORY_SPAN_MS / HISTORY_STEP_MS) as usize + 1;

#[derive(Debug, Default)]
pub(crate) struct ActionLog {
    /// (step start, counts), oldest first, at most [`STEPS_KEPT`].
    pub(crate) steps: VecDeque<(u64, Tally)>,
    pub(crate) last_seen_ms: u64,
    /// (bucket start, key → denials), oldest first, at most [`DENIED_BUCKETS`].
    pub(crate) denied: VecDeque<(u64, HashMap<String, u64>)>,
}

impl ActionLog {
    pub(crate) fn add_step(&mut self, step_ms: u64, tally: &Tally) {
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
    pub(crate) fn take_back(&mut self, step_ms: u64, withdrawn: &Tally) {
        if let Ok(i) = self.steps.binary_search_by_key(&step_ms, |(at, _)| *at) {
            if let Some((_, t)) = self.steps.get_mut(i) {
                let (held, back) = (t.values(), withdrawn.values());
                *t = Tally::from_values(std::array::from_fn(|k| held[k].saturating_sub(back[k])));
            }
        }
    }

    pub(crate) fn add_denied(&mut self, bucket: u64, key: &str, n: u64) {
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
    pub(crate) actions: Mutex<HashMap<Action, ActionLog>>,
    /// Per action (`None`: the set actions without a rule share) the reporters' sequence
    /// records, bounded ([`ReporterMarks`]).
    pub(crate) marks: Mutex<HashMap<Option<Action>, ReporterMarks>>,
}

impl HistoryLog {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<Action, ActionLog>> {
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
    /// reporter's record makes room by dropping (settled) or shedding (young) the oldest one.
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
        if applied == ReportApplied::Copy {
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
