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
//! need no lock. What each replica's shares take of a key is also kept in the store beside the
//! key's state ([`shares`], `ledger/registry.rs`, [`crate::store::rlqs`]), so replicas split a
//! rule together and a stopped backend's shares are paid by a live one until they expire.

pub mod ledger;
pub mod metrics;
pub mod pay;
pub mod reader;
pub mod settings;
pub mod shares;
pub mod task;

pub use ledger::{Assigned, Assignment};
pub use settings::Settings;
pub use task::{spawn, Handle};
