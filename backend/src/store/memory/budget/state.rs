//! The memory store's budget state ([`CommitReceipts`]), apart from the trait that serves it
//! (`../budget.rs`), so that `mod.rs` holds it without importing the trait's file.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sluice_core::budget::{
    before_reset, bounded_commit, budget_until_ms, is_lease_return, BudgetRecord,
};
use sluice_core::commit::{commit, Commit, Committed};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::KeyBudget;
use sluice_core::{Action, Algorithm, Nanos, Params, Rule};

use super::super::shards::ShardedStates;
use super::super::slot::rule_slot;
use super::receipts::{receipt_key, Receipt, Receipts, MAX_RECEIPTS};
use crate::store::CommitOutcome;

/// Request ids already committed or dropped by a reset, and key resets: state name + id →
/// (expiry, [`Receipt`]); and per state name the cost-budget record ([`BudgetRecord`]: reservations
/// in flight, debits beyond them), at most [`MAX_RECEIPTS`] names (spent records go first; past
/// that a new key's record is not kept: the view then shows zeros for it, decisions never read
/// it).
#[derive(Default)]
pub(crate) struct CommitReceipts {
    pub(crate) receipts: Mutex<Receipts>,
    pub(crate) budgets: Mutex<HashMap<String, BudgetRecord>>,
}

impl CommitReceipts {
    /// Commits `c` for `key` under `rule` at `now`, once per `id`; a reservation from before
    /// the key's reset changes nothing ([`before_reset`]).
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
        let receipt = receipt_key(&name, id);
        let mut receipts = self.receipts.lock().unwrap_or_else(PoisonError::into_inner);
        let live = |k: &str| {
            receipts
                .get(k)
                .filter(|(expires, _)| *expires > now)
                .map(|(_, m)| *m)
        };
        // Today's level, nothing changed: a commit of nothing.
        let nothing = Commit {
            reserved: 0,
            actual: 0,
            ..c
        };
        // What the caller says it reserved, bounded by what was recorded under its id (a lease
        // return: by the key's lease pool).
        let now_ms = now / NANOS_PER_MILLI;
        let (recorded, from_pool) = {
            let budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
            let record = budgets.get(&name);
            match record.and_then(|b| b.reservation(id)) {
                Some(r) => (Some(r), false),
                None if is_lease_return(id) => (record.and_then(|b| b.lease_pool(now_ms)), true),
                None => (None, false),
            }
        };
        let unrecorded = recorded.is_none() && c.reserved > 0;
        let c = bounded_commit(c, recorded);
        let stale = match live(&receipt) {
            Some(Receipt::Committed(first)) => {
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
                    unrecorded: false,
                    receipts_shed: 0,
                };
            }
            Some(Receipt::Reset) => true,
            Some(Receipt::ResetAt(_)) | None => {
                let reset_ms = match live(&receipt_key(&name, "")) {
                    Some(Receipt::ResetAt(ms)) => Some(ms),
                    _ => None,
                };
                before_reset(c.reserved_at, reset_ms)
            }
        };
        let applied = if stale { nothing } else { c };
        let (committed, until_ms) = states.update(&name, params, now, |state| {
            let (committed, next) = commit(&params, state, now, applied);
            let until_ms = budget_until_ms(&params, next.as_ref().unwrap_or(state), now);
            ((committed, until_ms), next)
        });
        let receipts_shed = receipts.remember_commit(&name, id, Receipt::Committed(committed), now);
        self.with_budget(&name, now, |b| {
            b.record_commit(id, &committed, until_ms, now / NANOS_PER_MILLI);
            if from_pool && !stale {
                b.spend_lease_pool(c.reserved);
            }
        });
        CommitOutcome {
            committed,
            duplicate: false,
            unrecorded: unrecorded && !stale,
            receipts_shed,
        }
    }

    /// Resets `key` under `action` at `now`, in one step under the receipts' lock: removes its
    /// throttle state of every algorithm (through `states`) and its budget records, marks every
    /// reservation the records held in flight as dropped by the reset, and remembers the reset's
    /// time, so that a commit of a reservation from before it changes nothing. Returns the
    /// algorithms whose state was there.
    pub(crate) fn reset(
        &self,
        states: &ShardedStates,
        action: &Action,
        key: &str,
        now: Nanos,
    ) -> Vec<Algorithm> {
        let mut receipts = self.receipts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut removed = Vec::new();
        for algorithm in Algorithm::ALL {
            let name = rule_slot(action, algorithm, key);
            if states.remove(&name, now) {
                removed.push(algorithm);
            }
            let record = self
                .budgets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&name);
            for id in record.iter().flat_map(BudgetRecord::in_flight_ids) {
                receipts.remember(receipt_key(&name, id), Receipt::Reset, now);
            }
            let reset_at = Receipt::ResetAt(now / NANOS_PER_MILLI);
            receipts.remember(receipt_key(&name, ""), reset_at, now);
        }
        removed
    }
}

impl CommitReceipts {
    /// Holds an allowed reservation of `units` for `key` under `rule` as in flight, unless its
    /// commit already came or a reset dropped it (then there is nothing left in flight). False
    /// when not recorded.
    pub(crate) fn record_reservation(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
        now: Nanos,
    ) -> bool {
        let name = rule_slot(rule.action(), rule.algorithm(), key);
        // The receipts' lock first, as in a commit: a commit of this id cannot land in between.
        let receipts = self.receipts.lock().unwrap_or_else(PoisonError::into_inner);
        let committed = receipts
            .get(&receipt_key(&name, id))
            .is_some_and(|(expires, _)| *expires > now);
        if committed {
            return false;
        }
        self.with_budget(&name, now, |b| {
            b.record_reservation(id, units, now / NANOS_PER_MILLI)
        })
        .unwrap_or(false)
    }
    /// Adds a lease grant of `units` to `key`'s lease pool under `rule` at `now` (not kept when
    /// the records are full: its return then gives nothing back).
    pub(crate) fn record_lease_grant(&self, rule: &Rule, key: &str, units: u64, now: Nanos) {
        let name = rule_slot(rule.action(), rule.algorithm(), key);
        self.with_budget(&name, now, |b| {
            b.record_lease_grant(units, now / NANOS_PER_MILLI);
        });
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
    pub(crate) fn with_budget<T>(
        &self,
        name: &str,
        now: Nanos,
        f: impl FnOnce(&mut BudgetRecord) -> T,
    ) -> Option<T> {
        let mut budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        if !budgets.contains_key(name) && budgets.len() >= MAX_RECEIPTS {
            let now_ms = now / NANOS_PER_MILLI;
            budgets.retain(|_, b| !b.is_spent(now_ms));
            if budgets.len() >= MAX_RECEIPTS {
                return None;
            }
        }
        Some(f(budgets.entry(name.to_owned()).or_default()))
    }
}
