//! The RLQS server's state beside the store: which Envoy stream holds which quota filter bucket,
//! the token-bucket share each one enforces, and the payments that make the shares add up to the
//! rule (docs/rlqs.md). The wire is [`crate::grpc::rlqs`]; the pure parts (mapping, shape,
//! split, limits) are [`sluice_core::rlqs`].
//!
//! Shares are prepaid like leases ([`sluice_core::lease`]): a fresh bucket's burst is debited
//! from the store before it is assigned, each share's refill is paid every tick
//! ([`sluice_core::rlqs::TICK_MS`]) from the store, and allowed usage reported beyond what was
//! paid (Envoy's no-assignment window) is post-debited. So the store's state for a key (the one
//! the filter, RLS and the HTTP API decide on) stays the account every admission is paid from.
//!
//! One ledger task per backend process owns the state ([`task`]), so the steps are serial and
//! need no lock. The ledger lives in this process's memory only: a restarted backend does not
//! know the shares of streams that were open before (docs/rlqs.md says what that costs).

pub mod ledger;
pub mod metrics;
pub mod pay;
pub mod reader;
pub mod settings;
pub mod task;

pub use ledger::{Assigned, Assignment};
pub use settings::Settings;
pub use task::{spawn, Handle};
