//! Rules and per-key overrides, their version (what every replica polls) and the audit trail of
//! their changes: written by admins, read by every replica's rule cache.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sluice_core::wire::{AuditEntry, KeyOverride};
use sluice_core::{Action, Rule};

use super::changes::{AuditStamp, ChangeOutcome, RuleChange};
use super::error::StoreError;

/// The rules as stored, with the version that identifies this exact set.
#[derive(Debug, Clone, Default)]
pub struct RuleSnapshot {
    /// Increases on every write; `None` when the store holds no rules bookkeeping at all (a fresh
    /// or wiped Redis), which tells a replica holding cached rules to publish them again.
    pub version: Option<u64>,
    /// Every stored rule.
    pub rules: Vec<Rule>,
    /// Every per-key override (each of an action in `rules`).
    pub overrides: Vec<KeyOverride>,
}

/// Every override of `by_action` (per action, in its order: key → rule), as the rules API and
/// the snapshots list them: sorted by action then key when the maps are.
pub fn listed_overrides<'a, R: std::borrow::Borrow<Rule> + 'a>(
    by_action: impl IntoIterator<Item = &'a BTreeMap<String, R>>,
) -> Vec<KeyOverride> {
    by_action
        .into_iter()
        .flat_map(|by_key| {
            by_key.iter().map(|(key, rule)| KeyOverride {
                key: key.clone(),
                rule: rule.borrow().clone(),
            })
        })
        .collect()
}

/// Rules, overrides, their version and the audit trail.
#[async_trait]
pub trait RuleStore: Send + Sync + 'static {
    /// Every rule and the current version.
    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError>;

    /// Creates or replaces a rule; returns the new version.
    async fn put_rule(&self, rule: &Rule) -> Result<u64, StoreError>;

    /// Deletes a rule (and its overrides, with no audit); returns the new version, or `None` if
    /// there was no such rule.
    async fn delete_rule(&self, action: &Action) -> Result<Option<u64>, StoreError> {
        match self
            .change_rules(&RuleChange::DeleteRule(action.clone()), None)
            .await?
        {
            ChangeOutcome::Done { version, .. } => Ok(Some(version)),
            _ => Ok(None),
        }
    }

    /// The current rules version (cheap; polled by every replica).
    async fn rules_version(&self) -> Result<Option<u64>, StoreError>;

    /// Applies an admin's change to the rules (a rule or a per-key override put or deleted) and
    /// bumps the rules version, and with `audit` also records the change in the audit trail
    /// (keeping the newest [`sluice_core::limits::AUDIT_KEEP`]), all in one atomic step.
    /// Deleting a rule deletes its overrides. A refused change ([`ChangeOutcome::Missing`],
    /// [`ChangeOutcome::NoRule`], [`ChangeOutcome::TooManyOverrides`]) writes nothing.
    /// Republishing cached rules passes no `audit`.
    async fn change_rules(
        &self,
        change: &RuleChange,
        audit: Option<&AuditStamp>,
    ) -> Result<ChangeOutcome, StoreError>;

    /// Records one audit entry that goes with no rules change (a key reset).
    async fn record_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;

    /// The newest `limit` audit entries, newest first.
    async fn read_audit(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError>;
}
