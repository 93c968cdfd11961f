//! `POST /v1/commit`: commits a reservation once the request's actual cost is known
//! ([`crate::commit`]). The caller reserved `reserved` units with an ordinary throttle call when
//! the request came in, and commits the `actual` cost when the response ends.

use serde::{Deserialize, Serialize};

use crate::commit::{check_id, Commit, Committed};
use crate::field_error::FieldError;
use crate::limits::MAX_QUANTITY;
use crate::rule::Action;
use crate::time::NANOS_PER_MILLI;

/// `POST /v1/commit` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// The action whose rule the reservation was taken under.
    #[cfg_attr(feature = "openapi", schema(example = "llm_tokens"))]
    pub action: String,
    /// The subject the reservation was taken for.
    #[cfg_attr(feature = "openapi", schema(example = "tenant-42"))]
    pub key: String,
    /// Units reserved when the request came in (at most 1000000000).
    #[cfg_attr(feature = "openapi", schema(maximum = 1_000_000_000))]
    pub reserved: u64,
    /// Units the request actually cost (at most 1000000000).
    #[cfg_attr(feature = "openapi", schema(maximum = 1_000_000_000))]
    pub actual: u64,
    /// The request's id (1–128 of `[A-Za-z0-9_.:-]`, e.g. Envoy's `x-request-id`): a commit with
    /// an id already committed for this action and key within the last hour changes nothing and
    /// answers the first commit's numbers.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "9f6c1c2e-5a7d-4d52-8f0b-3f3f0d1c2b4a")
    )]
    pub id: String,
    /// When the reservation was decided, in milliseconds since the Unix epoch: the time its
    /// throttle answer arrived (a caller cannot know the store's exact instant; the answer's
    /// arrival is at or just after it). What is given back depends on it (docs/algorithms.md,
    /// "Commit and refund"): units that have since leaked or expired are not given back again.
    /// A time after the store's now counts as now.
    pub reserved_at_ms: u64,
    /// As in `POST /v1/throttle`: how long the caller waits for this answer (1 to 60000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 60_000))]
    pub timeout_ms: Option<u64>,
    /// As in `POST /v1/throttle`: when the caller sent the request (ms since the epoch, its own
    /// clock), read only after the backend's process stood still.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at_ms: Option<u64>,
}

impl CommitRequest {
    /// Checks the action, the quantities, the id and the timeout, naming the field at fault.
    pub fn validate(&self) -> Result<Action, FieldError> {
        let action = Action::parse(&self.action).map_err(|r| FieldError::new("action", r))?;
        for (field, value) in [("reserved", self.reserved), ("actual", self.actual)] {
            if value > MAX_QUANTITY {
                return Err(FieldError::new(
                    field,
                    format!("must be at most {MAX_QUANTITY}; got {value}"),
                ));
            }
        }
        check_id(&self.id).map_err(|r| FieldError::new("id", r))?;
        super::decision::check_timeout_ms(self.timeout_ms)?;
        Ok(action)
    }

    /// The commit, with `reserved_at` in nanoseconds: the end of its millisecond, so that a
    /// sliding log finds the reservation's own entries (stamped within that millisecond or
    /// before it).
    pub fn commit(&self) -> Commit {
        Commit {
            reserved: self.reserved,
            actual: self.actual,
            reserved_at: self
                .reserved_at_ms
                .saturating_mul(NANOS_PER_MILLI)
                .saturating_add(NANOS_PER_MILLI - 1),
        }
    }
}

/// `POST /v1/commit` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CommitResponse {
    /// Units given back: at most reserved − actual, less when some had leaked or expired since
    /// the reservation.
    pub refunded: u64,
    /// Units debited beyond the reservation (actual − reserved, or 0); never denied.
    pub debited: u64,
    /// The part of `debited` that did not fit in the limit: admitted over the budget.
    pub overshoot: u64,
    /// The key's level after the commit, in units.
    pub level: f64,
    /// Units of quantity 1 that could pass now (capacity − level, rounded down, at least 0).
    pub remaining: u64,
    /// True when this id was already committed: nothing changed, and the numbers are the first
    /// commit's (the level is today's).
    pub duplicate: bool,
}

impl CommitResponse {
    /// The response for what a store did under a rule of `capacity`.
    pub fn new(capacity: u64, committed: &Committed, duplicate: bool) -> CommitResponse {
        let left = capacity as f64 - committed.level;
        CommitResponse {
            refunded: committed.refunded,
            debited: committed.debited,
            overshoot: committed.overshoot,
            level: committed.level,
            remaining: if left > 0.0 { left.floor() as u64 } else { 0 },
            duplicate,
        }
    }
}
