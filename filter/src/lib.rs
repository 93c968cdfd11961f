//! sluice-filter: the sluice filter's logic, shared by its two Envoy hosts: the proxy-wasm
//! module (`wasm/`, crate `sluice-filter-wasm`) and the Envoy dynamic module (`native/`, crate
//! `sluice-filter-native`). Nothing here knows which host runs it (no proxy-wasm, no ABI: the
//! same code on both targets); a change to what the filter does is made here once, for both.
//!
//! Per request: match a route ([`route`]), take its key (encoded and bounded by [`key`]), admit it
//! from a lease ([`lease`]: units the backend debited in advance, spent with no callout), answer
//! from the denial cache ([`cache`]) or ask the backend (by default as a message on the worker's
//! exchange stream, [`exchange`]; or its HTTP decision API; or its gRPC rate limit service with the
//! messages of [`rls_proto`]), then resume (with
//! rate-limit headers on the response) or reply 429 ([`reply`]). What only the filter knows is
//! counted per action and sent to the backend on a timer ([`report`]). The request flow ([`flow`])
//! talks to Envoy only through the [`host::Host`] trait, which each host implements over its own
//! calls, so it is tested natively against a fake host (`fake_host`). A decision
//! that could not be made is classified once ([`failure`]), counted by reason and said in Envoy's
//! log, at most once per 10 s per reason.

pub mod cache;
pub mod config;
pub mod cost;
pub mod exchange;
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

#[cfg(test)]
mod fake_host;
