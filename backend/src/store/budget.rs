//! Cost budgets ([`sluice_core::budget`]): reservations recorded in flight, the commits that end
//! them, and each key's budget figures for the key view.

use async_trait::async_trait;
use sluice_core::commit::{Commit, Committed};
use sluice_core::wire::KeyBudget;
use sluice_core::Rule;

use super::error::StoreError;

/// Reservations and commits, at the store's time (see [`super::DecisionStore`]).
#[async_trait]
pub trait BudgetStore: Send + Sync + 'static {
    /// Records an allowed reservation of `units` for `key` under `rule` as in flight under `id` (its
    /// commit's id, checked by callers with [`sluice_core::commit::check_id`]), until
    /// [`BudgetStore::commit`] of that id removes it or
    /// [`sluice_core::limits::RESERVATION_IN_FLIGHT_MS`] passes ([`sluice_core::budget`]). Only
    /// for throttle requests that carry a `reservation_id`, after their allowed decision: the
    /// plain throttle path never calls it. Returns false when not recorded (the key already holds
    /// [`sluice_core::limits::MAX_IN_FLIGHT_PER_KEY`] live ones, or the commit already came).
    async fn record_reservation(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
    ) -> Result<bool, StoreError>;

    /// Adds a lease grant of `units` for `key` under `rule` to the key's lease pool
    /// ([`sluice_core::budget::BudgetRecord::record_lease_grant`]): what the filter's lease
    /// returns (commits with a `lease-` id, [`sluice_core::budget::is_lease_return`]) may give
    /// back, at most, since they have no reservation recorded of their own.
    async fn record_lease_grant(
        &self,
        rule: &Rule,
        key: &str,
        units: u64,
    ) -> Result<(), StoreError>;

    /// Commits a reservation of `key` under `rule` ([`sluice_core::commit`]): gives back what is
    /// surely still held of reserved − actual, debits actual − reserved without a check, in one
    /// atomic step with the commit receipt of `id` (checked by callers with
    /// [`sluice_core::commit::check_id`]): a commit whose id this key already committed within
    /// [`sluice_core::commit::COMMIT_ID_TTL_MS`] changes nothing and answers the first one's
    /// numbers ([`CommitOutcome::duplicate`]). A first commit also updates the key's budget
    /// record in the same step: the reservation recorded under `id` is no longer in flight, and a
    /// debit adds to the key's overshoot figures ([`sluice_core::budget`]).
    /// What the caller claims (`commit.reserved`, `commit.reserved_at`) is bounded by the
    /// reservation recorded under `id` ([`sluice_core::budget::bounded_commit`]): at most its
    /// units are given back, and a commit with no record gives back nothing.
    /// A reservation from before the key's latest reset ([`super::ResetStore::reset_key`])
    /// changes nothing: it answers zeros, not as a duplicate, and writes the receipt of `id` so a retry is one.
    async fn commit(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        commit: Commit,
    ) -> Result<CommitOutcome, StoreError>;

    /// `key`'s cost-budget figures under `rule` now: reservations in flight and the commits'
    /// debits beyond them in the current budget ([`sluice_core::budget`]). Its `debt` is 0 here:
    /// the debt lives in the throttle state, and the key view reads it from its peek
    /// ([`sluice_core::budget::debt`]).
    async fn budget(&self, rule: &Rule, key: &str) -> Result<KeyBudget, StoreError>;
}

/// What [`BudgetStore::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommitOutcome {
    /// Refunded, debited, overshoot and the level after. For a duplicate: the first commit's
    /// numbers, with the level as of now.
    pub committed: Committed,
    /// The id was already committed: nothing changed.
    pub duplicate: bool,
    /// A first commit that claimed a reservation (`reserved` > 0) but found none recorded under
    /// its id ([`BudgetStore::record_reservation`]): nothing was given back and its whole
    /// `actual` was debited ([`sluice_core::budget::bounded_commit`]).
    pub unrecorded: bool,
    /// Receipts of older commits of the key dropped to keep it within
    /// [`sluice_core::limits::MAX_RECEIPTS_PER_KEY`] (or the store's own bound).
    pub receipts_shed: u64,
}
