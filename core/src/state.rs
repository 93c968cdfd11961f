//! Per-key state of any algorithm, for stores that keep state themselves (the memory store, the
//! dashboard's what-if simulation). The Redis store keeps the same fields in Redis types instead.

use std::collections::VecDeque;

use crate::algorithms::{
    fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
};
use crate::params::MeterParams;

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

/// A sliding log that was never seen.
static FRESH_LOG: sliding_log::SlidingLogState = sliding_log::SlidingLogState {
    entries: VecDeque::new(),
};

/// The state as one algorithm reads it: a state of another algorithm (the rule changed) or
/// none counts as fresh. Shared by the decisions ([`crate::Params::decide`]) and the commits
/// ([`crate::commit::commit`]).
impl State {
    /// gcra's state, or a fresh one.
    pub fn gcra(&self) -> gcra::GcraState {
        match self {
            State::Gcra(s) => *s,
            _ => gcra::GcraState::default(),
        }
    }

    /// leaky_bucket's state, or an empty funnel.
    pub fn leaky_bucket(&self) -> leaky_bucket::LeakyState {
        match self {
            State::LeakyBucket(s) => *s,
            _ => leaky_bucket::LeakyState::default(),
        }
    }

    /// token_bucket's state, or a full bucket.
    pub fn token_bucket(&self, p: MeterParams) -> token_bucket::TokenState {
        match self {
            State::TokenBucket(s) => *s,
            _ => token_bucket::TokenState::full(p),
        }
    }

    /// fixed_window's state, or an empty window.
    pub fn fixed_window(&self) -> fixed_window::FixedWindowState {
        match self {
            State::FixedWindow(s) => *s,
            _ => fixed_window::FixedWindowState::default(),
        }
    }

    /// sliding_log's state, or an empty log (borrowed: a log may hold 10,000 entries).
    pub fn sliding_log(&self) -> &sliding_log::SlidingLogState {
        match self {
            State::SlidingLog(s) => s,
            _ => &FRESH_LOG,
        }
    }

    /// sliding_window's state, or empty counters.
    pub fn sliding_window(&self) -> sliding_window::SlidingWindowState {
        match self {
            State::SlidingWindow(s) => *s,
            _ => sliding_window::SlidingWindowState::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_algorithms_state_reads_as_fresh() {
        let p = MeterParams {
            interval: 1_000,
            capacity: 3,
        };
        let gcra = State::Gcra(gcra::GcraState { tat: Some(5) });
        assert_eq!(gcra.gcra().tat, Some(5));
        // A rule changed from gcra: each other algorithm starts as a fresh key does.
        assert_eq!(gcra.token_bucket(p), token_bucket::TokenState::full(p));
        assert_eq!(gcra.leaky_bucket(), leaky_bucket::LeakyState::default());
        assert_eq!(
            gcra.fixed_window(),
            fixed_window::FixedWindowState::default()
        );
        assert_eq!(
            gcra.sliding_window(),
            sliding_window::SlidingWindowState::default()
        );
        assert!(gcra.sliding_log().entries.is_empty());
        assert_eq!(State::Fresh.gcra(), gcra::GcraState::default());
    }
}
