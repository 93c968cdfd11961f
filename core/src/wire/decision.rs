//! The decision listener's bodies: `POST /v1/throttle` (what the filter calls) and
//! `POST /v1/cl.throttle` (redis-cell compatibility).

use serde::{Deserialize, Serialize};

use crate::commit::check_id;
use crate::decision::Decision;
use crate::field_error::FieldError;
use crate::lease::LeaseGrant;
use crate::limits::{MAX_DECISION_TIMEOUT_MS, MAX_QUANTITY};
use crate::rule::{Action, Algorithm, Mode};
use crate::time::ceil_millis;

fn one() -> u64 {
    1
}

/// `POST /v1/throttle` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ThrottleRequest {
    /// The action whose rule applies: 1–64 of `[A-Za-z0-9_.:-]`.
    #[cfg_attr(feature = "openapi", schema(example = "reply"))]
    pub action: String,
    /// The subject (user, IP, …). Any string, including empty; long ones are stored by digest.
    #[cfg_attr(feature = "openapi", schema(example = "laoqian"))]
    pub key: String,
    /// Units this request costs (default 1, at most 1000000000); 0 peeks without changing state.
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(default = 1, maximum = 1_000_000_000))]
    pub quantity: u64,
    /// The caller can hold a lease (the sluice filter): if the rule enables leasing and the
    /// request is allowed, the answer may carry a [`LeaseGrant`]. Other callers leave it false,
    /// so no units are debited for a lease nobody spends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lease: bool,
    /// How long the caller waits for this answer, in milliseconds counted from when it sent the
    /// request (1 to 60000; the filter sends its `backend.timeout_ms`). The backend starts no
    /// store step whose answer cannot arrive within it and answers 503 `deadline_exceeded`
    /// instead, having debited nothing. Absent: the backend's own store deadline applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 60_000))]
    pub timeout_ms: Option<u64>,
    /// When the caller sent the request, in milliseconds since the Unix epoch by its own clock
    /// (the filter sends it). The backend reads it only for requests it reads right after its
    /// own process stood still (SIGSTOP, a VM pause), to count their `timeout_ms` from when they
    /// were sent rather than from when it could read them; clock offsets are learned, not
    /// assumed (docs/failure-modes.md, "One deadline").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at_ms: Option<u64>,
    /// The caller's id for this decision (the filter draws one per request, unique per worker).
    /// A caller that gives up on the request (its timeout passed first) names it in its next
    /// count report (`FilterReport::gave_up`), and a decision the backend made for it is then
    /// withdrawn from the history: the caller did not act on it (docs/failure-modes.md, "One
    /// deadline").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<u64>,
    /// This request reserves its `quantity` for a cost that is committed later under this id
    /// (the `id` of its `POST /v1/commit`; 1–128 of `[A-Za-z0-9_.:-]`). Allowed, the reservation
    /// counts as in flight for the key until that commit arrives, or 10 minutes
    /// (`GET /v1/keys`' `budget`). Never with `lease`: a leased admission has no reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(example = "r-7f3a9c-12"))]
    pub reservation_id: Option<String>,
}

impl ThrottleRequest {
    /// Checks the action name and the quantity bound, naming the field at fault.
    pub fn validate(&self) -> Result<Action, FieldError> {
        let action = Action::parse(&self.action).map_err(|r| FieldError::new("action", r))?;
        if self.quantity > MAX_QUANTITY {
            return Err(FieldError::new(
                "quantity",
                format!("must be at most {MAX_QUANTITY}; got {}", self.quantity),
            ));
        }
        check_timeout_ms(self.timeout_ms)?;
        if let Some(id) = &self.reservation_id {
            check_id(id).map_err(|r| FieldError::new("reservation_id", r))?;
            if self.lease {
                return Err(FieldError::new(
                    "reservation_id",
                    "a reservation is never leased: send lease false (or leave it out)",
                ));
            }
        }
        Ok(action)
    }
}

/// Checks a decision request's `timeout_ms` (absent is fine), naming the field.
pub(crate) fn check_timeout_ms(timeout_ms: Option<u64>) -> Result<(), FieldError> {
    match timeout_ms {
        Some(ms) if !(1..=MAX_DECISION_TIMEOUT_MS).contains(&ms) => Err(FieldError::new(
            "timeout_ms",
            format!("must be 1 to {MAX_DECISION_TIMEOUT_MS} milliseconds; got {ms}"),
        )),
        _ => Ok(()),
    }
}

/// `POST /v1/throttle` response. The caller knows the action and key it asked about, so they are
/// not echoed; `capacity` is the quota the limit headers report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThrottleResponse {
    /// Whether the request may pass: false only for a denial under an enforced rule.
    pub allowed: bool,
    /// The rule's algorithm.
    pub algorithm: Algorithm,
    /// The rule's mode.
    pub mode: Mode,
    /// Requests that may pass back to back from idle: the quota of the limit headers.
    pub capacity: u64,
    /// Requests of quantity 1 that could pass right now.
    pub remaining: u64,
    /// After a denial, milliseconds until the same request would pass (rounded up); null when
    /// allowed or when the request can never pass.
    pub retry_after_ms: Option<u64>,
    /// Milliseconds until the key is idle again (rounded up).
    pub reset_after_ms: u64,
    /// Funnel level in requests.
    pub level: f64,
    /// Milliseconds the quota policy spans (the window, or a full funnel's drain time): the `w`
    /// of the `RateLimit-Policy` header.
    #[serde(default)]
    pub window_ms: u64,
    /// In shadow mode: whether the rule would have denied this request.
    #[serde(default)]
    pub would_deny: bool,
    /// Units debited in advance for a caller that asked for a lease, already excluded from
    /// `remaining`; absent when none were granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseGrant>,
}

impl ThrottleResponse {
    /// Builds the response for a decision under a rule's algorithm, mode and policy window.
    pub fn new(
        algorithm: Algorithm,
        mode: Mode,
        window_ns: u64,
        decision: &Decision,
    ) -> ThrottleResponse {
        let denied = !decision.allowed;
        ThrottleResponse {
            allowed: !(denied && mode == Mode::Enforce),
            algorithm,
            mode,
            capacity: decision.capacity,
            remaining: decision.remaining,
            retry_after_ms: if denied {
                decision.retry_after.map(ceil_millis)
            } else {
                None
            },
            reset_after_ms: ceil_millis(decision.reset_after),
            level: decision.level,
            window_ms: ceil_millis(window_ns),
            would_deny: denied && mode == Mode::Shadow,
            lease: None,
        }
    }
}

/// `POST /v1/cl.throttle` request: redis-cell's `CL.THROTTLE key max_burst count period
/// [quantity]` by name. The answer is redis-cell's 5-tuple `[limited, limit, remaining,
/// retry_after_s, reset_after_s]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClThrottleRequest {
    /// The key.
    pub key: String,
    /// Burst beyond the first request (capacity − 1).
    pub max_burst: u64,
    /// Requests per period.
    pub count: u64,
    /// Period in whole seconds.
    pub period: u64,
    /// Units asked for (default 1).
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(default = 1))]
    pub quantity: u64,
}
