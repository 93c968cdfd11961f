//! The memory store: the embedded default for a single process, no Redis needed.
//!
//! Throttle state lives in a sharded map of sluice-core [`State`](sluice_core::State)s and every
//! decision is core's own transition (`rule.params().decide(..)`) under a shard lock, so it is
//! atomic per key and identical to the reference by construction. Idle keys are swept
//! incrementally once their idle TTL has passed. Rules and activity live in small maps.

mod activity;
mod shards;

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use sluice_core::cell::CellArgs;
use sluice_core::{Action, Decision, Nanos, Params, Rule};

use self::activity::ActivityLog;
use self::shards::{ShardedStates, Slot};
use super::{Activity, RuleSnapshot, Store, StoreError};
use crate::clock::now_ns;

/// Shards of the state map: enough that 2–64 cores rarely contend on one lock.
const SHARDS: usize = 64;
/// Keys of recent activity kept per action (as the Redis store does).
pub const ACTIVITY_KEEP: usize = 200;

struct Rules {
    by_action: BTreeMap<Action, Rule>,
    version: u64,
}

/// Throttle state, rules and activity in this process's memory.
pub struct MemoryStore {
    states: ShardedStates,
    rules: Mutex<Rules>,
    activity: ActivityLog,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store (no rules, version 0).
    pub fn new() -> MemoryStore {
        MemoryStore {
            states: ShardedStates::new(SHARDS),
            rules: Mutex::new(Rules {
                by_action: BTreeMap::new(),
                version: 0,
            }),
            activity: ActivityLog::new(ACTIVITY_KEEP),
        }
    }

    /// Keys currently holding state (including expired ones not yet swept): for tests and
    /// metrics, to show that memory stays bounded.
    pub fn state_count(&self) -> usize {
        self.states.len()
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.rules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn rule_slot(rule: &Rule, key: &str) -> Slot {
    Slot::Rule {
        action: rule.action().clone(),
        algorithm: rule.algorithm(),
        key: key.to_owned(),
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn throttle(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        at: Option<Nanos>,
    ) -> Result<Decision, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self
            .states
            .decide(rule_slot(rule, key), rule.params(), now, quantity))
    }

    async fn cell_throttle(
        &self,
        key: &str,
        args: CellArgs,
        at: Option<Nanos>,
    ) -> Result<Decision, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self.states.decide(
            Slot::Cell(key.to_owned()),
            Params::Gcra(args.params),
            now,
            args.quantity,
        ))
    }

    async fn peek_many(
        &self,
        rule: &Rule,
        keys: &[String],
        at: Option<Nanos>,
    ) -> Result<Vec<Decision>, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        let params = rule.params();
        Ok(keys
            .iter()
            .map(|key| self.states.decide(rule_slot(rule, key), params, now, 0))
            .collect())
    }

    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError> {
        let rules = self.rules();
        Ok(RuleSnapshot {
            version: Some(rules.version),
            rules: rules.by_action.values().cloned().collect(),
        })
    }

    async fn put_rule(&self, rule: &Rule) -> Result<u64, StoreError> {
        let mut rules = self.rules();
        rules.by_action.insert(rule.action().clone(), rule.clone());
        rules.version += 1;
        Ok(rules.version)
    }

    async fn delete_rule(&self, action: &Action) -> Result<Option<u64>, StoreError> {
        let mut rules = self.rules();
        if rules.by_action.remove(action).is_none() {
            return Ok(None);
        }
        rules.version += 1;
        Ok(Some(rules.version))
    }

    async fn rules_version(&self) -> Result<Option<u64>, StoreError> {
        Ok(Some(self.rules().version))
    }

    async fn record_activity(&self, batch: &[Activity]) -> Result<(), StoreError> {
        self.activity.record(batch);
        Ok(())
    }

    async fn recent_activity(
        &self,
        action: &Action,
        limit: usize,
    ) -> Result<Vec<Activity>, StoreError> {
        Ok(self.activity.recent(action, limit))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
