//! The memory store's admin changes: overrides beside the rules and the audit trail as a ring
//! buffer of the newest [`AUDIT_KEEP`] entries, all under the rules lock, so a change, its
//! version bump and its audit entry are one step.

use std::collections::{BTreeMap, VecDeque};

use sluice_core::limits::{AUDIT_KEEP, MAX_OVERRIDES_PER_ACTION};
use sluice_core::wire::{AuditEntry, KeyOverride};
use sluice_core::{Action, Rule};

use super::Rules;
use crate::store::{AuditStamp, ChangeOutcome, RuleChange};

/// Overrides by action, then key.
pub(super) type Overrides = BTreeMap<Action, BTreeMap<String, Rule>>;

/// The newest audit entries, newest at the front.
#[derive(Debug, Default)]
pub(super) struct AuditRing(VecDeque<AuditEntry>);

impl AuditRing {
    /// Adds `entry` as the newest, dropping the oldest beyond [`AUDIT_KEEP`].
    pub(super) fn push(&mut self, entry: AuditEntry) {
        self.0.push_front(entry);
        self.0.truncate(AUDIT_KEEP);
    }

    /// The newest `limit` entries, newest first.
    pub(super) fn newest(&self, limit: usize) -> Vec<AuditEntry> {
        self.0.iter().take(limit).cloned().collect()
    }
}

/// Every override, sorted by action then key.
pub(super) fn listed(overrides: &Overrides) -> Vec<KeyOverride> {
    overrides
        .values()
        .flat_map(|by_key| {
            by_key.iter().map(|(key, rule)| KeyOverride {
                key: key.clone(),
                rule: rule.clone(),
            })
        })
        .collect()
}

impl Rules {
    /// Applies `change` (see [`crate::store::RuleStore::change_rules`]).
    pub(super) fn apply(
        &mut self,
        change: &RuleChange,
        audit: Option<&AuditStamp>,
    ) -> ChangeOutcome {
        let before = match change {
            RuleChange::PutRule(rule) => self.by_action.insert(rule.action().clone(), rule.clone()),
            RuleChange::DeleteRule(action) => {
                let Some(before) = self.by_action.remove(action) else {
                    return ChangeOutcome::Missing;
                };
                self.overrides.remove(action);
                Some(before)
            }
            RuleChange::PutOverride { key, rule } => {
                if !self.by_action.contains_key(rule.action()) {
                    return ChangeOutcome::NoRule;
                }
                let by_key = self.overrides.entry(rule.action().clone()).or_default();
                if by_key.len() >= MAX_OVERRIDES_PER_ACTION && !by_key.contains_key(key) {
                    return ChangeOutcome::TooManyOverrides;
                }
                by_key.insert(key.clone(), rule.clone())
            }
            RuleChange::DeleteOverride { action, key } => {
                if !self.by_action.contains_key(action) {
                    return ChangeOutcome::NoRule;
                }
                let Some(by_key) = self.overrides.get_mut(action) else {
                    return ChangeOutcome::Missing;
                };
                let Some(before) = by_key.remove(key) else {
                    return ChangeOutcome::Missing;
                };
                if by_key.is_empty() {
                    self.overrides.remove(action);
                }
                Some(before)
            }
        };
        self.version += 1;
        if let Some(stamp) = audit {
            self.audit
                .push(stamp.entry(change, self.version, before.as_ref()));
        }
        ChangeOutcome::Done {
            version: self.version,
            before,
        }
    }
}
