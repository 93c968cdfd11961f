//! sluice-filter-wasm: the sluice filter as a proxy-wasm module, the thin host that puts
//! [`sluice_filter`] (the request flow, routes, keys, denial cache, leases, reports and the
//! exchange protocol, shared with the Envoy dynamic module in `native/`) inside Envoy's wasm VM.
//!
//! - `abi` (compiled only for wasm32): Envoy's proxy-wasm callbacks in, the shared
//!   [`sluice_filter::flow::Flow`] does the work, hostcalls out through its `Host` trait; with
//!   `exchange_glue`, the root context's side of the worker's exchange stream.
//! - [`exports`]: which proxy-wasm callbacks the built module keeps exported, and the rewrite
//!   that drops the others (the `trim_exports` example, run by `scripts/build-filter.sh`).

pub mod exports;

#[cfg(target_arch = "wasm32")]
mod abi;
