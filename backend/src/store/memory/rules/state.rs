//! The memory store's rules state ([`RuleBook`]), apart from the trait that serves it
//! (`../rules.rs`), so that `mod.rs` holds it without importing the trait's file.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sluice_core::limits::{AUDIT_KEEP, MAX_OVERRIDES_PER_ACTION};
use sluice_core::wire::AuditEntry;
use sluice_core::{Action, Rule};

use crate::store::{AuditStamp, ChangeOutcome, RuleChange};

/// The rules and what goes with them, behind one lock.
#[derive(Default)]
pub(crate) struct RuleBook(pub(crate) Mutex<Rules>);

impl RuleBook {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Rules> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
pub(crate) struct Rules {
    pub(crate) by_action: BTreeMap<Action, Rule>,
    pub(crate) version: u64,
    pub(crate) overrides: Overrides,
    pub(crate) audit: AuditRing,
}

/// Overrides by action, then key.
pub(crate) type Overrides = BTreeMap<Action, BTreeMap<String, Rule>>;

/// The newest audit entries, newest at the front.
#[derive(Debug, Default)]
pub(crate) struct AuditRing(pub(crate) VecDeque<AuditEntry>);

impl AuditRing {
    /// Adds `entry` as the newest, dropping the oldest beyond [`AUDIT_KEEP`].
    pub(crate) fn push(&mut self, entry: AuditEntry) {
        self.0.push_front(entry);
        self.0.truncate(AUDIT_KEEP);
    }

    /// The newest `limit` entries, newest first.
    pub(crate) fn newest(&self, limit: usize) -> Vec<AuditEntry> {
        self.0.iter().take(limit).cloned().collect()
    }
}

impl Rules {
    /// Applies `change` (see [`crate::store::RuleStore::change_rules`]).
    pub(crate) fn apply(
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
