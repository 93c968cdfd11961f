//! Envoy's Rate Limit Quota Service on the gRPC listener
//! (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`), for
//! Envoy's built-in `envoy.filters.http.rate_limit_quota` filter: [`service`] serves the streams,
//! [`response`] writes assignments. What is assigned and paid: [`crate::rlqs`]; the user's page
//! is docs/rlqs.md.

pub mod lenient;
pub mod response;
pub mod service;

pub use service::Rlqs;
