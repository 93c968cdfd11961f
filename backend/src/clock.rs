//! The wall clock, read in one place.
//!
//! sluice-core takes time as an argument and never reads a clock; the backend reads it here and
//! nowhere else, in the unit each caller needs, so every "now" in the process comes from the same
//! source and rounds the same way. A clock before 1970 reads as 0 and one past the year 2554
//! saturates, instead of failing a request. Elapsed time (timeouts, rates) uses
//! [`std::time::Instant`], which is monotonic; this module is only for times that leave the
//! process (stored activity, session expiry, decision times on the memory store), and for the
//! one way the background loops tick ([`ticker`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_core::Nanos;

/// Time since the Unix epoch by the system clock (zero if the clock is set before 1970).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// Nanoseconds since the Unix epoch: the decision time of the memory store (Redis uses its own
/// `TIME`).
pub fn now_ns() -> Nanos {
    u64::try_from(since_epoch().as_nanos()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch: when a key was last seen, when levels were read.
pub fn now_ms() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// Whole seconds since the Unix epoch: session expiry.
pub fn now_secs() -> u64 {
    since_epoch().as_secs()
}

/// The ticker of a background loop (flushes, polls, heartbeats): its first tick at once, then one
/// every `every`; a tick missed under load is delayed rather than fired in a burst
/// ([`tokio::time::MissedTickBehavior::Delay`]). Elapsed time, not the wall clock.
pub fn ticker(every: Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_units_agree_with_each_other() {
        let (s, ms, ns) = (now_secs(), now_ms(), now_ns());
        // Read in that order, each later reading is at least the earlier one in its own unit.
        assert!(ms / 1000 >= s, "{ms} ms vs {s} s");
        assert!(ns / 1_000_000 >= ms, "{ns} ns vs {ms} ms");
        // And not absurdly far apart (the three reads take microseconds).
        assert!(ns / 1_000_000_000 - s < 5);
        // After 2020-01-01: the clock is really read, not a zero.
        assert!(s > 1_577_836_800);
    }

    #[tokio::test]
    async fn a_ticker_ticks_every_period_and_delays_a_missed_tick() {
        let ticker = ticker(Duration::from_millis(250));
        assert_eq!(ticker.period(), Duration::from_millis(250));
        assert_eq!(
            ticker.missed_tick_behavior(),
            tokio::time::MissedTickBehavior::Delay
        );
    }
}
