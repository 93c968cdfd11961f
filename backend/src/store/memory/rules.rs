//! The memory store's rules ([`RuleStore`]): the rules by action, overrides beside them and the
//! audit trail as a ring buffer of the newest [`AUDIT_KEEP`] entries, all under one lock, so a
//! change, its version bump and its audit entry are one step.

use async_trait::async_trait;
use sluice_core::wire::AuditEntry;
use sluice_core::Rule;

use super::MemoryStore;
use crate::store::{
    listed_overrides, AuditStamp, ChangeOutcome, RuleChange, RuleSnapshot, RuleStore, StoreError,
};

pub(super) mod state;

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
