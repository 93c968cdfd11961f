//! Envoy's rate limit service (RLS v3) on the gRPC listener, so Envoy's native
//! `envoy.filters.http.ratelimit` filter can use sluice's rules and store. One front door that
//! owns both descriptor mappings; both decide through [`crate::decide`], as `POST /v1/throttle`.
//!
//! - [`service`]: the front door: the caller's deadline, the call's backstop, and the mapping
//!   the request's domain chooses.
//! - [`rules_path`]: descriptors as checks of sluice rules ([`request::checks`], core's one
//!   mapping, [`sluice_core::descriptor`]).
//! - [`config_path`]: a domain of `--ratelimit-config` answered as envoyproxy/ratelimit answers
//!   it (the configuration itself is [`crate::ratelimit`]); [`peer_metadata`]: that peer's
//!   response metadata; [`peer_counting`]: that peer's arithmetic (its semantics, the default).
//! - [`request`]: the checks every request passes, hits, and the sluice-rules mapping.
//! - [`response`]: statuses, headers and dynamic metadata.
//! - [`commit`]: descriptors that commit a reservation (reserve, then commit), for both paths.
//! - [`budget_entries`]: a request with sluice's budget entries taken off (the ratelimit-config path).
//! - [`status`]: failures as gRPC statuses.

pub mod budget_entries;
pub mod commit;
pub mod config_path;
pub mod peer_counting;
pub mod peer_metadata;
pub mod request;
pub mod response;
pub mod rules_path;
pub mod service;
pub mod status;
pub mod unknown_domains;

pub use service::Rls;
