//! The memory store: the embedded default for a single process, no Redis needed.
//!
//! Throttle state lives in a sharded map of sluice-core [`State`](sluice_core::State)s and every
//! decision is core's own transition (`rule.params().decide(..)`) under a shard lock, so it is
//! atomic per key and identical to the reference by construction. Idle keys are swept
//! incrementally once their idle TTL has passed. Rules and activity live in small maps.
//!
//! The map is bounded (`--max-keys`, default from [`sizing`]): a flood of fresh keys cannot
//! exhaust memory, and a full map never refuses a request nor lets one through undecided. It
//! evicts instead, where the least is lost ([`worth`]): keys already back to fresh first, then the
//! lowest level. An evicted key restarts fresh, as after a restart: at worst one extra burst for
//! that key, while every key still held, the hammered ones above all, is limited exactly.

mod activity;
mod changes;
mod commit;
mod history;
mod shards;
pub mod sizing;
mod slot;
mod table;
mod worth;

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use sluice_core::cell::CellArgs;
use sluice_core::wire::StoreHealth;
use sluice_core::{Action, Decision, Lease, Leased, Nanos, Params, Rule};

use self::activity::ActivityLog;
use self::history::HistoryLog;
use self::shards::{ShardedStates, Totals};
use super::{Activity, ActivityStore, DecisionStore, RuleSnapshot, RuleStore, Store, StoreError};
use crate::clock::now_ns;

/// Shards of the state map: enough that 2–64 cores rarely contend on one lock.
const SHARDS: usize = 64;
/// How recent a live eviction must be (store time) for [`Store::health`] to warn.
const WARN_WINDOW_NS: Nanos = 60_000_000_000;
/// Keys of recent activity kept per action (as the Redis store does).
pub const ACTIVITY_KEEP: usize = 200;

struct Rules {
    by_action: BTreeMap<Action, Rule>,
    version: u64,
    /// Per-key overrides (see `changes.rs`).
    overrides: changes::Overrides,
    /// The audit trail (see `changes.rs`).
    audit: changes::AuditRing,
}

/// Throttle state, rules and activity in this process's memory.
pub struct MemoryStore {
    states: ShardedStates,
    /// Request ids already committed (see `commit.rs`).
    commits: commit::CommitMarks,
    rules: Mutex<Rules>,
    activity: ActivityLog,
    history: HistoryLog,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store (no rules, version 0) bounded by [`sizing::default_max_keys`].
    pub fn new() -> MemoryStore {
        Self::with_max_keys(sizing::default_max_keys())
    }

    /// An empty store holding at most `max_keys` throttle keys (at least 1), and at most
    /// `max_keys ×` [`sizing::BYTES_PER_KEY`] bytes of them: keys with long names and sliding
    /// logs weigh what they cost, so fewer of them fit.
    pub fn with_max_keys(max_keys: usize) -> MemoryStore {
        MemoryStore {
            states: ShardedStates::new(SHARDS, max_keys),
            commits: commit::CommitMarks::default(),
            rules: Mutex::new(Rules {
                by_action: BTreeMap::new(),
                version: 0,
                overrides: BTreeMap::new(),
                audit: changes::AuditRing::default(),
            }),
            activity: ActivityLog::new(ACTIVITY_KEEP),
            history: HistoryLog::default(),
        }
    }

    /// Keys currently holding state (including expired ones not yet swept): for tests and
    /// metrics, to show that memory stays bounded.
    pub fn state_count(&self) -> usize {
        self.states.totals().rows
    }

    /// The bound: most throttle keys held (`--max-keys`).
    pub fn max_keys(&self) -> usize {
        self.states.max_keys()
    }

    /// Bytes of throttle state held now, as the store weighs keys (at least
    /// [`sizing::BYTES_PER_KEY`] each; more for long names and sliding logs): never more than
    /// `max_keys × BYTES_PER_KEY`, unless one key alone weighs more than its shard's share.
    pub fn bytes_held(&self) -> usize {
        self.states.totals().weight
    }

    /// At least the most keys ever held at once (the sum of each shard's own peak): a test's
    /// proof that the bound was never exceeded, not just at the end.
    pub fn peak_keys(&self) -> usize {
        self.states.totals().peak
    }

