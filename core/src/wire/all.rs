//! `POST /v1/throttle/all`: all-or-nothing checks (several limits on one request)
//! ([`crate::all`]). The single-check `POST /v1/throttle` is unchanged beside it.
//!
//! The request is allowed only if every check allows it; a denied request consumes nothing from
//! any of its limits. No leases: checks never carry `lease` (the field is refused).

use serde::{Deserialize, Serialize};

use super::decision::ThrottleResponse;
use crate::field_error::FieldError;
use crate::limits::{MAX_CHECKS, MAX_QUANTITY};
use crate::rule::Action;

fn one() -> u64 {
    1
}

/// One check of a [`ThrottleAllRequest`]: an action's rule applied to a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ThrottleCheck {
    /// The action whose rule applies: 1–64 of `[A-Za-z0-9_.:-]`.
    #[cfg_attr(feature = "openapi", schema(example = "reply"))]
    pub action: String,
    /// The subject (user, IP, …). Any string, including empty; long ones are stored by digest.
    #[cfg_attr(feature = "openapi", schema(example = "laoqian"))]
    pub key: String,
    /// Units this check costs (default 1, at most 1000000000); 0 peeks.
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(default = 1, maximum = 1_000_000_000))]
    pub quantity: u64,
}

/// `POST /v1/throttle/all` request: 1 to 8 checks decided together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ThrottleAllRequest {
    /// The checks, decided in this order (1 to 8).
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 8))]
    pub checks: Vec<ThrottleCheck>,
    /// How long the caller waits for this answer, in milliseconds: as
    /// [`super::ThrottleRequest::timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 60_000))]
    pub timeout_ms: Option<u64>,
    /// When the caller sent the request: as [`super::ThrottleRequest::sent_at_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at_ms: Option<u64>,
    /// The caller's id for this decision: as [`super::ThrottleRequest::decision_id`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<u64>,
}

impl ThrottleAllRequest {
    /// Checks the count, every action name and quantity, naming the field at fault
    /// (`checks`, `checks[2].action`, ...).
    pub fn validate(&self) -> Result<Vec<Action>, FieldError> {
        if self.checks.is_empty() || self.checks.len() > MAX_CHECKS {
            return Err(FieldError::new(
                "checks",
                format!(
                    "must hold 1 to {MAX_CHECKS} checks; got {}",
                    self.checks.len()
                ),
            ));
        }
        self.checks
            .iter()
            .enumerate()
            .map(|(i, check)| {
                let action = Action::parse(&check.action)
                    .map_err(|r| FieldError::new(format!("checks[{i}].action"), r))?;
                if check.quantity > MAX_QUANTITY {
                    return Err(FieldError::new(
                        format!("checks[{i}].quantity"),
                        format!("must be at most {MAX_QUANTITY}; got {}", check.quantity),
                    ));
                }
                Ok(action)
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(|actions| {
                super::decision::check_timeout_ms(self.timeout_ms)?;
                Ok(actions)
            })
    }
}

/// Which check denied an all-or-nothing request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeniedCheck {
    /// Its position in `checks` (from 0).
    pub index: usize,
    /// Its action.
    pub action: String,
}

/// `POST /v1/throttle/all` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThrottleAllResponse {
    /// Whether the request may pass: true only if every check allows it.
    pub allowed: bool,
    /// The first check an enforced rule denied (absent when allowed). Nothing was consumed from
    /// any check's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied: Option<DeniedCheck>,
    /// One answer per check, in order. After a denial, the denying check's answer is its denial
    /// and every other one a peek of its unchanged state (what it really has left).
    pub results: Vec<ThrottleResponse>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse::from_slice;

    fn parse(json: &str) -> Result<ThrottleAllRequest, FieldError> {
        from_slice::<ThrottleAllRequest>(json.as_bytes(), "body")
    }

    #[test]
    fn the_count_and_each_check_are_validated_by_name() {
        let none = parse(r#"{"checks": []}"#).unwrap();
        assert_eq!(none.validate().unwrap_err().field, "checks");
        let nine = format!(
            r#"{{"checks": [{}]}}"#,
            [r#"{"action":"a","key":"k"}"#; MAX_CHECKS + 1].join(",")
        );
        assert_eq!(
            parse(&nine).unwrap().validate().unwrap_err().field,
            "checks"
        );
        let bad =
            parse(r#"{"checks": [{"action":"a","key":"k"},{"action":"b c","key":"k"}]}"#).unwrap();
        assert_eq!(bad.validate().unwrap_err().field, "checks[1].action");
        let big = parse(r#"{"checks": [{"action":"a","key":"k","quantity":1000000001}]}"#).unwrap();
        assert_eq!(big.validate().unwrap_err().field, "checks[0].quantity");
        let ok =
            parse(r#"{"checks": [{"action":"a","key":"k"},{"action":"b","key":"","quantity":0}]}"#)
                .unwrap();
        assert_eq!(ok.validate().unwrap().len(), 2);
        assert_eq!(ok.checks[0].quantity, 1);
    }

    #[test]
    fn a_lease_or_an_unknown_field_is_refused_by_name() {
        let e = parse(r#"{"checks": [{"action":"a","key":"k","lease":true}]}"#).unwrap_err();
        assert!(e.field.contains("lease"), "{e:?}");
        assert!(parse(r#"{"checks": [], "x": 1}"#).is_err());
        assert_eq!(parse(r#"{}"#).unwrap_err().field, "checks");
    }
}
