//! Overrides, the audit trail and key resets in Redis. Overrides and the audit list share the
//! rules' hash tag, so a change, its version bump and its audit entry are one script in one slot:
//!
//! - overrides of an action: hash `{<prefix>:rules}:overrides:<action>`, key -> rule JSON;
//! - the audit trail: list `{<prefix>:rules}:audit`, newest first, trimmed to
//!   [`AUDIT_KEEP`] by the script that adds to it.
//!
//! Neither carries a TTL (like the rules hash): a `volatile-*` eviction policy never evicts them.
//! A reset deletes the key's state keys (one per algorithm, one slot) in one script.

use std::sync::OnceLock;

use redis::Script;
use sluice_core::limits::{AUDIT_KEEP, MAX_OVERRIDES_PER_ACTION};
use sluice_core::wire::{AuditEntry, KeyOverride};
use sluice_core::{Action, Algorithm, Nanos, Rule};

use super::errors::Call;
use super::RedisStore;
use crate::store::{AuditStamp, ChangeOutcome, RuleChange, StoreError};

struct ChangeScripts {
    change: Script,
    audit: Script,
    reset: Script,
}

/// Built once per process (computing their SHA1s); sent to Redis on first use.
fn scripts() -> &'static ChangeScripts {
    static SCRIPTS: OnceLock<ChangeScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| ChangeScripts {
        change: Script::new(include_str!("../../../lua/rules_change.lua")),
        audit: Script::new(include_str!("../../../lua/audit_record.lua")),
        reset: super::scripts::with_now_ms(include_str!("../../../lua/state_reset.lua")),
    })
}

/// The overrides hash of `action`, beside the rules hash `rules` (as `rules_load.lua` builds it).
fn overrides_key(rules: &str, action: &Action) -> String {
    format!("{rules}:overrides:{}", action.as_str())
}

/// The audit list beside the rules hash `rules`.
fn audit_key(rules: &str) -> String {
    format!("{rules}:audit")
}

fn parse_rule(json: &str, what: &str) -> Result<Rule, StoreError> {
    Rule::from_json_str(json).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// Reads the flat `{action, key, rule JSON, ...}` list `rules_load.lua` returns.
pub(super) fn parse_overrides(flat: &[String], hash: &str) -> Result<Vec<KeyOverride>, StoreError> {
    flat.chunks(3)
        .map(|row| {
            let [action, key, json] = row else {
                return Err(StoreError::Corrupt(format!(
                    "{hash}: short overrides reply"
                )));
            };
            let rule = parse_rule(json, &format!("override {key:?} of {action:?} in {hash}"))?;
            if rule.action().as_str() != action {
                return Err(StoreError::Corrupt(format!(
                    "override {key:?} in {} is a rule for {:?}",
                    overrides_key(hash, rule.action()),
                    rule.action().as_str()
                )));
            }
            Ok(KeyOverride {
                key: key.clone(),
                rule,
            })
        })
        .collect()
}

impl RedisStore {
    /// See [`crate::store::RuleStore::change_rules`].
    pub(super) async fn rules_change(
        &self,
        change: &RuleChange,
        audit: Option<&AuditStamp>,
    ) -> Result<ChangeOutcome, StoreError> {
        let [hash, _] = self.keys.rules();
        let (op, json) = match change {
            RuleChange::PutRule(rule) => ("put_rule", rule.to_json().to_string()),
            RuleChange::DeleteRule(_) => ("del_rule", String::new()),
            RuleChange::PutOverride { rule, .. } => ("put_override", rule.to_json().to_string()),
            RuleChange::DeleteOverride { .. } => ("del_override", String::new()),
        };
        let head = audit.map(|a| a.json_head(change)).transpose()?;
        let mut conn = self.conn.clone();
        let mut invocation = scripts().change.key(&hash);
        invocation
            .key(overrides_key(&hash, change.action()))
            .key(audit_key(&hash))
            .arg(op)
            .arg(change.action().as_str())
            .arg(change.key().unwrap_or(""))
            .arg(json)
            .arg(head.unwrap_or_default())
            .arg(AUDIT_KEEP)
            .arg(MAX_OVERRIDES_PER_ACTION);
        let reply: Vec<Option<String>> = self
            .bounded(
                &hash,
                Call::Script("rules_change"),
                invocation.invoke_async(&mut conn),
            )
            .await?;
        match reply.as_slice() {
            [Some(status), Some(version), before] if status == "ok" => {
                let version = version.parse().map_err(|_| {
                    StoreError::Corrupt(format!("rules_change returned the version {version:?}"))
                })?;
                let before = before
                    .as_deref()
                    .map(|json| parse_rule(json, "the rule replaced"))
                    .transpose()?;
                Ok(ChangeOutcome::Done { version, before })
            }
            [Some(status)] if status == "missing" => Ok(ChangeOutcome::Missing),
            [Some(status)] if status == "no_rule" => Ok(ChangeOutcome::NoRule),
            [Some(status)] if status == "too_many" => Ok(ChangeOutcome::TooManyOverrides),
            other => Err(StoreError::Script {
                script: "rules_change",
                message: format!("unexpected reply {other:?}"),
            }),
        }
    }

    /// See [`crate::store::RuleStore::record_audit`].
    pub(super) async fn audit_record(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let [hash, _] = self.keys.rules();
        let key = audit_key(&hash);
        let json = serde_json::to_string(entry)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode an audit entry: {e}")))?;
        let mut conn = self.conn.clone();
        let _: i64 = self
            .bounded(
                &key,
                Call::Script("audit_record"),
                scripts()
                    .audit
                    .key(&key)
                    .arg(json)
                    .arg(AUDIT_KEEP)
                    .invoke_async(&mut conn),
            )
            .await?;
        Ok(())
    }

    /// See [`crate::store::RuleStore::read_audit`].
    pub(super) async fn audit_read(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let [hash, _] = self.keys.rules();
        let key = audit_key(&hash);
        let mut conn = self.conn.clone();
        let last = isize::try_from(limit.min(AUDIT_KEEP)).unwrap_or(isize::MAX) - 1;
        let texts: Vec<String> = self
            .bounded(
                &key,
                Call::Command,
                redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(last)
                    .query_async(&mut conn),
            )
            .await?;
        texts
            .iter()
            .map(|text| {
                serde_json::from_str(text)
                    .map_err(|e| StoreError::Corrupt(format!("an entry of {key}: {e}")))
            })
            .collect()
    }

    /// See [`crate::store::DecisionStore::reset_key`].
    pub(super) async fn state_reset(
        &self,
        action: &Action,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<Vec<Algorithm>, StoreError> {
        let keys: Vec<String> = Algorithm::ALL
            .iter()
            .map(|&algorithm| self.keys.state(action, algorithm, key))
            .collect();
        let first = keys.first().cloned().unwrap_or_default();
        let mut conn = self.conn.clone();
        let mut invocation = scripts().reset.prepare_invoke();
        for k in &keys {
            invocation.key(k);
        }
        // The marks that make a later commit of a reservation from before the reset change
        // nothing live as long as a commit id's own mark.
        invocation
            .arg(super::commit_inflight::now_arg(at))
            .arg(sluice_core::commit::COMMIT_ID_TTL_MS);
        let removed: Vec<i64> = self
            .bounded(
                &first,
                Call::Script("state_reset"),
                invocation.invoke_async(&mut conn),
            )
            .await?;
        removed
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| Algorithm::ALL.get(i).copied())
                    .ok_or_else(|| StoreError::Script {
                        script: "state_reset",
                        message: format!("returned the index {i}"),
                    })
            })
            .collect()
    }
}