    /// Keys evicted while they still held state (each may give its key one extra burst).
    /// Already-fresh keys dropped to make room are not counted: nothing was lost.
    pub fn evictions(&self) -> u64 {
        self.states.totals().live_evictions
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.rules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn rule_slot(rule: &Rule, key: &str) -> String {
    slot::rule_slot(rule.action(), rule.algorithm(), key)
}

/// The health report of a store with `totals` and bound `max_keys`: a warning while keys that
/// still held state were evicted within the last minute (the bound is too small for the traffic,
/// or a spray is under way).
fn health_of(totals: &Totals, max_keys: usize) -> StoreHealth {
    let mut warnings = Vec::new();
    let recent = totals
        .last_live_eviction
        .is_some_and(|at| at.saturating_add(WARN_WINDOW_NS) >= totals.latest);
    if recent {
        warnings.push(format!(
            "memory store at its bound of {max_keys} keys (--max-keys, SLUICE_MAX_KEYS) and \
             evicting keys that still hold state ({} so far): each may pass one extra burst; \
             raise the bound if this is normal traffic, or use Redis",
            totals.live_evictions
        ));
    }
    StoreHealth {
        kind: "memory".to_owned(),
        warnings,
        keys: Some(totals.rows as u64),
        max_keys: Some(max_keys as u64),
        evictions: totals.live_evictions,
    }
}

#[async_trait]
impl DecisionStore for MemoryStore {
    async fn throttle_leased(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        lease: Option<Lease>,
        at: Option<Nanos>,
    ) -> Result<Leased, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self
            .states
            .decide_leased(&rule_slot(rule, key), rule.params(), now, quantity, lease))
    }
    async fn throttle_all(
        &self,
        checks: &[super::CheckRequest<'_>],
        at: Option<Nanos>,
    ) -> Result<super::AllOutcome, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        let (names, planned) = super::all::plan(checks, rule_slot);
        let decided = self.states.decide_all(&names, &planned, now);
        Ok(super::AllOutcome {
            decisions: decided.decisions,
            denied: decided.denied,
            unrefunded: 0,
        })
    }
    async fn cell_throttle(
        &self,
        key: &str,
        args: CellArgs,
        at: Option<Nanos>,
    ) -> Result<Decision, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self.states.decide(
            &slot::cell_slot(key),
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
            .map(|key| self.states.decide(&rule_slot(rule, key), params, now, 0))
            .collect())
    }
    async fn commit(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        commit: sluice_core::commit::Commit,
        at: Option<Nanos>,
    ) -> Result<super::CommitOutcome, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self
            .commits
            .commit(&self.states, rule, key, id, commit, now))
    }
    async fn hold(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
        at: Option<Nanos>,
    ) -> Result<bool, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self.commits.hold(rule, key, id, units, now))
    }
    async fn budget(
        &self,
        rule: &Rule,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<sluice_core::wire::KeyBudget, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self.commits.budget(rule, key, now))
    }
    async fn reset_key(
        &self,
        action: &Action,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<Vec<sluice_core::Algorithm>, StoreError> {
        let now = at.unwrap_or_else(now_ns);
        Ok(self.commits.reset(&self.states, action, key, now))
    }
}

