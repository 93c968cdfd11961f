//! The JSON bodies of the decision API, shared by the backend (server) and the filter (client).

use serde::{Deserialize, Serialize};

use crate::decision::Decision;
use crate::limits::MAX_QUANTITY;
use crate::rule::{Action, Algorithm, Mode, RuleError};
use crate::time::ceil_millis;

fn one() -> u64 {
    1
}

/// `POST /v1/throttle` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleRequest {
    /// The action whose rule applies.
    pub action: String,
    /// The subject (user, IP, …). Any string, including empty; long ones are stored by digest.
    pub key: String,
    /// Units this request costs; 0 peeks without changing state.
    #[serde(default = "one")]
    pub quantity: u64,
}

impl ThrottleRequest {
    /// Checks the action name and the quantity bound, naming the field at fault.
    pub fn validate(&self) -> Result<Action, RuleError> {
        let action = Action::parse(&self.action).map_err(|r| RuleError::new("action", r))?;
        if self.quantity > MAX_QUANTITY {
            return Err(RuleError::new(
                "quantity",
                format!("must be at most {MAX_QUANTITY}; got {}", self.quantity),
            ));
        }
        Ok(action)
    }
}

/// `POST /v1/throttle` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThrottleResponse {
    /// Whether the request may pass: false only for a denial under an enforced rule.
    pub allowed: bool,
    /// Echo of the action.
    pub action: String,
    /// Echo of the key.
    pub key: String,
    /// The rule's algorithm.
    pub algorithm: Algorithm,
    /// The rule's mode.
    pub mode: Mode,
    /// Capacity, as the limit headers report it.
    pub limit: u64,
    /// Requests of quantity 1 that could pass right now.
    pub remaining: u64,
    /// After a denial, milliseconds until the same request would pass (rounded up); else null.
    pub retry_after_ms: Option<u64>,
    /// Milliseconds until the key is idle again (rounded up).
    pub reset_after_ms: u64,
    /// Funnel level in requests.
    pub level: f64,
    /// Funnel size in requests.
    pub capacity: u64,
    /// Seconds the quota policy spans (for the `w` of the headers).
    #[serde(default)]
    pub window_ms: u64,
    /// In shadow mode: whether the rule would have denied this request.
    #[serde(default)]
    pub would_deny: bool,
}

impl ThrottleResponse {
    /// Builds the response for a decision under a rule's algorithm, mode and policy window.
    pub fn new(
        action: &str,
        key: &str,
        algorithm: Algorithm,
        mode: Mode,
        window_ns: u64,
        decision: &Decision,
    ) -> ThrottleResponse {
        let denied = !decision.allowed;
        ThrottleResponse {
            allowed: !(denied && mode == Mode::Enforce),
            action: action.to_owned(),
            key: key.to_owned(),
            algorithm,
            mode,
            limit: decision.capacity,
            remaining: decision.remaining,
            retry_after_ms: if denied {
                decision.retry_after.map(ceil_millis)
            } else {
                None
            },
            reset_after_ms: ceil_millis(decision.reset_after),
            level: decision.level,
            capacity: decision.capacity,
            window_ms: ceil_millis(window_ns),
            would_deny: denied && mode == Mode::Shadow,
        }
    }
}

/// `POST /v1/cl.throttle` request: redis-cell's arguments by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    pub quantity: u64,
}

/// Body of a 4xx/5xx from the backend: a stable code, the field at fault if any, and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// Stable machine-readable code: `invalid_request`, `unknown_action`, `unauthorized`, ...
    pub error: String,
    /// The field at fault, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What went wrong and how to fix it.
    pub message: String,
}
