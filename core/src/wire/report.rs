//! `POST /v1/report`: counts only the filter knows (requests it decided without asking the
//! backend), per action, so the backend's metrics, history and dashboard see every request Envoy
//! metered, not only the ones that reached it.
//!
//! The filter keeps counters per action in each Envoy worker's own memory (no shared data), and
//! each worker sends what accumulated since its last accepted report from a timer (never per key:
//! the table is bounded by [`MAX_REPORT_ACTIONS`]). A report that fails is kept and added to the
//! next one, so counts are lost only when the filter's table is full (actions beyond the bound) or
//! Envoy restarts.

use serde::{Deserialize, Serialize};

use crate::field_error::FieldError;
use crate::limits::MAX_REPORT_ACTIONS;
use crate::rule::Action;

/// `POST /v1/report` request. The answer is 204 with no body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FilterReport {
    /// One entry per action with anything to report (at most 256).
    pub actions: Vec<ActionCounts>,
}

/// What one filter decided for one action since its last report, without the backend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ActionCounts {
    /// The action: 1–64 of `[A-Za-z0-9_.:-]`.
    pub action: String,
    /// Admitted from a lease (units the backend debited in advance), with no callout.
    #[serde(default)]
    pub leased: u64,
    /// Denied from the filter's denial cache, with no callout.
    #[serde(default)]
    pub cached_denied: u64,
    /// Callouts that timed out (Envoy answered 504 for the backend).
    #[serde(default)]
    pub failed_timeout: u64,
    /// Callouts that failed otherwise: refused, another non-200 status, or an unreadable answer.
    #[serde(default)]
    pub failed_error: u64,
    /// Of the failed callouts, those the failure mode let through unchecked (the rest were
    /// denied).
    #[serde(default)]
    pub passed_unchecked: u64,
}

impl FilterReport {
    /// Checks every action name and the entry bound, naming the field at fault
    /// (`actions[3].action`).
    pub fn validate(&self) -> Result<Vec<(Action, &ActionCounts)>, FieldError> {
        if self.actions.len() > MAX_REPORT_ACTIONS {
            return Err(FieldError::new(
                "actions",
                format!(
                    "at most {MAX_REPORT_ACTIONS} entries; got {}",
                    self.actions.len()
                ),
            ));
        }
        self.actions
            .iter()
            .enumerate()
            .map(|(i, counts)| {
                let action = Action::parse(&counts.action)
                    .map_err(|r| FieldError::new(format!("actions[{i}].action"), r))?;
                if counts.passed_unchecked
                    > counts.failed_timeout.saturating_add(counts.failed_error)
                {
                    return Err(FieldError::new(
                        format!("actions[{i}].passed_unchecked"),
                        "cannot exceed failed_timeout + failed_error",
                    ));
                }
                Ok((action, counts))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(action: &str) -> ActionCounts {
        ActionCounts {
            action: action.into(),
            ..ActionCounts::default()
        }
    }

    #[test]
    fn refusals_name_the_entry() {
        let report = FilterReport {
            actions: vec![counts("reply"), counts("bad action")],
        };
        assert_eq!(report.validate().unwrap_err().field, "actions[1].action");
        let mut over = counts("reply");
        over.failed_timeout = 1;
        over.passed_unchecked = 2;
        let report = FilterReport {
            actions: vec![over],
        };
        assert_eq!(
            report.validate().unwrap_err().field,
            "actions[0].passed_unchecked"
        );
        let report = FilterReport {
            actions: vec![counts("a"); MAX_REPORT_ACTIONS + 1],
        };
        assert_eq!(report.validate().unwrap_err().field, "actions");
    }

    #[test]
    fn a_valid_report_names_its_actions() {
        let report = FilterReport {
            actions: vec![counts("reply"), counts("login")],
        };
        let checked = report.validate().unwrap();
        assert_eq!(checked[1].0.as_str(), "login");
    }
}
