//! Rules, overrides and the audit trail in Redis ([`RuleStore`]). The rules live in one hash,
//! action -> rule JSON, with the version in its field [`VERSION_FIELD`]. Overrides and the audit
//! list share the rules' hash tag, so a change, its version bump and its audit entry are one
//! script in one slot:
//!
//! - overrides of an action: hash `{<prefix>:rules}:overrides:<action>`, key -> rule JSON;
//! - the audit trail: list `{<prefix>:rules}:audit`, newest first, trimmed to
//!   [`AUDIT_KEEP`] by the script that adds to it.
//!
//! None carries a TTL: a `volatile-*` eviction policy never evicts them.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use async_trait::async_trait;
use redis::Script;
use sluice_core::limits::{AUDIT_KEEP, MAX_OVERRIDES_PER_ACTION};
use sluice_core::wire::{AuditEntry, KeyOverride};
use sluice_core::{Action, Rule};

use super::keys::VERSION_FIELD;
use super::RedisStore;
use crate::store::{AuditStamp, ChangeOutcome, RuleChange, RuleSnapshot, RuleStore, StoreError};

struct ChangeScripts {
    change: Script,
    audit: Script,
}

/// Built once per process (computing their SHA1s); sent to Redis on first use.
fn scripts() -> &'static ChangeScripts {
    static SCRIPTS: OnceLock<ChangeScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| ChangeScripts {
        change: Script::new(include_str!("../../../lua/rules_change.lua")),
        audit: Script::new(include_str!("../../../lua/audit_record.lua")),
    })
}

/// Rules per page of `rules_load.lua` (each with its overrides): small enough that a page never
/// holds Redis for long.
const RULES_PAGE: usize = 250;

/// Reads of every page before a load gives up on a version that keeps moving.
const RULES_LOAD_ATTEMPTS: usize = 5;

/// One page of `rules_load.lua`: version, next cursor, rules (flat), overrides (flat).
type RulesPage = (Option<String>, String, Vec<String>, Vec<String>);

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
fn parse_overrides(flat: &[String], hash: &str) -> Result<Vec<KeyOverride>, StoreError> {
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

#[async_trait]
impl RuleStore for RedisStore {
    async fn change_rules(
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
        let reply: Vec<Option<String>> = self.script(&hash, "rules_change", &invocation).await?;
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

    async fn record_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let [hash, _] = self.keys.rules();
        let key = audit_key(&hash);
        let json = serde_json::to_string(entry)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode an audit entry: {e}")))?;
        let _: i64 = self
            .script(
                &key,
                "audit_record",
                scripts().audit.key(&key).arg(json).arg(AUDIT_KEEP),
            )
            .await?;
        Ok(())
    }

    async fn read_audit(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let [hash, _] = self.keys.rules();
        let key = audit_key(&hash);
        let last = isize::try_from(limit.min(AUDIT_KEEP)).unwrap_or(isize::MAX) - 1;
        let texts: Vec<String> = self
            .command(&key, redis::cmd("LRANGE").arg(&key).arg(0).arg(last))
            .await?;
        texts
            .iter()
            .map(|text| {
                serde_json::from_str(text)
                    .map_err(|e| StoreError::Corrupt(format!("an entry of {key}: {e}")))
            })
            .collect()
    }

    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError> {
        // Page by page; a write between pages moves the version, and then the read starts again
        // (a few times at most: writes are admin edits and reloads, seconds apart).
        let mut moved = 0;
        loop {
            match self.load_rules_paged().await? {
                Some(snapshot) => return Ok(snapshot),
                None if moved < RULES_LOAD_ATTEMPTS => moved += 1,
                None => {
                    return Err(StoreError::Corrupt(format!(
                        "the rules changed during each of {RULES_LOAD_ATTEMPTS} reads"
                    )))
                }
            }
        }
    }
    async fn put_rule(&self, rule: &Rule) -> Result<u64, StoreError> {
        let [hash, _] = self.keys.rules();
        let json = rule.to_json().to_string();
        let mut invocation = self.scripts.rules_write.key(&hash);
        invocation.arg("put").arg(rule.action().as_str()).arg(json);
        self.script(&hash, "rules_write", &invocation).await
    }
    async fn rules_version(&self) -> Result<Option<u64>, StoreError> {
        let [hash, _] = self.keys.rules();
        let version: Option<String> = self
            .command(&hash, redis::cmd("HGET").arg(&hash).arg(VERSION_FIELD))
            .await?;
        version.map(|v| parse_version(&v, &hash)).transpose()
    }
}

/// Parses the rules version held in the field [`VERSION_FIELD`] of the rules hash `hash`.
fn parse_version(text: &str, hash: &str) -> Result<u64, StoreError> {
    text.parse().map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        StoreError::Corrupt(format!("the rules version (field {VERSION_FIELD} of {hash}) holds {shown:?}, not a whole number"))
    })
}

impl RedisStore {
    /// Every page of the rules, or `None` when the version moved between pages (read again).
    async fn load_rules_paged(&self) -> Result<Option<RuleSnapshot>, StoreError> {
        let [hash, legacy_version_key] = self.keys.rules();
        let mut cursor = "0".to_owned();
        let mut first_version: Option<Option<String>> = None;
        let mut rules = BTreeMap::new();
        let mut overrides = Vec::new();
        loop {
            let mut invocation = self.scripts.rules_load.key(&hash);
            invocation
                .key(&legacy_version_key)
                .arg(&cursor)
                .arg(RULES_PAGE);
            let (version, next, flat, flat_overrides): RulesPage =
                self.script(&hash, "rules_load", &invocation).await?;
            match &first_version {
                None => first_version = Some(version),
                Some(first) if *first != version => return Ok(None),
                Some(_) => {}
            }
            let mut new_here = std::collections::HashSet::new();
            for pair in flat.chunks(2) {
                let [action, json] = pair else {
                    return Err(StoreError::Corrupt(format!("{hash}: odd HSCAN reply")));
                };
                if action == VERSION_FIELD || rules.contains_key(action) {
                    // HSCAN may return a field twice; its first page's overrides stand.
                    continue;
                }
                let rule = Rule::from_json_str(json)
                    .map_err(|e| StoreError::Corrupt(format!("rule {action:?} in {hash}: {e}")))?;
                rules.insert(action.clone(), rule);
                new_here.insert(action.as_str());
            }
            overrides.extend(
                parse_overrides(&flat_overrides, &hash)?
                    .into_iter()
                    .filter(|o| new_here.contains(o.rule.action().as_str())),
            );
            if next == "0" {
                break;
            }
            cursor = next;
        }
        let version = first_version
            .flatten()
            .map(|v| parse_version(&v, &hash))
            .transpose()?;
        Ok(Some(RuleSnapshot {
            version,
            rules: rules.into_values().collect(),
            overrides,
        }))
    }
}
