//! The time a store decides at, held by the store (as governor's rate limiters hold a `Clock`):
//! the system clock in production, a manual clock that tests set, so the decision methods take
//! no time argument and a test holds a store to fixed-time tables by setting its clock.
//!
//! The memory store reads its clock at every decision. The Redis store, by default, reads no
//! clock of the backend: every script takes Redis `TIME`, so replicas with skewed clocks agree;
//! given a clock ([`crate::store::redis::RedisStore::with_clock`]), it passes that time to the
//! scripts instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_core::Nanos;

/// Where a store reads "now".
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since the Unix epoch.
    fn now(&self) -> Nanos;
}

/// The system clock ([`crate::clock::now_ns`]): the memory store's clock in production.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Nanos {
        crate::clock::now_ns()
    }
}

/// A clock that reads what it was last set to: for tests that decide at fixed times. Shared
/// (an `Arc`) between the store that reads it and the test that sets it.
#[derive(Debug, Default)]
pub struct ManualClock {
    at: AtomicU64,
}

impl ManualClock {
    /// A clock reading `at`.
    pub fn new(at: Nanos) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            at: AtomicU64::new(at),
        })
    }

    /// Sets the time read from now on.
    pub fn set(&self, at: Nanos) {
        self.at.store(at, Ordering::SeqCst);
    }

    /// Moves the time on by `by` ns.
    pub fn advance(&self, by: Nanos) {
        self.at.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.at.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_reads_what_it_was_set_to() {
        let clock = ManualClock::new(5);
        assert_eq!(clock.now(), 5);
        clock.set(1_000);
        clock.advance(7);
        assert_eq!(clock.now(), 1_007);
    }
}
