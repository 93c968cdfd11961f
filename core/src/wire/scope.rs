//! `?scope=` on the admin lists that answer one entry per action (`GET /v1/history`,
//! `GET /v1/keys`, `GET /v1/levels`): every action with a rule, or only the actions with
//! something to show. With thousands of rules (an envoyproxy/ratelimit configuration directory)
//! the full lists run to megabytes for a handful of active actions; the dashboard asks for the
//! active ones and says how many others there are (docs/dashboard.md, "Many rules").

use serde::{Deserialize, Serialize};

/// The query parameter's name.
pub const SCOPE_PARAM: &str = "scope";

/// Which actions a per-action list answers for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ActionScope {
    /// Every action with a rule (the default, and what these lists always answered).
    #[default]
    #[serde(rename = "all")]
    All,
    /// Only actions with something to show: in `GET /v1/history`, an action seen within the
    /// last 24 h or with any count in the range; in `GET /v1/keys`, an action under which the
    /// key has state (a level, a last-seen time, an override, a denial, a budget figure); in
    /// `GET /v1/levels`, an action with a recently active key or a non-zero rate.
    #[serde(rename = "active")]
    Active,
}

impl ActionScope {
    /// The parameter's value for this scope.
    pub fn name(self) -> &'static str {
        match self {
            ActionScope::All => "all",
            ActionScope::Active => "active",
        }
    }

    /// The scope a query value names (`None`, parameter absent: [`ActionScope::All`]); the
    /// refusal says what is accepted.
    pub fn parse(value: Option<&str>) -> Result<ActionScope, String> {
        match value {
            None | Some("all") => Ok(ActionScope::All),
            Some("active") => Ok(ActionScope::Active),
            Some(other) => Err(format!("must be all or active; got {other:?}")),
        }
    }

    /// `scope=<name>`, for a URL's query.
    pub fn query(self) -> String {
        format!("{SCOPE_PARAM}={}", self.name())
    }
}

impl super::ActionHistory {
    /// Whether [`ActionScope::Active`] keeps this action in `GET /v1/history`: seen within the
    /// last 24 h, or any count in the range (a filter report can count an action never seen).
    pub fn is_active(&self) -> bool {
        self.last_seen_ms.is_some() || self.totals.values().iter().any(|&n| n > 0)
    }
}

impl super::KeyActionState {
    /// Whether [`ActionScope::Active`] keeps this action in `GET /v1/keys`: the key has state
    /// under it. Every action left out reads as a key never seen there: level 0, the whole
    /// capacity remaining, nothing to wait for, no override, denial or budget figure.
    pub fn is_active(&self) -> bool {
        self.level > 0.0
            || self.remaining < self.capacity
            || self.retry_after_ms.is_some()
            || self.reset_after_ms > 0
            || self.last_seen_ms.is_some()
            || self.overridden
            || !self.denied_minutes.is_empty()
            || self.budget != super::KeyBudget::default()
    }
}

impl super::ActionLevels {
    /// Whether [`ActionScope::Active`] keeps this action in `GET /v1/levels` (and the SSE
    /// `levels` event): a recently active key, or requests allowed or denied just now.
    pub fn is_active(&self) -> bool {
        !self.keys.is_empty() || self.allowed_per_s > 0.0 || self.denied_per_s > 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_anything_else_is_refused() {
        for scope in [ActionScope::All, ActionScope::Active] {
            assert_eq!(ActionScope::parse(Some(scope.name())), Ok(scope));
            assert_eq!(
                serde_json::to_string(&scope).unwrap(),
                format!("\"{}\"", scope.name())
            );
        }
        assert_eq!(ActionScope::parse(None), Ok(ActionScope::All));
        assert!(ActionScope::parse(Some("busy"))
            .unwrap_err()
            .contains("all or active"));
        assert_eq!(ActionScope::Active.query(), "scope=active");
    }

    #[test]
    fn an_action_is_active_when_it_has_something_to_show() {
        use crate::wire::{ActionHistory, ActionLevels, KeyActionState, StepCounts};
        let mut history = ActionHistory::default();
        assert!(!history.is_active());
        history.totals.passed_unchecked = 1;
        assert!(history.is_active(), "a count alone");
        history.totals = StepCounts::default();
        history.last_seen_ms = Some(1);
        assert!(history.is_active(), "seen within 24 h, quiet in the range");

        let mut state: KeyActionState = serde_json::from_str(
            r#"{"action": "a", "algorithm": "gcra", "mode": "enforce", "capacity": 5,
                "level": 0.0, "remaining": 5, "retry_after_ms": null, "reset_after_ms": 0,
                "last_seen_ms": null}"#,
        )
        .unwrap();
        assert!(!state.is_active(), "a key never seen there");
        state.remaining = 4;
        assert!(state.is_active());
        state.remaining = 5;
        state.budget.debt = 1;
        assert!(state.is_active());

        let mut levels: ActionLevels =
            serde_json::from_str(r#"{"action": "a", "algorithm": "gcra", "capacity": 5}"#).unwrap();
        assert!(!levels.is_active());
        levels.denied_per_s = 0.5;
        assert!(levels.is_active());
    }
}
