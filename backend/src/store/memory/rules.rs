//! The memory store's rules ([`RuleStore`]): the rules by action, overrides beside them and the
//! audit trail as a ring buffer of the newest [`AUDIT_KEEP`] entries, all under one lock, so a
//! change, its version bump and its audit entry are one step.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use sluice_core::limits::{AUDIT_KEEP, MAX_OVERRIDES_PER_ACTION};
use sluice_core::wire::AuditEntry;
use sluice_core::{Action, Rule};

use super::MemoryStore;
use crate::store::{
    listed_overrides, AuditStamp, ChangeOutcome, RuleChange, RuleSnapshot, RuleStore, StoreError,
};

/// The rules and what goes with them, behind one lock.
#[derive(Default)]
pub(super) struct RuleBook(Mutex<Rules>);

impl RuleBook {
    fn lock(&self) -> MutexGuard<'_, Rules> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct Rules {
    by_action: BTreeMap<Action, Rule>,
    version: u64,
    overrides: Overrides,
    audit: AuditRing,
}

/// Overrides by action, then key.
type Overrides = BTreeMap<Action, BTreeMap<String, Rule>>;

/// The newest audit entries, newest at the front.
#[derive(Debug, Default)]
struct AuditRing(VecDeque<AuditEntry>);

impl AuditRing {
    /// Adds `entry` as the newest, dropping the oldest beyond [`AUDIT_KEEP`].
    fn push(&mut self, entry: AuditEntry) {
        self.0.push_front(entry);
        self.0.truncate(AUDIT_KEEP);
    }

    /// The newest `limit` entries, newest first.
    fn newest(&self, limit: usize) -> Vec<AuditEntry> {
        self.0.iter().take(limit).cloned().collect()
    }
}

impl Rules {
    /// Applies `change` (see [`crate::store::RuleStore::change_rules`]).
    fn apply(&mut self, change: &RuleChange, audit: Option<&AuditStamp>) -> ChangeOutcome {
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

#[async_trait]
impl RuleStore for MemoryStore {
    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError> {
        let rules = self.rules.lock();
        Ok(RuleSnapshot {
            version: Some(rules.version),
            rules: rules.by_action.values().cloned().collect(),
            overrides: listed_overrides(rules.overrides.values()),
        })
    }

    async fn put_rule(&self, rule: &Rule) -> Result<u64, StoreError> {
        let mut rules = self.rules.lock();
        rules.by_action.insert(rule.action().clone(), rule.clone());
        rules.version += 1;
        Ok(rules.version)
    }

    async fn rules_version(&self) -> Result<Option<u64>, StoreError> {
        Ok(Some(self.rules.lock().version))
    }

    async fn change_rules(
        &self,
        change: &RuleChange,
        audit: Option<&AuditStamp>,
    ) -> Result<ChangeOutcome, StoreError> {
        Ok(self.rules.lock().apply(change, audit))
    }

    async fn record_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.rules.lock().audit.push(entry.clone());
        Ok(())
    }

    async fn read_audit(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.rules.lock().audit.newest(limit))
    }
}
