//! Cost budgets and key resets in the memory store ([`BudgetStore`], [`ResetStore`]). Commits: core's own [`sluice_core::commit::commit`] under the key's shard
//! lock, and the request ids already committed, so that a retried commit changes nothing; and the
//! keys' cost-budget records ([`sluice_core::budget`]), which a commit updates in the same call;
//! and key resets, which remove the state and the record in one step with the receipts that make a
//! later commit of a reservation from before the reset change nothing.
//!
//! The ids live in one bounded map (`receipts.rs`: at most 100,000, and 1,024 commit receipts per
//! key, `sluice_core::limits::MAX_RECEIPTS_PER_KEY`, the oldest shed and counted), each for
//! [`COMMIT_ID_TTL_MS`] of store time; expired ones are dropped when the map is full, and if it
//! is still full the one closest to expiry goes (a retry of that commit would then apply again:
//! the cost of a bound on memory, as with the state map's evictions). The map's lock is held
//! across the commit and the reset so that two concurrent commits of one id apply once, and a
//! commit lands wholly before or after a reset; it is always taken before a shard lock, never
//! after, so no two locks are ever waited on in a cycle.

use async_trait::async_trait;
use sluice_core::commit::Commit;
use sluice_core::wire::KeyBudget;
use sluice_core::{Action, Algorithm, Rule};

use super::MemoryStore;
use crate::store::{BudgetStore, CommitOutcome, ResetStore, StoreError};

pub(super) mod receipts;
pub(super) mod state;

#[async_trait]
impl BudgetStore for MemoryStore {
    async fn record_reservation(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .commits
            .record_reservation(rule, key, id, units, self.now()))
    }

    async fn record_lease_grant(
        &self,
        rule: &Rule,
        key: &str,
        units: u64,
    ) -> Result<(), StoreError> {
        self.commits
            .record_lease_grant(rule, key, units, self.now());
        Ok(())
    }

    async fn commit(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        commit: Commit,
    ) -> Result<CommitOutcome, StoreError> {
        let now = self.now();
        Ok(self
            .commits
            .commit(&self.states, rule, key, id, commit, now))
    }

    async fn budget(&self, rule: &Rule, key: &str) -> Result<KeyBudget, StoreError> {
        Ok(self.commits.budget(rule, key, self.now()))
    }
}

#[async_trait]
impl ResetStore for MemoryStore {
    async fn reset_key(&self, action: &Action, key: &str) -> Result<Vec<Algorithm>, StoreError> {
        let now = self.now();
        Ok(self.commits.reset(&self.states, action, key, now))
    }
}
