//! The model of the rules table (`app/rules_view.rs`): one row per rule, in words an operator
//! reads at a glance.
//!
//! The rules arrive as sluice-core's [`RulesBody`], already validated into [`Rule`]s by serde
//! (the same `TryFrom` the backend runs on a PUT), so every row is a rule the editor can open.

use sluice_core::wire::RulesBody;
use sluice_core::{Limit, Rule};

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
    /// `"up to 64 for 1s"` when the rule enables leasing, `"off"` otherwise.
    pub lease: String,
    /// The rule itself, for the editor.
    pub rule: Rule,
}

impl RuleRow {
    /// The row of a rule.
    pub fn of(rule: &Rule) -> RuleRow {
        RuleRow {
            action: rule.action().to_string(),
            algorithm: rule.algorithm().to_string(),
            capacity: rule.capacity().to_string(),
            limit: limit_text(rule),
            mode: rule.mode().name().to_owned(),
            description: rule.description().to_owned(),
            lease: lease_text(rule),
            rule: rule.clone(),
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
        Limit::Calendar(c) => format!("per calendar {} ({})", c.unit, c.zone()),
    }
}

/// How a rule's lease reads in the table: what one grant may carry, and for how long.
pub fn lease_text(rule: &Rule) -> String {
    match rule.lease() {
        Some(lease) => format!("up to {} for {}", lease.max, lease.ttl),
        None => "off".to_owned(),
    }
}

/// The table's rows, sorted by action (whatever order the body came in).
pub fn rows(body: &RulesBody) -> Vec<RuleRow> {
    let mut rows: Vec<RuleRow> = body.rules.iter().map(RuleRow::of).collect();
    rows.sort_by(|a, b| a.action.cmp(&b.action));
    rows
}

/// The actions that have a rule: a new rule may not take one of them.
pub fn actions(body: &RulesBody) -> Vec<String> {
    body.rules.iter().map(|r| r.action().to_string()).collect()
}

/// Puts `rule` in place of the stored rule for its action, or adds it: what the page shows
/// right after a save, before the SSE `rules` event confirms it.
pub fn upsert(body: &mut RulesBody, rule: Rule) {
    match body.rules.iter_mut().find(|r| r.action() == rule.action()) {
        Some(slot) => *slot = rule,
        None => body.rules.push(rule),
    }
}

/// Drops the rule for `action`, if there is one, and its overrides (the backend deletes them with
/// it): what the page shows right after a delete.
pub fn remove(body: &mut RulesBody, action: &str) {
    body.rules.retain(|r| r.action().as_str() != action);
    body.overrides
        .retain(|o| o.rule.action().as_str() != action);
}

/// The delete question of a rule, which says what goes with it.
pub fn delete_question(overrides: usize) -> String {
    match overrides {
        0 => "Delete?".to_owned(),
        1 => "Delete, with its override?".to_owned(),
        n => format!("Delete, with its {n} overrides?"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{body, rule};

    #[test]
    fn rows_read_as_an_operator_would_say_them() {
        let body = body(
            r#"{"version": 3, "rules": [
                {"action": "reply", "algorithm": "gcra", "capacity": 16,
                 "rate": {"count": 30, "period": "60s"}, "mode": "enforce"},
                {"action": "login", "algorithm": "sliding_log", "capacity": 5,
                 "window": "60s", "mode": "shadow"}]}"#,
        );
        let rows = rows(&body);
        assert_eq!(rows[0].action, "login");
        assert_eq!(rows[0].limit, "1m window");
        assert_eq!(rows[0].mode, "shadow");
        assert_eq!(rows[1].limit, "30 per 1m (0.5/s)");
        assert_eq!(rows[1].capacity, "16");
        assert_eq!(rows[1].rule.action().as_str(), "reply");
        assert_eq!(rows[1].lease, "off");
        let leased = rule(
            r#"{"action": "hot", "algorithm": "token_bucket", "capacity": 100,
                "rate": {"count": 50, "period": "1s"}, "lease": {"max": 64, "ttl": "1s"}}"#,
        );
        assert_eq!(RuleRow::of(&leased).lease, "up to 64 for 1s");
    }

    #[test]
    fn a_rule_core_refuses_is_refused_with_the_reason() {
        // Core validates while parsing, so the page never holds a rule it could not save back.
        let e = serde_json::from_str::<RulesBody>(
            r#"{"version": 1, "rules": [{"action": "x", "algorithm": "gcra", "capacity": 0,
                "rate": {"count": 1, "period": "1s"}}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    fn a_save_replaces_or_adds_and_a_delete_removes() {
        let mut body = body(
            r#"{"version": 1, "rules": [{"action": "reply", "algorithm": "gcra",
                "capacity": 16, "rate": {"count": 30, "period": "60s"}}]}"#,
        );
        upsert(
            &mut body,
            rule(
                r#"{"action": "reply", "algorithm": "gcra", "capacity": 32, "rate": {"count": 30, "period": "60s"}}"#,
            ),
        );
        upsert(
            &mut body,
            rule(
                r#"{"action": "login", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}"#,
            ),
        );
        let table = rows(&body);
        assert_eq!(table.len(), 2);
        assert_eq!(table[1].capacity, "32");
        assert_eq!(actions(&body), ["reply", "login"]);
        body.overrides.push(sluice_core::wire::KeyOverride {
            key: "vip".into(),
            rule: body.rules[0].clone(),
        });
        remove(&mut body, "reply");
        remove(&mut body, "nothing");
        assert_eq!(actions(&body), ["login"]);
        assert!(body.overrides.is_empty(), "its overrides went with it");
        assert_eq!(delete_question(0), "Delete?");
        assert_eq!(delete_question(2), "Delete, with its 2 overrides?");
    }
}
