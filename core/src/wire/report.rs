//! `POST /v1/report`: counts only the filter knows (requests it decided without asking the
//! backend), per action, so the backend's metrics, history and dashboard see every request Envoy
//! metered, not only the ones that reached it.
//!
//! The filter keeps counters per action in each Envoy worker's own memory (no shared data), and
//! each worker sends what accumulated since its last accepted report from a timer (never per key:
//! the table is bounded by [`MAX_REPORT_ACTIONS`]). A report that fails is kept and added to the
//! next one, so counts are lost only when the filter's table is full (actions beyond the bound) or
//! Envoy restarts.
//!
//! # Exactly once
//!
//! A report whose answer was lost (a stalled backend, a timeout after the backend counted it) is
//! sent again. So that the copies count once, each report carries its sender's identity
//! (`reporter`: one per filter worker and VM, random) and a sequence number (`seq`): the filter
//! resends the *same* report (same `seq`, same counts) until one copy is accepted, and only then
//! sends `seq + 1`. The backend keeps, per (action, reporter), the highest `seq` applied, in the
//! store and in the same atomic step as the counts, and applies a report only when its `seq` is
//! higher: every copy after the first, on any replica, is answered 204 and counted nowhere.

use serde::{Deserialize, Serialize};

use crate::field_error::FieldError;
use crate::limits::{MAX_REPORT_ACTIONS, MAX_REPORT_GAVE_UP};
use crate::rule::Action;

/// `POST /v1/report` request. The answer is 204 with no body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FilterReport {
    /// One entry per action with anything to report (at most 256).
    pub actions: Vec<ActionCounts>,
    /// Who sent it: one id per filter worker and VM (1–64 of `[A-Za-z0-9_.:-]`). With `seq`, the
    /// report is applied at most once; without (older filters), every copy is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reporter: Option<String>,
    /// The reporter's sequence number for this report: a resent copy keeps it, the next report
    /// has a higher one. Required with `reporter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The `decision_id`s of decision requests this reporter gave up on since its last accepted
    /// report (their timeout passed first, or their callout failed, and the failure mode decided
    /// them; counted in `failed_*` above), oldest first, at most 1,024. A decision the backend
    /// made for one of them all the same (it answered after the caller stopped waiting: the
    /// edge of a stall of the backend) is withdrawn from the history, once, with this report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gave_up: Vec<u64>,
}

/// Longest reporter id.
pub const MAX_REPORTER_LEN: usize = 64;

/// A report's identity, checked: applied once per (action, reporter), in `seq` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportId<'a> {
    /// The reporter id.
    pub reporter: &'a str,
    /// Its sequence number.
    pub seq: u64,
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
        self.id()?;
        if self.gave_up.len() > MAX_REPORT_GAVE_UP {
            return Err(FieldError::new(
                "gave_up",
                format!(
                    "at most {MAX_REPORT_GAVE_UP} decision ids; got {}",
                    self.gave_up.len()
                ),
            ));
        }
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

    /// The report's identity, if it carries one; refuses a `reporter` without `seq` (or the
    /// reverse) and a reporter id that is empty, too long or holds other characters.
    pub fn id(&self) -> Result<Option<ReportId<'_>>, FieldError> {
        match (&self.reporter, self.seq) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(FieldError::new("seq", "required with reporter")),
            (None, Some(_)) => Err(FieldError::new("reporter", "required with seq")),
            (Some(reporter), Some(seq)) => {
                let ok = (1..=MAX_REPORTER_LEN).contains(&reporter.len())
                    && reporter
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
                if !ok {
                    return Err(FieldError::new(
                        "reporter",
                        format!("1-{MAX_REPORTER_LEN} of [A-Za-z0-9_.:-]"),
                    ));
                }
                Ok(Some(ReportId { reporter, seq }))
            }
        }
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
            ..FilterReport::default()
        };
        assert_eq!(report.validate().unwrap_err().field, "actions[1].action");
        let mut over = counts("reply");
        over.failed_timeout = 1;
        over.passed_unchecked = 2;
        let report = FilterReport {
            actions: vec![over],
            ..FilterReport::default()
        };
        assert_eq!(
            report.validate().unwrap_err().field,
            "actions[0].passed_unchecked"
        );
        let report = FilterReport {
            actions: vec![counts("a"); MAX_REPORT_ACTIONS + 1],
            ..FilterReport::default()
        };
        assert_eq!(report.validate().unwrap_err().field, "actions");
        let report = FilterReport {
            actions: vec![counts("a")],
            gave_up: (0..=MAX_REPORT_GAVE_UP as u64).collect(),
            ..FilterReport::default()
        };
        assert_eq!(report.validate().unwrap_err().field, "gave_up");
        let report = FilterReport {
            gave_up: (0..MAX_REPORT_GAVE_UP as u64).collect(),
            ..report
        };
        assert!(report.validate().is_ok());
    }

    #[test]
    fn an_identity_is_a_reporter_and_a_seq_together() {
        let with = |reporter: Option<&str>, seq| FilterReport {
            actions: vec![counts("reply")],
            reporter: reporter.map(str::to_owned),
            seq,
            gave_up: Vec::new(),
        };
        assert_eq!(with(None, None).id().unwrap(), None);
        let ok = with(Some("ab12:3"), Some(7));
        assert_eq!(
            ok.id().unwrap(),
            Some(ReportId {
                reporter: "ab12:3",
                seq: 7
            })
        );
        assert_eq!(with(Some("a"), None).validate().unwrap_err().field, "seq");
        assert_eq!(
            with(None, Some(1)).validate().unwrap_err().field,
            "reporter"
        );
        assert_eq!(with(Some(""), Some(1)).id().unwrap_err().field, "reporter");
        assert_eq!(
            with(Some("a b"), Some(1)).id().unwrap_err().field,
            "reporter"
        );
        let long = "a".repeat(MAX_REPORTER_LEN + 1);
        assert_eq!(
            with(Some(&long), Some(1)).id().unwrap_err().field,
            "reporter"
        );
    }

    #[test]
    fn a_valid_report_names_its_actions() {
        let report = FilterReport {
            actions: vec![counts("reply"), counts("login")],
            ..FilterReport::default()
        };
        let checked = report.validate().unwrap();
        assert_eq!(checked[1].0.as_str(), "login");
    }
}
