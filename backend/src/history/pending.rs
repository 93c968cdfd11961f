//! History counts not yet in the store: filter reports between flushes, and a flush the store
//! refused (kept and retried with the next one, so a short store outage loses no history).
//! Bounded: at most [`MAX_PENDING`] (action, step) entries, and steps older than the history span
//! are dropped when put back.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use sluice_core::wire::HISTORY_SPAN_MS;
use sluice_core::Action;

use super::{HistoryRecord, Tally};

/// Most (action, step) entries held: 256 actions for an hour of steps.
pub const MAX_PENDING: usize = 256 * 360;

/// One pending (action, step): counts to add, counts to take back, last seen.
type Entry = (Tally, Tally, u64);

/// The pending counts, by (action, step start).
#[derive(Debug, Default)]
pub struct HistoryPending {
    entries: Mutex<BTreeMap<(Action, u64), Entry>>,
}

impl HistoryPending {
    /// Nothing pending.
    pub fn new() -> HistoryPending {
        HistoryPending::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<(Action, u64), Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds counts to one action's step; returns false when the bound dropped them.
    pub fn add(&self, record: HistoryRecord) -> bool {
        let mut entries = self.lock();
        let full = entries.len() >= MAX_PENDING;
        match entries.get_mut(&(record.action.clone(), record.step_ms)) {
            Some((tally, withdrawn, seen)) => {
                tally.add(&record.tally);
                withdrawn.add(&record.withdrawn);
                *seen = (*seen).max(record.last_seen_ms);
                true
            }
            None if full => false,
            None => {
                entries.insert(
                    (record.action, record.step_ms),
                    (record.tally, record.withdrawn, record.last_seen_ms),
                );
                true
            }
        }
    }

    /// Puts back records the store refused, dropping steps older than the history span at
    /// `now_ms`; returns how many were dropped.
    pub fn put_back(&self, records: Vec<HistoryRecord>, now_ms: u64) -> u64 {
        let oldest = now_ms.saturating_sub(HISTORY_SPAN_MS);
        let mut dropped = 0;
        for record in records {
            if record.step_ms < oldest || !self.add(record) {
                dropped += 1;
            }
        }
        dropped
    }

    /// The actions with counts pending.
    pub fn actions(&self) -> std::collections::BTreeSet<Action> {
        self.lock()
            .keys()
            .map(|(action, _)| action.clone())
            .collect()
    }

    /// Takes everything pending.
    pub fn take(&self) -> Vec<HistoryRecord> {
        std::mem::take(&mut *self.lock())
            .into_iter()
            .map(
                |((action, step_ms), (tally, withdrawn, last_seen_ms))| HistoryRecord {
                    action,
                    step_ms,
                    tally,
                    withdrawn,
                    last_seen_ms,
                },
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(action: &str, step_ms: u64, leased: u64, seen: u64) -> HistoryRecord {
        HistoryRecord {
            action: Action::parse(action).expect("action"),
            step_ms,
            tally: Tally {
                leased,
                ..Tally::default()
            },
            withdrawn: Tally::default(),
            last_seen_ms: seen,
        }
    }

    #[test]
    fn same_step_adds_up_and_take_empties() {
        let p = HistoryPending::new();
        assert!(p.add(record("a", 10_000, 2, 10_001)));
        assert!(p.add(record("a", 10_000, 3, 10_500)));
        assert!(p.add(record("a", 20_000, 1, 20_001)));
        let taken = p.take();
        assert_eq!(taken.len(), 2);
        assert_eq!((taken[0].tally.leased, taken[0].last_seen_ms), (5, 10_500));
        assert!(p.take().is_empty());
    }

    #[test]
    fn put_back_drops_steps_past_the_span() {
        let p = HistoryPending::new();
        let now = 10 * HISTORY_SPAN_MS;
        let dropped = p.put_back(
            vec![
                record("a", now - HISTORY_SPAN_MS - 10_000, 1, 0),
                record("a", now - 10_000, 1, 0),
            ],
            now,
        );
        assert_eq!(dropped, 1);
        assert_eq!(p.take().len(), 1);
    }

    #[test]
    fn the_bound_holds() {
        let p = HistoryPending::new();
        for i in 0..MAX_PENDING as u64 {
            assert!(p.add(record("a", i * 10_000, 1, 0)));
        }
        assert!(!p.add(record("b", 0, 1, 0)), "a new entry beyond the bound");
        assert!(p.add(record("a", 0, 1, 0)), "an existing entry still adds");
        assert_eq!(p.take().len(), MAX_PENDING);
    }
}
