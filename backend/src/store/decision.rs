//! Decisions: the atomic throttle steps on each key's state, and peeks of it. The hot path: every
//! metered request reaches exactly one of these methods.

use async_trait::async_trait;
use sluice_core::cell::CellArgs;
use sluice_core::{Decision, Lease, Leased, Rule};

use super::all::{AllOutcome, CheckRequest};
use super::error::StoreError;

/// Decisions at the store's time: its [`super::Clock`] (the system clock for memory, Redis
/// `TIME` for Redis in production; a manual clock in tests).
#[async_trait]
pub trait DecisionStore: Send + Sync + 'static {
    /// Decides one request for `key` under `rule`, atomically, with no lease: every request
    /// decided on its own (the RLS path, peeks, tools).
    async fn throttle(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
    ) -> Result<Decision, StoreError> {
        Ok(self
            .throttle_leased(rule, key, quantity, None)
            .await?
            .decision)
    }

    /// Decides one request for `key` under `rule`, atomically, and with `lease` (a caller that
    /// can hold one, under an enforced rule: [`sluice_core::leased::offer`]) also debits a lease
    /// grant in the same atomic step, answering the decision of quantity + granted units
    /// ([`sluice_core::leased`]). With `lease: None` it is exactly [`DecisionStore::throttle`].
    async fn throttle_leased(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        lease: Option<Lease>,
    ) -> Result<Leased, StoreError>;

    /// Decides all-or-nothing checks ([`sluice_core::all`]): allowed only if every
    /// check allows, and a denied request changes no state. The memory store and a single Redis
    /// node decide them in one atomic step; Redis Cluster reserves each in turn and refunds on a
    /// denial (see [`AllOutcome::unrefunded`]). No leases. At most
    /// [`sluice_core::limits::MAX_CHECKS`] checks (callers validate).
    async fn throttle_all(&self, checks: &[CheckRequest<'_>]) -> Result<AllOutcome, StoreError>;

    /// redis-cell `CL.THROTTLE` semantics (gcra), under its own key namespace.
    async fn cell_throttle(&self, key: &str, args: CellArgs) -> Result<Decision, StoreError>;

    /// Levels of many keys as of now (quantity-0 peeks: nothing changes).
    async fn peek_many(&self, rule: &Rule, keys: &[String]) -> Result<Vec<Decision>, StoreError>;
}
