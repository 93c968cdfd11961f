//! The per-replica rule cache: the decision path reads rules only from here, never from the store.
//!
//! The store holds the truth and a version counter. Each replica polls the version (cheap) and
//! reloads on change, so a write through any replica is in force everywhere within one poll plus
//! one load (well under 1 s at the default 250 ms). While the store is down the cache keeps
//! serving; if the store comes back empty (a restarted Redis without persistence, or the rules
//! key deleted or evicted on its own: the version lives inside it) the cached rules are published
//! again, so losing the rules in Redis does not silently drop every limit.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::wire::{KeyOverride, RulesBody};
use sluice_core::Rule;
use tokio::sync::watch;

use crate::store::{RuleChange, RuleSnapshot, RuleStore, StoreError};

/// Per-key overrides: action -> key -> the rule in force for that key.
pub type Overrides = BTreeMap<String, BTreeMap<String, Arc<Rule>>>;

/// One consistent set of rules, by action.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// The store's version of this set; `None` before any rule was ever stored, or when the set
    /// was changed locally without a confirmed reload (the next poll reloads it).
    pub version: Option<u64>,
    /// The rules, by action name (sorted, so listings are stable). Shared (`Arc`): a decision
    /// whose store step may outlive its request holds its rule without copying it.
    pub rules: BTreeMap<String, Arc<Rule>>,
    /// Per-key overrides, by action then key; only of actions in `rules`.
    pub overrides: Overrides,
}

impl RuleSet {
    /// Builds a set from a store snapshot.
    pub fn from_snapshot(snapshot: RuleSnapshot) -> RuleSet {
        let rules = snapshot
            .rules
            .into_iter()
            .map(|r| (r.action().as_str().to_owned(), Arc::new(r)))
            .collect();
        let mut overrides = Overrides::new();
        for o in snapshot.overrides {
            overrides
                .entry(o.rule.action().as_str().to_owned())
                .or_default()
                .insert(o.key, Arc::new(o.rule));
        }
        RuleSet {
            version: snapshot.version,
            rules,
            overrides,
        }
    }

    /// The rule in force for `key` under `action`: its override if it has one, else the
    /// action's rule; `None` when the action has no rule (an override never outlives its rule).
    /// Every decision path looks rules up here.
    pub fn rule_for(&self, action: &str, key: &str) -> Option<&Arc<Rule>> {
        let rule = self.rules.get(action)?;
        Some(
            self.overrides
                .get(action)
                .and_then(|by_key| by_key.get(key))
                .unwrap_or(rule),
        )
    }

    /// Every override, sorted by action then key.
    pub fn listed_overrides(&self) -> Vec<KeyOverride> {
        crate::store::listed_overrides(self.overrides.values())
    }

    /// Applies a change locally (when the reload after a write failed; the next poll reloads).
    pub fn apply(&mut self, change: &RuleChange) {
        match change {
            RuleChange::PutRule(rule) => {
                self.rules
                    .insert(rule.action().as_str().to_owned(), Arc::new(rule.clone()));
            }
            RuleChange::DeleteRule(action) => {
                self.rules.remove(action.as_str());
                self.overrides.remove(action.as_str());
            }
            RuleChange::PutOverride { key, rule } => {
                self.overrides
                    .entry(rule.action().as_str().to_owned())
                    .or_default()
                    .insert(key.clone(), Arc::new(rule.clone()));
            }
            RuleChange::DeleteOverride { action, key } => {
                if let Some(by_key) = self.overrides.get_mut(action.as_str()) {
                    by_key.remove(key);
                    if by_key.is_empty() {
                        self.overrides.remove(action.as_str());
                    }
                }
            }
        }
    }

    /// The body of `GET /v1/rules` and of the SSE `rules` event.
    pub fn body(&self) -> RulesBody {
        RulesBody {
            version: self.version.unwrap_or(0),
            rules: self.rules.values().map(|r| Rule::clone(r)).collect(),
            overrides: self.listed_overrides(),
        }
    }
}

/// The cache, with change notification (the SSE `rules` event listens to it).
pub struct RuleCache {
    tx: watch::Sender<Arc<RuleSet>>,
}

impl RuleCache {
    /// A cache holding `set`.
    pub fn new(set: RuleSet) -> RuleCache {
        let (tx, _) = watch::channel(Arc::new(set));
        RuleCache { tx }
    }

    /// The current rules (a cheap `Arc` clone).
    pub fn current(&self) -> Arc<RuleSet> {
        self.tx.borrow().clone()
    }

    /// Listens for changes; the receiver sees the current set first.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RuleSet>> {
        self.tx.subscribe()
    }

    /// Replaces the set; listeners are told only when something changed.
    pub fn replace(&self, set: RuleSet) -> bool {
        self.tx.send_if_modified(|current| {
            if current.version == set.version
                && current.rules == set.rules
                && current.overrides == set.overrides
            {
                false
            } else {
                *current = Arc::new(set);
                true
            }
        })
    }

    /// Reloads from the store.
    pub async fn reload(&self, store: &dyn RuleStore) -> Result<bool, StoreError> {
        let snapshot = store.load_rules().await?;
        Ok(self.replace(RuleSet::from_snapshot(snapshot)))
    }

    /// After a write this replica made: reload so the cache holds the store's exact set; if the
    /// reload fails, apply the change locally with an unknown version so the next poll reloads.
    pub async fn after_write(&self, store: &dyn RuleStore, change: &RuleChange) {
        if self.reload(store).await.is_err() {
            let mut set = (*self.current()).clone();
            set.apply(change);
            set.version = None;
            self.replace(set);
        }
    }
}

