//! sluice-backend: the decision API (what Envoy's filter calls) and the admin API + dashboard,
//! over a [`store::Store`]: in memory for one process, or Redis / Redis Cluster for many replicas.
//!
//! The binary (`sluice`, see [`cli`]) only parses flags and calls [`app::run`]; tests call
//! [`app::run`] directly with listeners on port 0.
//!
//! Layers, each importing only those below it: [`state`] (the shared [`state::App`]) over the
//! parts it holds ([`store`], [`rules`], [`metrics`], [`activity`], [`deadline`], [`ratelimit`]'s
//! configuration, ...); the decision path ([`decide`]) over the state; the ways in ([`http`],
//! [`grpc`]: the decision exchange and the RLS front door) over the decision path; [`app`] (the
//! assembly: `run` and the listeners) on top.

pub mod activity;
pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod decide;
pub mod failure_log;
pub mod fanout;
pub mod grpc;
pub mod history;
pub mod http;
pub mod levels;
pub mod log_limit;
pub mod metrics;
pub mod ratelimit;
pub mod resets;
pub mod rlqs;
pub mod rules;
pub mod rules_file;
pub mod secret_file;
pub mod sign_ins;
pub mod state;
pub mod store;
pub mod tls;
pub mod touched;
pub mod touched_view;
pub mod wrong_listener;

#[cfg(test)]
mod test_support;

pub use app::{run, Listeners, RatelimitHttp, RunError};
pub use config::{Config, StoreChoice};
