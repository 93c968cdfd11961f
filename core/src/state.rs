//! Per-key state of any algorithm, for stores that keep state themselves (the memory store, the
//! dashboard's what-if simulation). The Redis store keeps the same fields in Redis types instead.

use crate::algorithms::{
    fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
};

/// The state of one key under one algorithm. `Fresh` is a key never seen (or expired).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum State {
    /// Never seen: every algorithm treats it as idle.
    #[default]
    Fresh,
    /// See [`gcra::GcraState`].
    Gcra(gcra::GcraState),
    /// See [`leaky_bucket::LeakyState`].
    LeakyBucket(leaky_bucket::LeakyState),
    /// See [`token_bucket::TokenState`].
    TokenBucket(token_bucket::TokenState),
    /// See [`fixed_window::FixedWindowState`].
    FixedWindow(fixed_window::FixedWindowState),
    /// See [`sliding_log::SlidingLogState`].
    SlidingLog(sliding_log::SlidingLogState),
    /// See [`sliding_window::SlidingWindowState`].
    SlidingWindow(sliding_window::SlidingWindowState),
}
