//! Where throttle state and rules live. Two stores, memory (one process, the embedded default)
//! and Redis (single node, Sentinel or Cluster, shared by every replica), each serving the same
//! concerns, one trait per concern (as limitador splits its storage):
//!
//! - [`DecisionStore`]: the throttle steps and peeks (the hot path);
//! - [`BudgetStore`]: cost budgets' reservations and commits;
//! - [`ResetStore`]: the admin's key reset;
//! - [`RuleStore`]: rules, overrides, their version and the audit trail;
//! - [`ActivityStore`]: the recent keys of each action;
//! - [`HistoryStore`]: history steps and top denied keys;
//! - [`HealthStore`]: kind, ping, health report;
//! - [`ShareStore`]: the RLQS shares every replica holds of each key.
//!
//! Code that needs one concern takes that trait (`&dyn RuleStore`, or a generic bound for two);
//! the app holds one `Arc<dyn Store>`, every concern at once. Time is the store's own
//! ([`Clock`]): no method takes one. The conformance suite in `backend/tests` holds both stores
//! to the same answers as sluice-core's transitions.

mod activity;
mod all;
mod budget;
mod changes;
mod clock;
mod decision;
mod error;
mod health;
mod history;
pub mod memory;
pub mod redis;
mod reset;
pub mod rlqs;
mod rules;

pub use activity::{Activity, ActivityStore, ACTIVITY_KEEP, TOUCHED_KEEP};
pub use all::{AllOutcome, CheckRequest};
pub use budget::{BudgetStore, CommitOutcome};
pub use changes::{AuditStamp, ChangeOutcome, RuleChange};
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::DecisionStore;
pub use error::StoreError;
pub use health::HealthStore;
pub use history::HistoryStore;
pub use reset::ResetStore;
pub use rlqs::ShareStore;
pub use rules::{listed_overrides, RuleSnapshot, RuleStore};

/// Every concern at once: what the app holds and what a store is. Implemented by every type that
/// serves them all.
pub trait Store: Throttles + ShareStore {}

impl<T: Throttles + ShareStore> Store for T {}

/// The concerns of the decisions and their administration (every store concern but the RLQS
/// shares, [`ShareStore`]).
pub trait Throttles:
    DecisionStore + BudgetStore + ResetStore + RuleStore + ActivityStore + HistoryStore + HealthStore
{
}

impl<T> Throttles for T where
    T: DecisionStore
        + BudgetStore
        + ResetStore
        + RuleStore
        + ActivityStore
        + HistoryStore
        + HealthStore
{
}