/// What one poll did (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollOutcome {
    /// The version matched the cache.
    Unchanged,
    /// The rules were reloaded.
    Reloaded,
    /// The store held no rules bookkeeping (wiped, restarted empty, or the rules key deleted or
    /// evicted) and the cached rules were published again.
    Republished,
    /// The store could not be asked (unreachable, timed out, overloaded); the cache keeps
    /// serving. Holds the error.
    StoreDown(String),
    /// The store answered but its rules bookkeeping cannot be read (a version that is not a
    /// number, foreign data in the rules key, a rules script that fails); the cache keeps
    /// serving until it is repaired.
    /// Holds the error.
    Unreadable(String),
}

/// Sorts a failed store call into "cannot reach" and "cannot read", so the log says which.
fn failed(e: &StoreError) -> PollOutcome {
    if e.is_transient() {
        PollOutcome::StoreDown(e.to_string())
    } else {
        PollOutcome::Unreadable(e.to_string())
    }
}

/// One poll: compare versions, reload on change, republish if the store lost everything.
pub async fn poll_once(cache: &RuleCache, store: &dyn RuleStore) -> PollOutcome {
    let cached = cache.current();
    match store.rules_version().await {
        Ok(Some(v)) if cached.version == Some(v) => PollOutcome::Unchanged,
        Ok(None) if cached.rules.is_empty() => {
            if cached.version.is_some() {
                cache.replace(RuleSet::default());
            }
            PollOutcome::Unchanged
        }
        Ok(None) => {
            tracing::warn!(
                rules = cached.rules.len(),
                "the store holds no rules at all (a restarted or wiped Redis, or the rules key deleted or evicted?); publishing this replica's {} cached rules again",
                cached.rules.len()
            );
            for rule in cached.rules.values() {
                if let Err(e) = store.put_rule(rule).await {
                    tracing::warn!(error = %e, "could not republish the cached rules; serving them from cache and retrying");
                    return failed(&e);
                }
            }
            // Then their overrides (not audited: nothing changed, the store had lost them).
            for o in cached.listed_overrides() {
                let change = RuleChange::PutOverride {
                    key: o.key,
                    rule: o.rule,
                };
                if let Err(e) = store.change_rules(&change, None).await {
                    tracing::warn!(error = %e, "could not republish the cached overrides; serving them from cache and retrying");
                    return failed(&e);
                }
            }
            match cache.reload(store).await {
                Ok(_) => PollOutcome::Republished,
                Err(e) => failed(&e),
            }
        }
        Ok(Some(_)) => match cache.reload(store).await {
            Ok(_) => PollOutcome::Reloaded,
            Err(e) => {
                tracing::debug!(error = %e, "rules reload failed; keeping the cached rules");
                failed(&e)
            }
        },
        Err(e) => {
            tracing::debug!(error = %e, "rules version poll failed; keeping the cached rules");
            failed(&e)
        }
    }
}

/// Polls every `every` until `stop` turns true. Trouble is logged once when it starts (or its
/// cause changes) and once when it ends: an unreachable store at WARN, unreadable rules
/// bookkeeping at ERROR (someone must repair it).
pub async fn refresh_loop(
    cache: Arc<RuleCache>,
    store: Arc<dyn RuleStore>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    on_change: impl Fn(usize) + Send,
) {
    let mut ticker = crate::clock::ticker(every);
    // The trouble last logged: None, or the outcome that started it.
    let mut trouble: Option<PollOutcome> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let outcome = poll_once(&cache, store.as_ref()).await;
        match &outcome {
            PollOutcome::StoreDown(error) => {
                if !matches!(trouble, Some(PollOutcome::StoreDown(_))) {
                    tracing::warn!(
                        rules = cache.current().rules.len(),
                        error = %error,
                        "cannot reach the store to refresh rules; serving the cached rules until it is back"
                    );
                    trouble = Some(outcome.clone());
                }
            }
            PollOutcome::Unreadable(error) => {
                if trouble.as_ref() != Some(&outcome) {
                    tracing::error!(
                        rules = cache.current().rules.len(),
                        error = %error,
                        "the rules in the store cannot be read; serving this replica's cached rules until it is repaired (fix or delete the rules key: once it is deleted, the cached rules are published again)"
                    );
                    trouble = Some(outcome.clone());
                }
            }
            _ => match trouble.take() {
                Some(PollOutcome::StoreDown(_)) => {
                    tracing::info!("store reachable again; rules refresh resumed")
                }
                Some(_) => tracing::info!(
                    "the rules in the store are readable again; rules refresh resumed"
                ),
                None => {}
            },
        }
        if matches!(outcome, PollOutcome::Reloaded | PollOutcome::Republished) {
            let set = cache.current();
            tracing::info!(
                version = set.version.unwrap_or(0),
                rules = set.rules.len(),
                "rules reloaded"
            );
            on_change(set.rules.len());
        }
    }
}
