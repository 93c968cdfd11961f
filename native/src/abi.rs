//! The bindings' ground: Envoy's dynamic-module ABI (`v0.2.0`, Envoy 1.40/1.41) as the rest of
//! the crate uses it. With `hooks.rs` (the exported event hooks, on top of the glue), these are
//! the crate's only modules allowed `unsafe` (`scripts/lint.sh` checks every other one forbids
//! it); each `unsafe` block states its invariant.
//!
//! - `ffi`: the `repr(C)` types, constants and `extern "C"` declarations of the callbacks, the
//!   load-time check that the process exports them, the log callback, the buffer readers.
//! - `handle`: safe handles over the callbacks (a request's filter, a configuration, their
//!   schedulers), made only by the hooks through `unsafe` constructors.
//! - `worker`: one worker's state behind the lock that lets the main thread reach it.
//!
//! Lower layers never import upper ones: nothing here imports the glue or the hooks.

#[allow(unsafe_code)]
pub mod ffi;
#[allow(unsafe_code)]
pub mod handle;
#[allow(unsafe_code)]
mod worker;

pub use ffi::{log, Level, ABI_VERSION};
pub use handle::{ConfigHandle, FilterHandle, FilterScheduler, LinePart, ResponsePart, Scheduler};
pub use worker::{FlowRef, LocalState, WorkerBound};