#[async_trait]
impl RuleStore for MemoryStore {
    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError> {
        let rules = self.rules();
        Ok(RuleSnapshot {
            version: Some(rules.version),
            rules: rules.by_action.values().cloned().collect(),
            overrides: changes::listed(&rules.overrides),
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
        match rules.apply(&crate::store::RuleChange::DeleteRule(action.clone()), None) {
            crate::store::ChangeOutcome::Done { version, .. } => Ok(Some(version)),
            _ => Ok(None),
        }
    }
    async fn change_rules(
        &self,
        change: &crate::store::RuleChange,
        audit: Option<&crate::store::AuditStamp>,
    ) -> Result<crate::store::ChangeOutcome, StoreError> {
        Ok(self.rules().apply(change, audit))
    }
    async fn record_audit(&self, entry: &sluice_core::wire::AuditEntry) -> Result<(), StoreError> {
        self.rules().audit.push(entry.clone());
        Ok(())
    }
    async fn read_audit(
        &self,
        limit: usize,
    ) -> Result<Vec<sluice_core::wire::AuditEntry>, StoreError> {
        Ok(self.rules().audit.newest(limit))
    }
    async fn rules_version(&self) -> Result<Option<u64>, StoreError> {
        Ok(Some(self.rules().version))
    }
}

#[async_trait]
impl ActivityStore for MemoryStore {
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
    async fn record_history(
        &self,
        batch: &[crate::history::HistoryRecord],
    ) -> Result<(), StoreError> {
        self.history.record(batch);
        Ok(())
    }
    async fn apply_report(
        &self,
        mark: &crate::history::ReportMark,
        record: &crate::history::HistoryRecord,
    ) -> Result<crate::history::marks::ReportApplied, StoreError> {
        Ok(self.history.apply_report(mark, record))
    }
    async fn key_denied(
        &self,
        action: &Action,
        key: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, u64)>, StoreError> {
        Ok(self.history.key_denied(action, key, now_ms))
    }
    async fn read_history(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> Result<crate::history::StoredHistory, StoreError> {
        Ok(self.history.read(action, first_step_ms, steps, now_ms))
    }
    async fn record_denied(
        &self,
        batch: &[crate::history::DeniedRecord],
    ) -> Result<(), StoreError> {
        self.history.record_denied(batch);
        Ok(())
    }
    async fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(self.history.top_denied(action, now_ms, limit))
    }
    async fn key_last_seen(&self, action: &Action, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.activity.last_seen(action, key))
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn health(&self) -> StoreHealth {
        health_of(&self.states.totals(), self.states.max_keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;
    const B: Nanos = 1_700_000_040 * S;

    fn rule(json: &str) -> Rule {
        Rule::from_json_str(json).expect("valid rule")
    }

    #[tokio::test]
    async fn health_warns_while_live_keys_are_evicted_and_clears_after_a_minute() {
        let store = MemoryStore::with_max_keys(64);
        let r = rule(r#"{"action":"a","algorithm":"fixed_window","capacity":5,"window":"1h"}"#);
        store.throttle(&r, "k", 1, Some(B)).await.expect("memory");
        let h = store.health();
        assert_eq!((h.keys, h.max_keys, h.evictions), (Some(1), Some(64), 0));
        assert!(h.warnings.is_empty(), "{:?}", h.warnings);

        // One key per shard: 1,000 keys fill all 64 (a shard missing all of them: p < 1e-5).
        for i in 0..1_000 {
            let at = Some(B + S);
            store
                .throttle(&r, &format!("k{i}"), 1, at)
                .await
                .expect("memory");
        }
        let h = store.health();
        assert_eq!((h.keys, h.evictions), (Some(64), 1_001 - 64));
        assert_eq!(h.warnings.len(), 1);
        assert!(h.warnings[0].contains("--max-keys"), "{}", h.warnings[0]);

        // Two hours on, every held key is back to fresh: a new key replaces one losing nothing,
        // and with no live eviction in the last minute the warning is gone.
        store
            .throttle(&r, "late", 1, Some(B + 7_200 * S))
            .await
            .expect("memory");
        let h = store.health();
        assert_eq!(
            h.evictions,
            1_001 - 64,
            "fresh keys dropped are not evictions"
        );
        assert!(h.warnings.is_empty(), "{:?}", h.warnings);
        assert_eq!(store.peak_keys(), 64);
    }

    #[tokio::test]
    async fn peeks_never_take_room() {
        let store = MemoryStore::with_max_keys(1);
        let r = rule(
            r#"{"action":"a","algorithm":"gcra","capacity":2,"rate":{"count":1,"period":"1h"}}"#,
        );
        store
            .throttle(&r, "held", 1, Some(B))
            .await
            .expect("memory");
        let keys: Vec<String> = (0..100).map(|i| format!("peek{i}")).collect();
        store.peek_many(&r, &keys, Some(B)).await.expect("memory");
        assert_eq!(store.state_count(), 1);
        assert_eq!(store.evictions(), 0);
        let d = store
            .throttle(&r, "held", 1, Some(B))
            .await
            .expect("memory");
        assert_eq!(d.remaining, 0, "the held key kept its state");
    }
}
