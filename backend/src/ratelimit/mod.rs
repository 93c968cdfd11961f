//! envoyproxy/ratelimit's configuration files (`sluice --ratelimit-config PATH`; docs/rls.md
//! "Coming from envoyproxy/ratelimit"): read, validated, matched, and their rules kept in the
//! store. The requests for their domains are answered by the RLS front door
//! ([`crate::grpc::rls::config_path`]); nothing here decides.
//!
//! - [`config`]: one file parsed and validated (every refusal names the file and the field).
//! - [`load`]: a file or a directory read whole; several domains side by side.
//! - [`translate`]: each domain's descriptor tree and one sluice rule per counted limit.
//! - [`matcher`]: the peer's most-specific match, wildcards, `share_threshold`.
//! - [`watch`]: the configuration in force, its rules in the store, reload on change.
//! - [`owned`]: the admin API refuses to edit what a file owns.
//! - [`check`]: `sluice rules check PATH`, for CI.
//! - [`semantics`]: whose answers a domain gives (the peer's, or sluice's point by point).

pub mod check;
pub mod config;
pub mod load;
pub mod matcher;
pub mod owned;
pub mod semantics;
pub mod translate;
pub mod watch;

pub use watch::Live;
