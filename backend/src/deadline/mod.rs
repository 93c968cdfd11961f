//! One deadline per decision: the caller says how long it waits (`timeout_ms` in a decision
//! request, `grpc-timeout` on an RLS call), and the backend starts no store step whose answer
//! cannot arrive in time, bounds the wait by what is left, and accounts for a step that finished
//! after its caller gave up (a late debit). docs/failure-modes.md, "One deadline", has the
//! numbers and the window that remains.
//!
//! - [`Deadline`]: when the answer must leave this process (pure: times are passed in).
//! - [`latency::LatencyEstimate`]: the store's recent latency, lock-free.
//! - [`crate::decide::call::run`] (above the shared state) runs one decision's store step under
//!   a deadline.
//! - [`late`]: what a late step left behind, counted and logged.
//! - [`stall::arrival`]: a request read right after this process stood still counts from when
//!   its sender sent it.

pub mod error;
pub mod late;
pub mod latency;
pub mod stall;

use std::time::{Duration, Instant};

use sluice_core::limits::DEFAULT_DECISION_TIMEOUT_MS;

pub use error::{DecideError, Miss};

/// `--redis-timeout-ms` by default: 4 x the filter's default wait
/// ([`DEFAULT_DECISION_TIMEOUT_MS`], 25 ms), so 100 ms. A decision whose caller sends a deadline
/// is bounded by that deadline, not by this; this bounds callers that send none (tools, RLS
/// without `grpc-timeout`), and it is long enough that a store step started within a filter's
/// budget but answered late still ends with a known answer (debited or not: counted exactly as
/// a late debit) rather than a timeout whose effect is unknown.
pub const DEFAULT_REDIS_TIMEOUT_MS: u64 = 4 * DEFAULT_DECISION_TIMEOUT_MS;

/// The least store deadline on Redis: 8 x the filter's default wait (200 ms).
pub const MIN_STORE_DEADLINE: Duration = Duration::from_millis(8 * DEFAULT_DECISION_TIMEOUT_MS);

/// The store deadline (the bound on one store step from a handler, also on a late step left to
/// finish) for a Redis command timeout: 4 x it (one step may be several commands: a NOSCRIPT
/// reload is three, an all-or-nothing request on a Cluster two to four round trips), at least
/// [`MIN_STORE_DEADLINE`]. By default 400 ms.
pub fn store_deadline(redis_timeout: Duration) -> Duration {
    redis_timeout.saturating_mul(4).max(MIN_STORE_DEADLINE)
}

/// Time kept for the answer's way back to the caller (and the request's way here, which the
/// caller's clock counted before this process saw the request): serialising it, the HTTP/2 or
/// HTTP/1 write, Envoy handing it to the filter on its worker. Well under 1 ms each way on one
/// host or within a datacenter; 2 ms keeps 23 of the filter's default 25 ms for the store.
pub const RETURN_MARGIN: Duration = Duration::from_millis(2);

/// The margin kept out of a `timeout`: [`RETURN_MARGIN`], but never more than a fifth of it, so a
/// caller that waits only a few milliseconds still leaves the store most of them.
pub fn margin(timeout: Duration) -> Duration {
    RETURN_MARGIN.min(timeout / 5)
}

/// When a decision request arrived, set by a transport that queues requests before the decision
/// router runs them (the exchange stream stamps each message as it reads it), so that the
/// caller's deadline counts from the arrival, not from when the handler started. Absent (HTTP):
/// the handler's start is the arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival(pub Instant);

/// When a decision's answer must leave this process for its caller to act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    /// When its caller stops waiting (`arrived + timeout`: the margin's end).
    gives_up: Instant,
}

/// Whether a store step may start under a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Start it, and wait for it at most this long.
    Start(Duration),
    /// Do not start it: the time left is below what the store has recently taken.
    Refuse {
        /// Time left until the deadline.
        remaining: Duration,
        /// The store's recent latency.
        estimate: Duration,
    },
}

impl Deadline {
    /// The deadline of a request that arrived at `arrived` from a caller waiting `timeout`:
    /// `arrived + timeout - margin(timeout)`.
    pub fn new(arrived: Instant, timeout: Duration) -> Deadline {
        Deadline {
            at: arrived + timeout.saturating_sub(margin(timeout)),
            gives_up: arrived + timeout,
        }
    }

    /// The deadline for a request's `timeout_ms` (none when the caller sent none).
    pub fn from_ms(arrived: Instant, timeout_ms: Option<u64>) -> Option<Deadline> {
        timeout_ms.map(|ms| Deadline::new(arrived, Duration::from_millis(ms)))
    }

