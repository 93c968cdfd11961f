//! Rules: what an action may do, validated once so invalid values cannot exist afterwards.
//!
//! The JSON form is the same in the admin API, the rules file and the dashboard:
//! `{"action": "reply", "algorithm": "gcra", "capacity": 16, "rate": {"count": 30, "period": "60s"}}`.
//! Parsing goes through serde into [`crate::wire::RawRule`] and then `TryFrom` into [`Rule`]; every
//! refusal names the field and the reason, so the backend's 400s and the dashboard's inline
//! messages say the same thing.

use std::fmt;

use serde_json::Value;

use crate::calendar::Calendar;
use crate::duration::Span;
use crate::field_error::FieldError;
use crate::lease::Lease;
use crate::limits::{
    MAX_ACTION_LEN, MAX_CAPACITY, MAX_DESCRIPTION_LEN, MAX_HORIZON_NS, MAX_RATE_COUNT,
    MAX_SLIDING_LOG_CAPACITY, MAX_SPAN_MS,
};
use crate::params::Params;
use crate::wire::{parse, RawRule};

/// An action name: 1–64 characters of `[A-Za-z0-9_.:-]`, safe in Redis keys, URLs and headers.
///
/// ```
/// use sluice_core::Action;
///
/// let action = Action::parse("llm_tokens").unwrap();
/// assert_eq!(action.as_str(), "llm_tokens");
/// // A space would break the Redis keys and headers an action is written into.
/// assert_eq!(
///     Action::parse("llm tokens").unwrap_err().to_string(),
///     "may hold only letters, digits and _ . : - ; found ' '"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Action(String);

/// Why an action name was refused. Its text is the reason of the refusal that names the field
/// (`action: must be 1 to 64 characters long; got 0`), so it converts into the reason string
/// [`FieldError::new`] takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// Empty, or longer than [`MAX_ACTION_LEN`] bytes.
    #[error("must be 1 to {MAX_ACTION_LEN} characters long; got {0}")]
    Length(usize),
    /// A character outside `[A-Za-z0-9_.:-]`.
    #[error("may hold only letters, digits and _ . : - ; found {0:?}")]
    Character(char),
}

impl From<ActionError> for String {
    fn from(e: ActionError) -> String {
        e.to_string()
    }
}

impl Action {
    /// Validates an action name.
    pub fn parse(text: &str) -> Result<Action, ActionError> {
        if text.is_empty() || text.len() > MAX_ACTION_LEN {
            return Err(ActionError::Length(text.len()));
        }
        if let Some(bad) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
        {
            return Err(ActionError::Character(bad));
        }
        Ok(Action(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The six throttle algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Clock-aligned fixed windows: one counter per window.
    FixedWindow,
    /// Exact log of request times over the last window (capacity at most 10000).
    SlidingLog,
    /// Two clock-aligned counters, the previous one weighted by how much of it still overlaps.
    SlidingWindow,
    /// The funnel: a level that leaks continuously at the rate.
    LeakyBucket,
    /// Generic cell rate algorithm, redis-cell's `CL.THROTTLE`.
    Gcra,
    /// Tokens refilled continuously at the rate.
    TokenBucket,
}

impl Algorithm {
    /// Every algorithm, in documentation order.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::TokenBucket,
    ];

    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::TokenBucket => "token_bucket",
        }
    }

    /// Parses the JSON name.
    pub fn parse(text: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == text)
    }

    /// Whether the rule takes a `rate` (true) or a `window` (false).
    pub fn uses_rate(self) -> bool {
        matches!(
            self,
            Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether denials are enforced or only reported.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Deny requests over the limit.
    #[default]
    Enforce,
    /// Decide and report, never deny: for trying a rule on live traffic.
    Shadow,
}

impl Mode {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
}

/// `count` requests per `period`: the steady rate of a meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Requests per period, at least 1.
    #[cfg_attr(feature = "openapi", schema(example = 30, minimum = 1))]
    pub count: u64,
    /// A duration: `"500ms"`, `"60s"`, `"5m"`, `"1h"`, `"1d"` (1ms to 7d; up to 365d for a fixed_window window).
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "60s"))]
    pub period: Span,
}

impl Rate {
    /// The emission interval T = period / count in nanoseconds, truncated as redis-cell does.
    pub fn emission_interval_ns(self) -> u64 {
        self.period.nanos() / self.count
    }
}

/// The rate of a meter, or the window of a window algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// For gcra, leaky_bucket and token_bucket.
    Rate(Rate),
    /// For fixed_window, sliding_log and sliding_window.
    Window(Span),
    /// For fixed_window only: calendar-aligned windows (a day, week or month at an offset).
    Calendar(Calendar),
}

