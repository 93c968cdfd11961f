//! sluice-filter-native: the sluice filter as an Envoy dynamic module
//! (`envoy.filters.http.dynamic_modules`, Envoy 1.40/1.41, ABI `v0.2.0`).
//!
//! The same filter as the proxy-wasm build: [`sluice_filter`] holds the request flow, routes,
//! keys, denial cache, leases, reports and the exchange protocol behind its `Host` trait; this
//! crate is the second host. Its modules, by floor (each imports only those listed above it):
//!
//! - `copied` (ground): what Envoy hands over, copied: request headers, callout answers.
//! - `abi`: the bindings: the ABI's `extern "C"` callbacks (`abi::ffi`), safe handles over them
//!   (`abi::handle`), a worker's state behind its lock (`abi::worker`). `unsafe` lives here and in
//!   `hooks` only, each block's invariant stated.
//! - `envoy`: the [`envoy::Envoy`] trait: what the glue asks of Envoy per request, implemented by
//!   `abi::FilterHandle` (and by a fake in the glue's unit tests).
//! - `shared`: the lease table and denial cache as one process-wide sharded map.
//! - `grpc`: gRPC unary calls (exchange `Call`, RLS) framed by hand over the HTTP callout.
//! - `relay`: count reports without `on_tick`: a timer thread wakes the main thread when there is
//!   something to send, and the main thread runs each worker's report turn under that worker's
//!   lock and sends it as a config-level callout.
//! - `stream`: `grpc_stream` over one exchange stream kept by the main thread: decisions handed to
//!   it (the configuration's scheduler) and answers handed back (each request's scheduler).
//! - `timer`: the timer threads behind `relay` and `stream`: a wake-up only when asked (a
//!   deadline, a reopen, a report or commit pending), none while Envoy is idle.
//! - `glue`: the hooks' work: the configuration, the per-worker state, the `Host` over
//!   [`envoy::Envoy`], what a hook leaves Envoy to do after it (`glue::After`).
//! - `hooks` (top): the exported event hooks Envoy calls (`envoy_dynamic_module_on_*`), each under
//!   `catch_unwind`, the callbacks checked against the process at load.

#![deny(unsafe_code)]

mod abi;
pub mod copied;
pub mod envoy;
#[cfg(feature = "fault-injection")]
mod fault;
pub mod glue;
pub mod grpc;
#[allow(unsafe_code)]
mod hooks;
pub mod relay;
pub mod shared;
pub mod stream;
pub mod timer;

pub use abi::ABI_VERSION;
