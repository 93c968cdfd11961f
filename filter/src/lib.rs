//! sluice-filter: the proxy-wasm filter that puts sluice in front of an upstream, inside Envoy.
//!
//! Per request: match a route ([`route`]), take its key (encoded and bounded by [`key`]), admit it
//! from a lease ([`lease`]: units the backend debited in advance, spent with no callout), answer
//! from the denial cache ([`cache`]) or ask the backend (by default as a message on the worker's
//! exchange stream, [`exchange`]; or its HTTP decision API; or its gRPC rate limit service with the
//! messages of [`rls_proto`]), then resume (with
//! rate-limit headers on the response) or reply 429 ([`reply`]). What only the filter knows is
//! counted per action and sent to the backend on a timer ([`report`]). The request flow ([`flow`])
//! talks to Envoy only through the [`host::Host`] trait, so it is tested natively against a fake
//! host (`fake_host`); `abi` is the thin proxy-wasm glue, compiled only for wasm32. A decision
//! that could not be made is classified once ([`failure`]), counted by reason and said in Envoy's
//! log, at most once per 10 s per reason.

pub mod cache;
pub mod config;
pub mod cost;
pub mod exchange;
pub mod exports;
pub mod failure;
pub mod flow;
pub mod host;
pub mod key;
pub mod lease;
pub mod reply;
pub mod report;
pub mod rls;
pub mod rls_proto;
pub mod route;

#[cfg(target_arch = "wasm32")]
mod abi;

#[cfg(test)]
mod fake_host;
