//! envoyproxy/ratelimit's configuration files, served as that service answers them
//! (`sluice --ratelimit-config PATH`; docs/rls.md "Coming from envoyproxy/ratelimit").
//!
//! - [`config`]: one file parsed and validated (every refusal names the file and the field).
//! - [`load`]: a file or a directory read whole; several domains side by side.
//! - [`translate`]: each domain's descriptor tree and one sluice rule per counted limit.
//! - [`matcher`]: the peer's most-specific match, wildcards, `share_threshold`.
//! - [`decide`]: a request's answer (hits, replaces, shadow, quota mode, statuses).
//! - [`metadata`]: the peer's response metadata.
//! - [`watch`]: the configuration in force, its rules in the store, reload on change.
//! - [`owned`]: the admin API refuses to edit what a file owns.
//! - [`check`]: `sluice rules check PATH`, for CI.

pub mod check;
pub mod config;
pub mod decide;
pub mod load;
pub mod matcher;
pub mod metadata;
pub mod owned;
pub mod translate;
pub mod watch;

pub use watch::Live;
