//! Commits in the memory store: core's own [`sluice_core::commit::commit`] under the key's shard
//! lock, and the request ids already committed, so that a retried commit changes nothing; and the
//! keys' cost-budget records ([`sluice_core::budget`]), which a commit settles in the same call.
//!
//! The ids live in one bounded map (at most [`MAX_MARKS`]), each for
//! [`COMMIT_ID_TTL_MS`] of store time; expired ones are dropped when the map is full, and if it
//! is still full the one closest to expiry goes (a retry of that commit would then apply again:
//! the cost of a bound on memory, as with the state map's evictions). The map's lock is held
//! across the commit so that two concurrent commits of one id apply once; it is always taken
//! before a shard lock, never after, so no two locks are ever waited on in a cycle.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sluice_core::budget::{budget_until_ms, BudgetRecord};
use sluice_core::commit::{commit, Commit, Committed, COMMIT_ID_TTL_MS};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::KeyBudget;
use sluice_core::{Nanos, Params, Rule};

use super::shards::ShardedStates;
use super::slot::rule_slot;
use crate::store::CommitOutcome;

/// Most request ids remembered at once.
pub(crate) const MAX_MARKS: usize = 100_000;

/// Request ids already committed: state name + id → (expiry, what the first commit did); and
/// per state name the cost-budget record ([`BudgetRecord`]: reservations in flight, debits
/// beyond them), at most [`MAX_MARKS`] names (spent records go first; past that a new key's
/// record is not kept: the view then shows zeros for it, decisions never read it).
#[derive(Default)]
pub(crate) struct CommitMarks {
    marks: Mutex<HashMap<String, (Nanos, Committed)>>,
    budgets: Mutex<HashMap<String, BudgetRecord>>,
}

impl CommitMarks {
    /// Commits `c` for `key` under `rule` at `now`, once per `id`.
    pub(crate) fn commit(
        &self,
        states: &ShardedStates,
        rule: &Rule,
        key: &str,
        id: &str,
        c: Commit,
        now: Nanos,
    ) -> CommitOutcome {
        let params: Params = rule.params();
        let name = rule_slot(rule.action(), rule.algorithm(), key);
        let mark = format!("{name}\u{0}{id}");
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let first = marks
            .get(&mark)
            .filter(|(expires, _)| *expires > now)
            .copied();
        if let Some((_, first)) = first {
            // Today's level, nothing changed: a commit of nothing.
            let nothing = Commit {
                reserved: 0,
                actual: 0,
                ..c
            };
            let peek = states.update(&name, params, now, |state| {
                (commit(&params, state, now, nothing).0, None)
            });
            let committed = Committed {
                level: peek.level,
                ..first
            };
            return CommitOutcome {
                committed,
                duplicate: true,
            };
        }
        let committed = states.update(&name, params, now, |state| commit(&params, state, now, c));
        if marks.len() >= MAX_MARKS {
            marks.retain(|_, (expires, _)| *expires > now);
        }
        if marks.len() >= MAX_MARKS {
            if let Some(oldest) = marks
                .iter()
                .min_by_key(|(_, (expires, _))| *expires)
                .map(|(k, _)| k.clone())
            {
                marks.remove(&oldest);
            }
        }
        let expires = now.saturating_add(COMMIT_ID_TTL_MS * 1_000_000);
        marks.insert(mark, (expires, committed));
        let until_ms = budget_until_ms(&params, now);
        self.with_budget(&name, now, |b| {
            b.settle(id, &committed, until_ms, now / NANOS_PER_MILLI);
        });
        CommitOutcome {
            committed,
            duplicate: false,
        }
    }
}

impl CommitMarks {
    /// Holds an allowed reservation of `units` for `key` under `rule` as in flight, unless its
    /// commit already came (then there is nothing left in flight). False when not held.
    pub(crate) fn hold(&self, rule: &Rule, key: &str, id: &str, units: u64, now: Nanos) -> bool {
        let name = rule_slot(rule.action(), rule.algorithm(), key);
        // The marks' lock first, as in a commit: a commit of this id cannot land in between.
        let marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let committed = marks
            .get(&format!("{name}\u{0}{id}"))
            .is_some_and(|(expires, _)| *expires > now);
        if committed {
            return false;
        }
        self.with_budget(&name, now, |b| b.hold(id, units, now / NANOS_PER_MILLI))
            .unwrap_or(false)
    }

    /// `key`'s budget figures under `rule` at `now`.
    pub(crate) fn budget(&self, rule: &Rule, key: &str, now: Nanos) -> KeyBudget {
        let name = rule_slot(rule.action(), rule.algorithm(), key);
        let budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        budgets
            .get(&name)
            .map(|b| b.figures(now / NANOS_PER_MILLI))
            .unwrap_or_default()
    }

    /// Runs `f` on the record of `name` (made when missing, if there is room); `None` when there
    /// was no room.
    fn with_budget<T>(
        &self,
        name: &str,
        now: Nanos,
        f: impl FnOnce(&mut BudgetRecord) -> T,
    ) -> Option<T> {
        let mut budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        if !budgets.contains_key(name) && budgets.len() >= MAX_MARKS {
            let now_ms = now / NANOS_PER_MILLI;
            budgets.retain(|_, b| !b.is_spent(now_ms));
            if budgets.len() >= MAX_MARKS {
                return None;
            }
        }
        Some(f(budgets.entry(name.to_owned()).or_default()))
    }
}
