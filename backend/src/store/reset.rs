//! The admin's key reset: a key's throttle state and cost-budget records removed at once.

use async_trait::async_trait;
use sluice_core::{Action, Algorithm};

use super::error::StoreError;

/// Resets a key, at the store's time (see [`super::DecisionStore`]).
#[async_trait]
pub trait ResetStore: Send + Sync + 'static {
    /// Removes every throttle state `key` holds under `action` (one per algorithm) and its
    /// cost-budget records (reservations in flight, overshoot), as if it had never been seen, in
    /// one atomic step; returns the algorithms whose state was there.
    ///
    /// In the same step it marks the reservations it dropped, so that a later
    /// [`super::BudgetStore::commit`] of a reservation made before the reset changes nothing (no
    /// refund, no debit; a retry is a duplicate): the reservations held in flight by their ids,
    /// the others by their `reserved_at` ([`sluice_core::budget::before_reset`]). Why: a refund
    /// could only give back units of reservations made since the reset, and a debit would charge
    /// the fresh budget for spending the reset wiped. The marks last
    /// [`sluice_core::commit::COMMIT_ID_TTL_MS`], as a commit id's own.
    async fn reset_key(&self, action: &Action, key: &str) -> Result<Vec<Algorithm>, StoreError>;
}
