//! At most one log line per key per period, counting what it did not log.
//!
//! A failure that repeats on every request (Redis down, a filter pointed at the wrong listener)
//! would otherwise write one line per request: thousands a second, drowning everything else and
//! costing more than the failure. Here the first occurrence is logged at once (so the cause is
//! visible within a second), later ones within the period are only counted, and the next line
//! says how many there were since the previous one. Nothing is logged while nothing happens: the
//! count of a burst that ends inside the period is reported with the next occurrence.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The period of every rate-limited log line in sluice: one line per key per 10 s.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// One key's state: when its last line was written and what happened since.
#[derive(Debug, Clone, Copy)]
struct Slot {
    last_line: Instant,
    since: u64,
}

/// Per-key rate limit of log lines (keys are a small closed set: error codes, listener names).
#[derive(Debug)]
pub struct LogLimit {
    every: Duration,
    slots: Mutex<HashMap<&'static str, Slot>>,
}

impl LogLimit {
    /// At most one line per key per `every`.
    pub fn new(every: Duration) -> LogLimit {
        LogLimit {
            every,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Records one occurrence of `key` now; see [`LogLimit::admit_at`].
    pub fn admit(&self, key: &'static str) -> Option<u64> {
        self.admit_at(key, Instant::now())
    }

    /// Records one occurrence of `key` at `now`. `Some(n)`: log a line now, for `n` occurrences
    /// (this one and those not logged since the previous line); `None`: stay quiet.
    pub fn admit_at(&self, key: &'static str, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked while counting; the counts are
        // still usable.
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        match slots.get_mut(key) {
            None => {
                slots.insert(
                    key,
                    Slot {
                        last_line: now,
                        since: 0,
                    },
                );
                Some(1)
            }
            Some(slot) => {
                slot.since = slot.since.saturating_add(1);
                if now.saturating_duration_since(slot.last_line) >= self.every {
                    let n = slot.since;
                    *slot = Slot {
                        last_line: now,
                        since: 0,
                    };
                    Some(n)
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_is_logged_then_one_line_per_period_with_the_count() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(limit.admit_at("a", at(0)), Some(1));
        for ms in [1, 500, 9_000, 9_999] {
            assert_eq!(limit.admit_at("a", at(ms)), None, "{ms} ms");
        }
        assert_eq!(
            limit.admit_at("a", at(10_000)),
            Some(5),
            "four counted + this one"
        );
        assert_eq!(limit.admit_at("a", at(10_001)), None);
        assert_eq!(limit.admit_at("a", at(60_000)), Some(2));
    }

    #[test]
    fn keys_are_limited_apart() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.admit_at("a", t0), Some(1));
        assert_eq!(limit.admit_at("b", t0), Some(1));
        assert_eq!(limit.admit_at("a", t0), None);
        assert_eq!(limit.admit_at("b", t0), None);
    }

    #[test]
    fn a_clock_going_backwards_stays_quiet() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now() + Duration::from_secs(60);
        assert_eq!(limit.admit_at("a", t0), Some(1));
        assert_eq!(limit.admit_at("a", t0 - Duration::from_secs(30)), None);
    }
}
