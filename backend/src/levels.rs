//! Live funnel levels: the most recently active keys of each action, peeked as of now (levels
//! decay with time), and the snapshot pushed to SSE listeners about twice a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::wire::{ActionLevels, KeyLevel, LevelsBody};
use sluice_core::Rule;
use tokio::sync::watch;

use crate::activity::ActivityBook;
use crate::clock::now_ms;
use crate::rules::RuleCache;
use crate::store::{Store, StoreError};

/// Keys per action when no `limit` is given.
pub const DEFAULT_LIMIT: usize = 20;
/// Largest `limit` accepted.
pub const MAX_LIMIT: usize = 1000;

async fn action_levels(
    store: &dyn Store,
    book: &ActivityBook,
    rule: &Rule,
    limit: usize,
) -> Result<ActionLevels, StoreError> {
    let recent = store.recent_activity(rule.action(), limit).await?;
    let keys: Vec<String> = recent.iter().map(|a| a.key.clone()).collect();
    let decisions = if keys.is_empty() {
        Vec::new()
    } else {
        store.peek_many(rule, &keys, None).await?
    };
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

/// Levels of the given rules (all cached rules when `only` is `None`), as of now.
pub async fn snapshot(
    store: &dyn Store,
    book: &ActivityBook,
    rules: &[Rule],
    limit: usize,
) -> Result<LevelsBody, StoreError> {
    let at_ms = now_ms();
    let futures = rules.iter().map(|r| action_levels(store, book, r, limit));
    let actions = futures::future::try_join_all(futures).await?;
    Ok(LevelsBody {
        at_ms,
        actions,
        store: store.health(),
    })
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
    pub async fn run(
        &self,
        store: Arc<dyn Store>,
        book: Arc<ActivityBook>,
        rules: Arc<RuleCache>,
        every: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if self.tx.receiver_count() == 0 {
                continue;
            }
            let set = rules.current();
            let list: Vec<Rule> = set.rules.values().cloned().collect();
            match snapshot(store.as_ref(), &book, &list, DEFAULT_LIMIT).await {
                Ok(body) => match serde_json::to_string(&body) {
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
