//! Leases: quota debited from the global state in advance and spent inside one Envoy with no
//! callout, so a hot key stops costing a round trip per request.
//!
//! A rule opts in with `"lease": {"max": 64, "ttl": "1s"}`. When a caller that can hold a lease
//! (the sluice filter says so per request) is allowed, the backend debits, in the same atomic
//! step, up to `max` more units ([`grant_units`]), and the filter admits that many further
//! requests for the key locally until they are spent or `ttl` passes. Units are debited before
//! they are used, so no admission happens without a debit; what moves is *when* a debited unit is
//! spent (at most `ttl` later). docs/algorithms.md states the bound per algorithm.

use serde::{Deserialize, Serialize};

use crate::duration::Span;
use crate::field_error::FieldError;
use crate::limits::{MAX_LEASE_TTL_MS, MAX_LEASE_UNITS};

/// One grant never takes more than `1 / LEASE_SHARE_DIVISOR` of what the key has left after the
/// request itself (rounded down), so one Envoy cannot drain a bucket another Envoy also serves:
/// with two Envoys hammering one key, each grant leaves at least as much as it took.
pub const LEASE_SHARE_DIVISOR: u64 = 2;

/// A rule's lease setting, validated: `max` in 1..=[`MAX_LEASE_UNITS`], `ttl` at most
/// [`MAX_LEASE_TTL_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// Most units one grant may carry beyond the request that earned it.
    #[cfg_attr(
        feature = "openapi",
        schema(example = 64, minimum = 1, maximum = 100_000)
    )]
    pub max: u64,
    /// How long a grant may be spent: a duration like `"1s"` (1ms to 60s).
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "1s"))]
    pub ttl: Span,
}

impl Lease {
    /// Checks the bounds, naming the field at fault (`lease.max`, `lease.ttl`).
    pub fn validate(self) -> Result<Lease, FieldError> {
        if self.max == 0 || self.max > MAX_LEASE_UNITS {
            return Err(FieldError::new(
                "lease.max",
                format!("must be 1 to {MAX_LEASE_UNITS}; got {}", self.max),
            ));
        }
        if self.ttl.millis() > MAX_LEASE_TTL_MS {
            return Err(FieldError::new(
                "lease.ttl",
                format!(
                    "must be at most {}s; got {}",
                    MAX_LEASE_TTL_MS / 1000,
                    self.ttl
                ),
            ));
        }
        Ok(self)
    }
}

/// How many units to debit beyond an allowed request: the largest share of `remaining_after`
/// (what the key has left once the request itself is debited) that [`LEASE_SHARE_DIVISOR`]
/// allows, capped at `max`. The algorithm then debits `quantity + grant` in one step; for every
/// algorithm a debit of `remaining_after` more units is admissible by definition of `remaining`.
pub fn grant_units(max: u64, remaining_after: u64) -> u64 {
    max.min(remaining_after / LEASE_SHARE_DIVISOR)
}

/// What a lease-holding caller receives with an allowed answer: units it may admit itself, and
/// for how long. Absent when nothing was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseGrant {
    /// Units already debited for this key that the caller may admit without asking, at least 1.
    pub units: u64,
    /// Milliseconds the units may be spent for, from when the answer was made. For
    /// `fixed_window` it never reaches past the window's end, so a window's count stays exact.
    pub ttl_ms: u64,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A lease of `max` units for `ttl` (a duration like `"1s"`).
    pub(crate) fn lease(max: u64, ttl: &str) -> Lease {
        Lease {
            max,
            ttl: Span::parse(ttl).unwrap(),
        }
    }

    #[test]
    fn bounds_name_the_field() {
        assert_eq!(lease(0, "1s").validate().unwrap_err().field, "lease.max");
        assert_eq!(
            lease(MAX_LEASE_UNITS + 1, "1s")
                .validate()
                .unwrap_err()
                .field,
            "lease.max"
        );
        assert_eq!(lease(1, "61s").validate().unwrap_err().field, "lease.ttl");
        assert_eq!(lease(64, "1s").validate(), Ok(lease(64, "1s")));
        assert_eq!(
            lease(MAX_LEASE_UNITS, "60s").validate(),
            Ok(lease(MAX_LEASE_UNITS, "60s"))
        );
    }

    #[test]
    fn a_grant_takes_at_most_half_of_what_is_left_and_at_most_max() {
        assert_eq!(grant_units(64, 0), 0);
        assert_eq!(grant_units(64, 1), 0);
        assert_eq!(grant_units(64, 2), 1);
        assert_eq!(grant_units(64, 99), 49);
        assert_eq!(grant_units(64, 1000), 64);
        assert_eq!(grant_units(1, 1000), 1);
    }
}