/// A validated rule. Built only by [`Rule::new`] or from a [`crate::wire::RawRule`], so every
/// field is in range and the limit kind matches the algorithm. Its JSON form is the `RawRule`'s.
///
/// ```
/// use sluice_core::{Algorithm, MeterParams, Params, Rule};
///
/// // 30 per minute, bursts of 16 (redis-cell's max_burst 15).
/// let rule = Rule::from_json_str(
///     r#"{"action": "reply", "algorithm": "gcra", "capacity": 16,
///         "rate": {"count": 30, "period": "60s"}}"#,
/// )
/// .unwrap();
/// assert_eq!((rule.action().as_str(), rule.algorithm()), ("reply", Algorithm::Gcra));
/// // In the units the maths uses: one request per 2 s, as an emission interval in ns.
/// assert_eq!(
///     rule.params(),
///     Params::Gcra(MeterParams { interval: 2_000_000_000, capacity: 16 })
/// );
///
/// // A refusal names the field and the reason, as the backend's 400 does.
/// let e = Rule::from_json_str(
///     r#"{"action": "reply", "algorithm": "gcra", "capacity": 16, "window": "60s"}"#,
/// )
/// .unwrap_err();
/// assert_eq!(e.to_string(), "window: gcra takes a rate, not a window");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "RawRule", into = "RawRule")]
pub struct Rule {
    action: Action,
    algorithm: Algorithm,
    capacity: u64,
    limit: Limit,
    mode: Mode,
    description: String,
    params: Params,
    lease: Option<Lease>,
}

impl Rule {
    /// Builds and validates a rule from its parts.
    pub fn new(
        action: &str,
        algorithm: Algorithm,
        capacity: u64,
        limit: Limit,
        mode: Mode,
        description: &str,
    ) -> Result<Rule, FieldError> {
        let action = Action::parse(action).map_err(|r| FieldError::new("action", r))?;
        validate_capacity(algorithm, capacity)?;
        if let Limit::Rate(rate) = limit {
            validate_rate(rate, capacity)?;
        }
        if let Limit::Window(w) = limit {
            validate_window(algorithm, w)?;
        }
        let params = Params::from_parts(algorithm, capacity, limit).ok_or_else(|| {
            if algorithm.uses_rate() {
                FieldError::new(
                    "rate",
                    format!("{algorithm} needs a rate ({{\"count\": N, \"period\": \"60s\"}}), not a window"),
                )
            } else if matches!(limit, Limit::Calendar(_)) {
                FieldError::new("calendar", format!("{algorithm} takes a window; only fixed_window takes a calendar"))
            } else {
                FieldError::new("window", format!("{algorithm} needs a window (like \"60s\"), not a rate"))
            }
        })?;
        if description.len() > MAX_DESCRIPTION_LEN {
            return Err(FieldError::new(
                "description",
                format!("must be at most {MAX_DESCRIPTION_LEN} bytes"),
            ));
        }
        Ok(Rule {
            action,
            algorithm,
            capacity,
            limit,
            mode,
            description: description.to_owned(),
            params,
            lease: None,
        })
    }

    /// The same rule with leasing set (validated) or off.
    pub fn with_lease(mut self, lease: Option<Lease>) -> Result<Rule, FieldError> {
        self.lease = lease.map(Lease::validate).transpose()?;
        Ok(self)
    }

    /// Parses and validates the JSON form, naming the field and the reason on refusal.
    pub fn from_json(value: &Value) -> Result<Rule, FieldError> {
        Rule::try_from(parse::from_value::<RawRule>(value, "rule")?)
    }

    /// Parses JSON text (see [`Rule::from_json`]).
    pub fn from_json_str(text: &str) -> Result<Rule, FieldError> {
        Rule::try_from(parse::from_slice::<RawRule>(text.as_bytes(), "rule")?)
    }

    /// The JSON form (the inverse of [`Rule::from_json`]).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(RawRule::from(self)).unwrap_or(Value::Null)
    }

    /// The action this rule governs.
    pub fn action(&self) -> &Action {
        &self.action
    }
    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// Requests that may pass back to back from idle.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// The rate or window.
    pub fn limit(&self) -> Limit {
        self.limit
    }
    /// Enforce or shadow.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// The algorithm's parameters in the units its maths uses.
    pub fn params(&self) -> Params {
        self.params
    }
    /// Free text for operators.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// Leasing, if the rule enables it (off by default: every request is decided exactly).
    pub fn lease(&self) -> Option<Lease> {
        self.lease
    }
}

fn validate_capacity(algorithm: Algorithm, capacity: u64) -> Result<(), FieldError> {
    let max = if algorithm == Algorithm::SlidingLog {
        MAX_SLIDING_LOG_CAPACITY
    } else {
        MAX_CAPACITY
    };
    if capacity == 0 {
        return Err(FieldError::new("capacity", "must be at least 1"));
    }
    if capacity > max {
        let why = if algorithm == Algorithm::SlidingLog {
            " (sliding_log keeps one entry per request; use sliding_window or gcra for more)"
        } else {
            ""
        };
        return Err(FieldError::new(
            "capacity",
            format!("must be at most {max} for {algorithm}{why}; got {capacity}"),
        ));
    }
    Ok(())
}

