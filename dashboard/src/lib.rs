//! sluice-dashboard: the operator's page for sluice: rules with validation, live funnel levels
//! and a what-if plot that runs the core algorithms before a rule is saved.
//!
//! The logic is plain Rust and tested natively: [`api`] (wire bodies and error descriptions),
//! [`rules`] (table rows), [`form`] (the editor and its validation through sluice-core),
//! [`plot`] (the what-if simulation and its SVG geometry) and [`live`] (funnels). The Leptos
//! components in `app` exist only on wasm32 and just draw these models.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod form;
pub mod format;
pub mod live;
pub mod plot;
pub mod rules;

#[cfg(target_arch = "wasm32")]
pub mod app;
