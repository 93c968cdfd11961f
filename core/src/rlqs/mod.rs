//! Envoy's Rate Limit Quota Service (RLQS, `envoy.service.rate_limit_quota.v3`), the pure part:
//! how a stock Envoy's quota filter bucket maps to a sluice check ([`mapping`]), and which token
//! bucket Envoy is told to enforce for a rule, split among the Envoys holding one key ([`shape`]).
//! The backend's `rlqs` module pays for those shares from the store (docs/rlqs.md).
//!
//! Envoy 1.40's quirks these bounds follow (measured, docs/rlqs-design.md): `fill_interval` and
//! the assignment TTL are read as whole seconds (a TTL under 1 s expires at once, a sub-second
//! fill interval never empties), `tokens_per_fill` unset means no refill, reports come every
//! 5 s whatever `reporting_interval` says.

pub mod mapping;
pub mod mapping_rules;
pub mod rebalance;
pub mod report;
pub mod shape;

/// Seconds between two usage reports of Envoy 1.40's quota filter, whatever its
/// `reporting_interval` says (a hard-coded 5 s timer).
pub const ENVOY_REPORT_INTERVAL_S: u64 = 5;

/// Shortest assignment TTL sluice sends: one report interval and a second of slack, so a
/// renewal (sent on each report) always lands before the assignment expires.
pub const MIN_TTL_S: u64 = ENVOY_REPORT_INTERVAL_S + 1;

/// Longest assignment TTL: a disconnected Envoy keeps enforcing its share this long, and the
/// server keeps paying for it, so a long TTL costs capacity after an Envoy leaves.
pub const MAX_TTL_S: u64 = 300;

/// The default assignment TTL: two report intervals and two seconds, so one lost report does
/// not expire a bucket.
pub const DEFAULT_TTL_S: u64 = 2 * ENVOY_REPORT_INTERVAL_S + 2;
const _: () = assert!(DEFAULT_TTL_S > 2 * ENVOY_REPORT_INTERVAL_S && DEFAULT_TTL_S <= MAX_TTL_S);

/// The server's payment tick in milliseconds: every tick it pays the refill its live shares
/// earned since the last one (`Δ` of the bound in docs/rlqs.md).
pub const TICK_MS: u64 = 1_000;

/// A bucket whose reports show no request this many times in a row (15 s at Envoy's interval)
/// is abandoned: Envoy forgets it, and its share goes back to the key's other holders.
pub const ABANDON_AFTER_IDLE_REPORTS: u32 = 3;

/// Default bound on the buckets one stream may hold: one Envoy's users (or client addresses)
/// over a few report intervals. A bucket past it gets no assignment at all, so Envoy applies its
/// listener's own `no_assignment_behavior` (not `DENY_ALL` on a listener that chose `ALLOW_ALL`);
/// the bound is what keeps a spray of client ids from growing the server's memory
/// (docs/rlqs.md: the bytes one bucket costs, measured).
pub const DEFAULT_MAX_BUCKETS_PER_STREAM: usize = 100_000;

/// Most buckets `--rlqs-max-buckets` may allow one stream: each costs the ledger a share record.
pub const MAX_BUCKETS_PER_STREAM_LIMIT: usize = 1_000_000;

/// Checks a per-stream bucket bound against 1..=[`MAX_BUCKETS_PER_STREAM_LIMIT`].
pub fn validate_max_buckets(n: usize) -> Result<usize, crate::FieldError> {
    if (1..=MAX_BUCKETS_PER_STREAM_LIMIT).contains(&n) {
        Ok(n)
    } else {
        Err(crate::FieldError::new(
            "rlqs.max_buckets",
            format!("must be 1 to {MAX_BUCKETS_PER_STREAM_LIMIT}; got {n}"),
        ))
    }
}

/// Checks an assignment TTL in whole seconds against [`MIN_TTL_S`]..=[`MAX_TTL_S`].
pub fn validate_ttl_s(ttl_s: u64) -> Result<u64, crate::FieldError> {
    if (MIN_TTL_S..=MAX_TTL_S).contains(&ttl_s) {
        Ok(ttl_s)
    } else {
        Err(crate::FieldError::new(
            "rlqs.ttl",
            format!("must be {MIN_TTL_S} to {MAX_TTL_S} whole seconds; got {ttl_s}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_outlives_one_report_and_the_default_two() {
        assert!(validate_ttl_s(MIN_TTL_S - 1).is_err());
        assert_eq!(validate_ttl_s(MIN_TTL_S), Ok(MIN_TTL_S));
        assert!(validate_ttl_s(MAX_TTL_S + 1).is_err());
        assert_eq!(validate_ttl_s(DEFAULT_TTL_S), Ok(12));
    }

    #[test]
    fn the_bucket_bound_is_at_least_one_and_bounded() {
        assert!(validate_max_buckets(0).is_err());
        assert_eq!(validate_max_buckets(1), Ok(1));
        assert_eq!(
            validate_max_buckets(DEFAULT_MAX_BUCKETS_PER_STREAM),
            Ok(100_000)
        );
        assert!(validate_max_buckets(MAX_BUCKETS_PER_STREAM_LIMIT + 1).is_err());
    }
}
