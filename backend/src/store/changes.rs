//! Admin changes to the rules (a rule or a per-key override put or deleted) as one value each
//! store applies together with its audit entry in one atomic step: a Redis script, or one lock
//! of the memory store. So a change and its record cannot diverge, and what the entry says was
//! there before is exactly what the change replaced.

use serde::Serialize;
use sluice_core::wire::{AuditEntry, AuditKind};
use sluice_core::{Action, Rule};

use super::error::StoreError;

/// One change to the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleChange {
    /// Create or replace the rule of its action.
    PutRule(Rule),
    /// Delete the rule of an action, and every override of it.
    DeleteRule(Action),
    /// Create or replace the override of `key` (the rule's action must have a rule).
    PutOverride {
        /// The key.
        key: String,
        /// The rule in force for it.
        rule: Rule,
    },
    /// Delete the override of `key` under `action`.
    DeleteOverride {
        /// The action.
        action: Action,
        /// The key.
        key: String,
    },
}

impl RuleChange {
    /// The action changed.
    pub fn action(&self) -> &Action {
        match self {
            RuleChange::PutRule(rule) | RuleChange::PutOverride { rule, .. } => rule.action(),
            RuleChange::DeleteRule(action) | RuleChange::DeleteOverride { action, .. } => action,
        }
    }

    /// The key, for overrides.
    pub fn key(&self) -> Option<&str> {
        match self {
            RuleChange::PutOverride { key, .. } | RuleChange::DeleteOverride { key, .. } => {
                Some(key)
            }
            RuleChange::PutRule(_) | RuleChange::DeleteRule(_) => None,
        }
    }

    /// The rule written, for puts.
    pub fn rule(&self) -> Option<&Rule> {
        match self {
            RuleChange::PutRule(rule) | RuleChange::PutOverride { rule, .. } => Some(rule),
            RuleChange::DeleteRule(_) | RuleChange::DeleteOverride { .. } => None,
        }
    }

    /// How the audit trail names this change.
    pub fn kind(&self) -> AuditKind {
        match self {
            RuleChange::PutRule(_) => AuditKind::RulePut,
            RuleChange::DeleteRule(_) => AuditKind::RuleDelete,
            RuleChange::PutOverride { .. } => AuditKind::OverridePut,
            RuleChange::DeleteOverride { .. } => AuditKind::OverrideDelete,
        }
    }
}

/// Who made a change and when: the part of its audit entry the store cannot know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditStamp {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `"token"` or `"session:<id>"`.
    pub who: String,
}

impl AuditStamp {
    /// The entry recording `change` under this stamp, given what it produced.
    pub fn entry(&self, change: &RuleChange, version: u64, before: Option<&Rule>) -> AuditEntry {
        AuditEntry {
            at_ms: self.at_ms,
            who: self.who.clone(),
            kind: change.kind(),
            action: change.action().as_str().to_owned(),
            key: change.key().map(str::to_owned),
            version: Some(version),
            before: before.map(Rule::to_json),
            after: change.rule().map(Rule::to_json),
        }
    }

    /// The leading fields of the entry recording `change`, as a JSON object without its closing
    /// brace: a Redis script appends `version`, `before` (what it replaced, read in the same
    /// step) and `after`, and closes it.
    pub fn json_head(&self, change: &RuleChange) -> Result<String, StoreError> {
        #[derive(Serialize)]
        struct Head<'a> {
            at_ms: u64,
            who: &'a str,
            kind: AuditKind,
            action: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            key: Option<&'a str>,
        }
        let head = Head {
            at_ms: self.at_ms,
            who: &self.who,
            kind: change.kind(),
            action: change.action().as_str(),
            key: change.key(),
        };
        let mut text = serde_json::to_string(&head)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode an audit entry: {e}")))?;
        // serde_json writes an object as `{...}`: drop the brace the script adds back.
        if text.pop() != Some('}') {
            return Err(StoreError::Corrupt(format!(
                "an audit entry encoded as {text:?}, not an object"
            )));
        }
        Ok(text)
    }
}

/// What a [`RuleChange`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// Applied: the new rules version, and what the changed rule or override was before (`None`
    /// when it was new).
    Done {
        /// The rules version after the change.
        version: u64,
        /// The rule or override replaced or deleted.
        before: Option<Rule>,
    },
    /// Nothing to delete: no such rule, or no such override. Nothing was written.
    Missing,
    /// An override for an action that has no rule. Nothing was written.
    NoRule,
    /// The action already has [`sluice_core::limits::MAX_OVERRIDES_PER_ACTION`] overrides and
    /// this key is not one of them. Nothing was written.
    TooManyOverrides,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_head_plus_what_a_script_appends_is_the_entry() {
        let rule = Rule::from_json_str(
            r#"{"action":"reply","algorithm":"gcra","capacity":2,"rate":{"count":1,"period":"1s"}}"#,
        )
        .expect("rule");
        let change = RuleChange::PutOverride {
            key: "a\"b\\c{}\u{1}é".into(),
            rule: rule.clone(),
        };
        let stamp = AuditStamp {
            at_ms: 42,
            who: "session:0123456789ab".into(),
        };
        let text = format!(
            "{},\"version\":7,\"before\":null,\"after\":{}}}",
            stamp.json_head(&change).expect("head"),
            rule.to_json()
        );
        let parsed: AuditEntry = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed, stamp.entry(&change, 7, None));
    }
}