    /// Time left at `now` (zero once passed).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// Whether the caller has stopped waiting at `now`: past the deadline and its margin (the
    /// caller's timer started no later than the arrival), an answer can no longer be used.
    pub fn given_up(&self, now: Instant) -> bool {
        now >= self.gives_up
    }

    /// Whether a store step whose recent latency is `estimate` may start at `now`: only if its
    /// answer can be expected before the deadline (the time left is at least the estimate, and
    /// not zero).
    pub fn admit(&self, now: Instant, estimate: Duration) -> Admission {
        let remaining = self.remaining(now);
        if remaining.is_zero() || remaining < estimate {
            Admission::Refuse {
                remaining,
                estimate,
            }
        } else {
            Admission::Start(remaining)
        }
    }
}

/// `grpc-timeout` (gRPC over HTTP/2: 1 to 8 digits and a unit, `H M S m u n`), as Envoy's
/// ratelimit filter sends it when its `timeout` is set. A value that does not parse is ignored
/// (the store deadline applies), as gRPC servers do.
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = value.get(..value.len() - unit.len_utf8())?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n.saturating_mul(3600)),
        'M' => Duration::from_secs(n.saturating_mul(60)),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_deadline_keeps_the_return_margin() {
        let t0 = Instant::now();
        let d = Deadline::new(t0, 25 * MS);
        assert_eq!(d.remaining(t0), 23 * MS);
        assert_eq!(d.remaining(t0 + 10 * MS), 13 * MS);
        assert_eq!(d.remaining(t0 + 23 * MS), Duration::ZERO);
        assert_eq!(d.remaining(t0 + 40 * MS), Duration::ZERO);
        // Within the margin the caller still waits; from its timeout on it does not.
        assert!(!d.given_up(t0 + 24 * MS));
        assert!(d.given_up(t0 + 25 * MS));
        // A short timeout keeps at most a fifth of itself.
        assert_eq!(margin(5 * MS), MS);
        assert_eq!(margin(MS), MS / 5);
        assert_eq!(Deadline::new(t0, 5 * MS).remaining(t0), 4 * MS);
        assert_eq!(margin(1000 * MS), RETURN_MARGIN);
        assert_eq!(Deadline::from_ms(t0, None), None);
        assert_eq!(Deadline::from_ms(t0, Some(25)), Some(d));
    }

    #[test]
    fn a_store_step_starts_only_if_its_answer_can_arrive_in_time() {
        let t0 = Instant::now();
        let d = Deadline::new(t0, 25 * MS);
        // Fresh store (no estimate yet): start, wait for the whole remaining budget.
        assert_eq!(d.admit(t0, Duration::ZERO), Admission::Start(23 * MS));
        // 10 ms in, 13 left: a 12 ms store starts (wait 13), a 14 ms one does not.
        assert_eq!(d.admit(t0 + 10 * MS, 12 * MS), Admission::Start(13 * MS));
        assert_eq!(d.admit(t0 + 10 * MS, 13 * MS), Admission::Start(13 * MS));
        assert_eq!(
            d.admit(t0 + 10 * MS, 14 * MS),
            Admission::Refuse {
                remaining: 13 * MS,
                estimate: 14 * MS
            }
        );
        // Redis 30-60 ms slow against the filter's 25 ms: refused at once.
        assert!(matches!(d.admit(t0, 45 * MS), Admission::Refuse { .. }));
        // Past the deadline nothing starts, however fast the store.
        assert!(matches!(
            d.admit(t0 + 23 * MS, Duration::ZERO),
            Admission::Refuse { .. }
        ));
    }

    #[test]
    fn defaults_derive_from_the_filters_wait() {
        assert_eq!(DEFAULT_DECISION_TIMEOUT_MS, 25);
        assert_eq!(DEFAULT_REDIS_TIMEOUT_MS, 100);
        assert_eq!(store_deadline(100 * MS), 400 * MS);
        assert_eq!(store_deadline(10 * MS), 200 * MS);
    }

    #[test]
    fn grpc_timeout_values() {
        assert_eq!(parse_grpc_timeout("20m"), Some(20 * MS));
        assert_eq!(parse_grpc_timeout("1S"), Some(1000 * MS));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("25000u"), Some(25 * MS));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [
            "",
            "m",
            "20",
            "123456789m",
            "20x",
            "-1m",
            "2 m",
            "２m",
            "20２",
            "é",
        ] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
