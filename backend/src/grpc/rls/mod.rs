//! Envoy's rate limit service (RLS v3) on the gRPC listener, so Envoy's native
//! `envoy.filters.http.ratelimit` filter can use sluice's rules and store.
//!
//! - [`request`]: descriptors → checks, through core's one mapping
//!   ([`sluice_core::descriptor`]).
//! - [`service`]: the decisions (shared with `POST /v1/throttle` through [`crate::decide`]) and
//!   failures as gRPC statuses.
//! - [`response`]: statuses, headers and dynamic metadata.
//! - [`commit`]: descriptors that commit a reservation (reserve, then commit).
//! - [`marks`]: a request with sluice's marks taken off (the ratelimit-config path).

pub mod commit;
pub mod marks;
pub mod request;
pub mod response;
pub mod service;

pub use service::Rls;
