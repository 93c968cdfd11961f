//! The model of the rules table (`app/rules_view.rs`): one row per rule, in words an operator
//! reads at a glance.

use sluice_core::{Limit, Rule};

use crate::api::RulesBody;
use crate::format::per_second;
use crate::sustained;

/// One row of the rules table.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleRow {
    /// The action (also the row's identity).
    pub action: String,
    /// The algorithm's JSON name.
    pub algorithm: String,
    /// Capacity as text.
    pub capacity: String,
    /// `"30 per 60s (0.5/s)"` for a rate, `"60s window"` for a window.
    pub limit: String,
    /// `enforce` or `shadow`.
    pub mode: String,
    /// The operator's description.
    pub description: String,
    /// The validated rule, for the editor; `None` when the server sent something sluice-core
    /// refuses (shown with the reason rather than hidden).
    pub rule: Option<Rule>,
    /// Why the rule could not be read, when it could not.
    pub problem: Option<String>,
}

impl RuleRow {
    /// The row of a validated rule.
    pub fn of(rule: &Rule) -> RuleRow {
        RuleRow {
            action: rule.action().to_string(),
            algorithm: rule.algorithm().to_string(),
            capacity: rule.capacity().to_string(),
            limit: limit_text(rule),
            mode: rule.mode().name().to_owned(),
            description: rule.description().to_owned(),
            rule: Some(rule.clone()),
            problem: None,
        }
    }
}

/// How a rule's rate or window reads in the table.
pub fn limit_text(rule: &Rule) -> String {
    match rule.limit() {
        Limit::Rate(rate) => format!(
            "{} per {} ({})",
            rate.count,
            rate.period,
            per_second(sustained::per_s(&rule.params()))
        ),
        Limit::Window(window) => format!("{window} window"),
    }
}

/// The table's rows, sorted by action. Rules sluice-core refuses still get a row, with the reason.
pub fn rows(body: &RulesBody) -> Vec<RuleRow> {
    let mut rows: Vec<RuleRow> = body
        .rules
        .iter()
        .map(|value| match Rule::from_json(value) {
            Ok(rule) => RuleRow::of(&rule),
            Err(e) => {
                let text = |k: &str| match value.get(k) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                RuleRow {
                    action: text("action"),
                    algorithm: text("algorithm"),
                    capacity: text("capacity"),
                    limit: String::new(),
                    mode: text("mode"),
                    description: text("description"),
                    rule: None,
                    problem: Some(e.to_string()),
                }
            }
        })
        .collect();
    rows.sort_by(|a, b| a.action.cmp(&b.action));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_read_as_an_operator_would_say_them() {
        let body = RulesBody {
            version: 3,
            rules: vec![
                json!({"action": "reply", "algorithm": "gcra", "capacity": 16,
                       "rate": {"count": 30, "period": "60s"}, "mode": "enforce"}),
                json!({"action": "login", "algorithm": "sliding_log", "capacity": 5,
                       "window": "60s", "mode": "shadow"}),
            ],
        };
        let rows = rows(&body);
        assert_eq!(rows[0].action, "login");
        assert_eq!(rows[0].limit, "1m window");
        assert_eq!(rows[0].mode, "shadow");
        assert_eq!(rows[1].limit, "30 per 1m (0.5/s)");
        assert_eq!(rows[1].capacity, "16");
        assert!(rows[1].rule.is_some());
    }

    #[test]
    fn a_rule_core_refuses_is_listed_with_the_reason() {
        let body = RulesBody {
            version: 1,
            rules: vec![json!({"action": "x", "algorithm": "gcra", "capacity": 0,
                               "rate": {"count": 1, "period": "1s"}})],
        };
        let rows = rows(&body);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].rule.is_none());
        assert_eq!(
            rows[0].problem.as_deref(),
            Some("capacity: must be at least 1")
        );
    }
}
