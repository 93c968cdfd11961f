//! The bounds every rule and request is validated against, in one place.
//!
//! They exist because the Redis twins of the algorithms run in Lua 5.1, whose numbers are IEEE
//! doubles: every integer the scripts handle must stay below 2^53 to stay exact. The bounds are
//! chosen so that the largest product any script forms (capacity × window in milliseconds, or a
//! GCRA tolerance in nanoseconds) fits.

/// Largest capacity for any algorithm.
pub const MAX_CAPACITY: u64 = 10_000_000;
/// Largest capacity for `sliding_log`, whose memory grows with it (one entry per request).
pub const MAX_SLIDING_LOG_CAPACITY: u64 = 10_000;
/// Shortest duration: one millisecond (durations are whole milliseconds).
pub const MIN_SPAN_MS: u64 = 1;
/// Longest window or period: seven days.
pub const MAX_SPAN_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// Largest `count` in a rate.
pub const MAX_RATE_COUNT: u64 = 1_000_000_000;
/// Longest burst a meter may hold (emission interval × capacity): 90 days in nanoseconds.
/// 90 days is 7.8e15 ns, below 2^53 ≈ 9.007e15.
pub const MAX_HORIZON_NS: u64 = 90 * 24 * 60 * 60 * 1_000_000_000;
/// Largest quantity one request may ask for.
pub const MAX_QUANTITY: u64 = 1_000_000_000;
/// Longest action name.
pub const MAX_ACTION_LEN: usize = 64;
/// Longest rule description, in bytes.
pub const MAX_DESCRIPTION_LEN: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_POW_53: u64 = 1 << 53;

    #[test]
    fn lua_products_stay_exact_in_doubles() {
        assert!(MAX_CAPACITY * MAX_SPAN_MS < TWO_POW_53);
        assert!(MAX_HORIZON_NS < TWO_POW_53);
        // A sliding log entry's age is at most one window, in nanoseconds.
        assert!(MAX_SPAN_MS * 1_000_000 < TWO_POW_53);
    }
}
