//! Live funnel levels: the most recently active keys of each action, peeked as of now (levels
//! decay with time), and the snapshot pushed to SSE listeners about twice a second (of the
//! active actions only: `GET /v1/levels?scope=active`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::wire::{ActionLevels, KeyLevel, LevelsBody};
use sluice_core::{Decision, Rule};
use tokio::sync::watch;

use crate::activity::ActivityBook;
use crate::clock::now_ms;
use crate::rules::{Overrides, RuleCache};
use crate::store::{Activity, ActivityStore, DecisionStore, HealthStore, StoreError};
use crate::touched_view::TouchedSince;

/// Keys per action when no `limit` is given.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest `limit` accepted.
pub const MAX_LIMIT: usize = 1000;

async fn action_levels<S: ActivityStore + DecisionStore + ?Sized>(
    store: &S,
    book: &ActivityBook,
    rule: &Rule,
    overrides: &Overrides,
    limit: usize,
) -> Result<ActionLevels, StoreError> {
    let recent = store.recent_activity(rule.action(), limit).await?;
    let decisions = peek_under_their_rules(store, rule, overrides, &recent).await?;
    let rates = book.rates(rule.action().as_str(), Instant::now());
    Ok(ActionLevels {
        action: rule.action().as_str().to_owned(),
        algorithm: rule.algorithm(),
        capacity: rule.capacity(),
        allowed_per_s: rates.allowed_per_s,
        denied_per_s: rates.denied_per_s,
        keys: recent
            .into_iter()
            .zip(decisions)
            .map(|(a, d)| KeyLevel {
                key: a.key,
                level: d.level,
                capacity: d.capacity,
                remaining: d.remaining,
                last_seen_ms: a.last_seen_ms,
            })
            .collect(),
    })
}

/// Peeks each recent key under the rule in force for it: the action's rule for most, in one
/// batch, and a key's override (a different funnel, maybe another algorithm) one key at a time.
async fn peek_under_their_rules<S: DecisionStore + ?Sized>(
    store: &S,
    rule: &Rule,
    overrides: &Overrides,
    recent: &[Activity],
) -> Result<Vec<Decision>, StoreError> {
    let special = overrides.get(rule.action().as_str());
    let override_of = |key: &str| special.and_then(|by_key| by_key.get(key));
    let plain: Vec<String> = recent
        .iter()
        .filter(|a| override_of(&a.key).is_none())
        .map(|a| a.key.clone())
        .collect();
    let mut plain_decisions = if plain.is_empty() {
        Vec::new()
    } else {
        store.peek_many(rule, &plain).await?
    }
    .into_iter();
    let mut decisions = Vec::with_capacity(recent.len());
    for a in recent {
        let decision = match override_of(&a.key) {
            Some(own) => store
                .peek_many(own, std::slice::from_ref(&a.key))
                .await?
                .into_iter()
                .next(),
            None => plain_decisions.next(),
        };
        match decision {
            Some(d) => decisions.push(d),
            None => {
                return Err(StoreError::Corrupt(
                    "a peek answered fewer keys than asked".into(),
                ))
            }
        }
    }
    Ok(decisions)
}

/// Levels of the given rules, as of now; keys with an override are read under it.
pub async fn snapshot<S: ActivityStore + DecisionStore + HealthStore + ?Sized>(
    store: &S,
    book: &ActivityBook,
    rules: &[Rule],
    overrides: &Overrides,
    limit: usize,
) -> Result<LevelsBody, StoreError> {
    let at_ms = now_ms();
    let reads = rules
        .iter()
        .map(|r| action_levels(store, book, r, overrides, limit))
        .collect();
    let actions = crate::fanout::per_rule(reads).await?;
    Ok(LevelsBody {
        at_ms,
        actions,
        store: store.health(),
    })
}

/// What the SSE `levels` event carries (`GET /v1/levels?scope=active`): with thousands of rules,
/// every idle action twice a second is megabytes that no page shows.
fn active_only(mut body: LevelsBody) -> LevelsBody {
    body.actions.retain(|a| a.is_active());
    body
}

/// The latest level snapshot as SSE data (JSON text), computed only while someone listens.
pub struct LevelsHub {
    tx: watch::Sender<Option<Arc<str>>>,
}

impl LevelsHub {
    /// A hub with no snapshot yet.
    pub fn new() -> LevelsHub {
        let (tx, _) = watch::channel(None);
        LevelsHub { tx }
    }

    /// Listens for snapshots.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<str>>> {
        self.tx.subscribe()
    }

    /// Recomputes and publishes a snapshot every `every` while there is a listener, until `stop`.
    pub async fn run<S: ActivityStore + DecisionStore + HealthStore + ?Sized>(
        &self,
        store: Arc<S>,
        book: Arc<ActivityBook>,
        rules: Arc<RuleCache>,
        every: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut ticker = crate::clock::ticker(every);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if self.tx.receiver_count() == 0 {
                continue;
            }
            let set = rules.current();
            let list: Vec<Rule> = set.rules.values().map(|r| Rule::clone(r)).collect();
            let (since, also) = (TouchedSince::Ever, BTreeSet::new());
            let active = async {
                let list =
                    crate::touched_view::narrow(store.as_ref(), &book, list, since, &also).await?;
                snapshot(store.as_ref(), &book, &list, &set.overrides, DEFAULT_LIMIT).await
            };
            match active.await {
                Ok(body) => match serde_json::to_string(&active_only(body)) {
                    Ok(text) => {
                        self.tx.send_replace(Some(Arc::from(text)));
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot encode a level snapshot"),
                },
                Err(e) => {
                    tracing::debug!(error = %e, "level snapshot failed; SSE listeners get the next one")
                }
            }
        }
    }
}

impl Default for LevelsHub {
    fn default() -> LevelsHub {
        LevelsHub::new()
    }
}