/// fixed_window takes windows up to 365 days; sliding_log and sliding_window up to 7 (their Lua
/// twins form capacity × window and ages in ns, crate::limits).
fn validate_window(algorithm: Algorithm, window: Span) -> Result<(), FieldError> {
    if algorithm != Algorithm::FixedWindow && window.millis() > MAX_SPAN_MS {
        return Err(FieldError::new(
            "window",
            format!("must be at most 7d for {algorithm} (only fixed_window takes up to 365d); got {window}"),
        ));
    }
    Ok(())
}

fn validate_rate(rate: Rate, capacity: u64) -> Result<(), FieldError> {
    if rate.period.millis() > MAX_SPAN_MS {
        return Err(FieldError::new(
            "rate.period",
            format!("must be at most 7d; got {}", rate.period),
        ));
    }
    if rate.count == 0 {
        return Err(FieldError::new("rate.count", "must be at least 1"));
    }
    if rate.count > MAX_RATE_COUNT {
        return Err(FieldError::new(
            "rate.count",
            format!("must be at most {MAX_RATE_COUNT}; got {}", rate.count),
        ));
    }
    if rate.emission_interval_ns() == 0 {
        return Err(FieldError::new(
            "rate.count",
            format!(
                "{} per {} is more than one per nanosecond; use a longer period",
                rate.count, rate.period
            ),
        ));
    }
    let horizon = u128::from(rate.emission_interval_ns()) * u128::from(capacity);
    if horizon > u128::from(MAX_HORIZON_NS) {
        return Err(FieldError::new(
            "capacity",
            format!(
                "a full bucket of {capacity} at {} per {} takes {} days to drain; at most 90 days is supported",
                rate.count,
                rate.period,
                horizon / 86_400_000_000_000
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_of(value: Value) -> String {
        match Rule::from_json(&value) {
            Err(e) => e.field,
            Ok(rule) => panic!("accepted {rule:?}"),
        }
    }

    #[test]
    fn parses_the_design_examples() {
        let reply = Rule::from_json(&json!({"action": "reply", "algorithm": "gcra", "capacity": 16,
            "rate": {"count": 30, "period": "60s"}, "mode": "enforce", "description": "replies per user"}))
        .unwrap();
        assert_eq!(reply.capacity(), 16);
        assert_eq!(
            reply.limit(),
            Limit::Rate(Rate {
                count: 30,
                period: Span::parse("60s").unwrap()
            })
        );
        let login = Rule::from_json(
            &json!({"action": "login", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}),
        )
        .unwrap();
        assert_eq!(login.mode(), Mode::Enforce);
        assert_eq!(login.description(), "");
    }

    #[test]
    fn refusals_name_the_field() {
        let base = || json!({"action": "a", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1s"}});
        let with = |k: &str, v: Value| {
            let mut b = base();
            b[k] = v;
            b
        };
        assert_eq!(field_of(with("action", json!(""))), "action");
        assert_eq!(field_of(with("action", json!("a b"))), "action");
        assert_eq!(field_of(with("action", json!("x".repeat(65)))), "action");
        assert_eq!(field_of(with("algorithm", json!("magic"))), "algorithm");
        assert_eq!(field_of(with("capacity", json!(0))), "capacity");
        assert_eq!(field_of(with("capacity", json!(-3))), "capacity");
        assert_eq!(field_of(with("capacity", json!(1.5))), "capacity");
        assert_eq!(field_of(with("capacity", json!("16"))), "capacity");
        assert_eq!(field_of(with("capacity", json!(1e30))), "capacity");
        assert_eq!(
            field_of(with("rate", json!({"count": 0, "period": "1s"}))),
            "rate.count"
        );
        assert_eq!(
            field_of(with("rate", json!({"count": 1, "period": "0s"}))),
            "rate.period"
        );
        assert_eq!(
            field_of(with("rate", json!({"count": 1, "period": "99999999h"}))),
            "rate.period"
        );
        assert_eq!(
            field_of(with("rate", json!({"count": 1, "period": "1s", "x": 1}))),
            "rate.x"
        );
        assert_eq!(field_of(with("window", json!("1s"))), "window");
        assert_eq!(field_of(with("mode", json!("loud"))), "mode");
        assert_eq!(field_of(with("surprise", json!(1))), "surprise");
        assert_eq!(
            field_of(json!({"action": "a", "algorithm": "fixed_window", "capacity": 1})),
            "window"
        );
        assert_eq!(
            field_of(
                json!({"action": "a", "algorithm": "sliding_log", "capacity": 10_001, "window": "1s"})
            ),
            "capacity"
        );
        assert_eq!(field_of(json!([1])), "rule");
    }

    #[test]
    fn a_burst_that_would_take_over_90_days_to_drain_is_refused() {
        let e = Rule::from_json(
            &json!({"action": "a", "algorithm": "gcra", "capacity": 10_000_000,
            "rate": {"count": 1, "period": "1h"}}),
        )
        .unwrap_err();
        assert_eq!(e.field, "capacity");
    }

    #[test]
    fn more_than_one_per_nanosecond_is_refused() {
        let e = Rule::from_json(&json!({"action": "a", "algorithm": "gcra", "capacity": 1,
            "rate": {"count": 1_000_000_000, "period": "1ms"}}))
        .unwrap_err();
        assert_eq!(e.field, "rate.count");
    }
}
