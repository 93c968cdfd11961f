//! Time as integer nanoseconds since the Unix epoch.
//!
//! Integer nanoseconds keep every algorithm exact (no float drift in stored state) and match
//! redis-cell, which does its GCRA maths in nanoseconds.

/// Nanoseconds since the Unix epoch (or any fixed origin, in tests).
pub type Nanos = u64;

/// Nanoseconds in one microsecond.
pub const NANOS_PER_MICRO: u64 = 1_000;
/// Nanoseconds in one millisecond.
pub const NANOS_PER_MILLI: u64 = 1_000_000;
/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;
/// Milliseconds in one second (the wire speaks milliseconds, the headers whole seconds).
pub const MILLIS_PER_SEC: u64 = 1_000;

/// Whole milliseconds, rounded up, so that waiting that long is always enough.
pub fn ceil_millis(ns: u64) -> u64 {
    ns.div_ceil(NANOS_PER_MILLI)
}

/// Whole seconds, rounded up (what `Retry-After` and the rate-limit headers carry).
pub fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(NANOS_PER_SEC)
}

/// redis-cell's rounding for the seconds in its 5-tuple: whole seconds, plus one when at least one
/// whole millisecond is left over (a remainder under 1 ms is dropped).
pub fn cell_secs(ns: u64) -> u64 {
    let ms = ns / NANOS_PER_MILLI;
    ms / 1000 + u64::from(!ms.is_multiple_of(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_secs_drops_a_remainder_under_one_millisecond() {
        assert_eq!(cell_secs(2 * NANOS_PER_SEC), 2);
        assert_eq!(cell_secs(2 * NANOS_PER_SEC + 999_999), 2);
        assert_eq!(cell_secs(2 * NANOS_PER_SEC + 1_000_000), 3);
        assert_eq!(cell_secs(0), 0);
    }

    #[test]
    fn ceil_rounds_any_remainder_up() {
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(NANOS_PER_SEC), 1);
        assert_eq!(ceil_millis(1), 1);
        assert_eq!(ceil_millis(0), 0);
    }
}
