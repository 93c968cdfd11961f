//! Live-activity bookkeeping: the decision path adds to an in-process batch (no store round trip
//! per decision); a task flushes the batch to the store every ≤ 250 ms, so the dashboard sees
//! traffic through any replica within a second. Per-action allowed/denied rates are kept here too.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_core::Action;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::store::{Activity, Store};

/// Most distinct (action, key) pairs held in one batch; beyond it new keys are counted in the
/// rates but not listed (a flood of distinct keys must not grow memory without bound).
pub const MAX_BATCH_KEYS: usize = 10_000;

/// How far back the per-action rates look.
pub const RATE_SPAN: Duration = Duration::from_secs(2);

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    allowed: u64,
    denied: u64,
    last_seen_ms: u64,
}

#[derive(Debug)]
struct ActionBatch {
    action: Action,
    totals: Counts,
    keys: HashMap<String, Counts>,
}

#[derive(Debug, Default)]
struct Pending {
    actions: HashMap<String, ActionBatch>,
    keys: usize,
    dropped: u64,
}

/// Requests per second of one action over the last [`RATE_SPAN`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Allowed per second.
    pub allowed_per_s: f64,
    /// Denied (or shadow-denied) per second.
    pub denied_per_s: f64,
}

#[derive(Debug, Default)]
struct History {
    /// (when flushed, allowed, denied) per action, oldest first.
    samples: HashMap<String, VecDeque<(Instant, u64, u64)>>,
}

/// The batch and the rates.
#[derive(Debug, Default)]
pub struct ActivityBook {
    pending: Mutex<Pending>,
    history: Mutex<History>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ActivityBook {
    /// An empty book.
    pub fn new() -> ActivityBook {
        ActivityBook::default()
    }

    /// Adds one decision to the batch (hot path: one short lock, no allocation for a known key).
    pub fn record(&self, action: &Action, key: &str, allowed: bool, now_ms: u64) {
        let mut pending = lock(&self.pending);
        let pending = &mut *pending;
        let batch = match pending.actions.get_mut(action.as_str()) {
            Some(b) => b,
            None => pending
                .actions
                .entry(action.as_str().to_owned())
                .or_insert_with(|| ActionBatch {
                    action: action.clone(),
                    totals: Counts::default(),
                    keys: HashMap::new(),
                }),
        };
        bump(&mut batch.totals, allowed, now_ms);
        if let Some(counts) = batch.keys.get_mut(key) {
            bump(counts, allowed, now_ms);
        } else if pending.keys < MAX_BATCH_KEYS {
            pending.keys += 1;
            let mut counts = Counts::default();
            bump(&mut counts, allowed, now_ms);
            batch.keys.insert(key.to_owned(), counts);
        } else {
            pending.dropped += 1;
        }
    }

    /// Takes the batch: the per-key records for the store, and the records dropped for space.
    /// Folds the per-action totals into the rate history.
    pub fn take(&self, now: Instant) -> (Vec<Activity>, u64) {
        let taken = std::mem::take(&mut *lock(&self.pending));
        let mut out = Vec::with_capacity(taken.keys);
        let mut history = lock(&self.history);
        for (name, batch) in taken.actions {
            history.samples.entry(name).or_default().push_back((
                now,
                batch.totals.allowed,
                batch.totals.denied,
            ));
            for (key, c) in batch.keys {
                out.push(Activity {
                    action: batch.action.clone(),
                    key,
                    last_seen_ms: c.last_seen_ms,
                    allowed: c.allowed,
                    denied: c.denied,
                });
            }
        }
        history.samples.retain(|_, samples| {
            while samples
                .front()
                .is_some_and(|(at, _, _)| now.duration_since(*at) > RATE_SPAN)
            {
                samples.pop_front();
            }
            !samples.is_empty()
        });
        (out, taken.dropped)
    }

    /// This replica's rates for an action over the last [`RATE_SPAN`], as of the last flush.
    pub fn rates(&self, action: &str, now: Instant) -> Rates {
        let history = lock(&self.history);
        let Some(samples) = history.samples.get(action) else {
            return Rates::default();
        };
        let (mut allowed, mut denied) = (0u64, 0u64);
        for (at, a, d) in samples {
            if now.duration_since(*at) <= RATE_SPAN {
                allowed += a;
                denied += d;
            }
        }
        let secs = RATE_SPAN.as_secs_f64();
        Rates {
            allowed_per_s: allowed as f64 / secs,
            denied_per_s: denied as f64 / secs,
        }
    }
}

fn bump(c: &mut Counts, allowed: bool, now_ms: u64) {
    if allowed {
        c.allowed += 1;
    } else {
        c.denied += 1;
    }
    c.last_seen_ms = c.last_seen_ms.max(now_ms);
}

/// Flushes the batch every `every` until `stop`, then once more.
pub async fn flush_loop(
    book: Arc<ActivityBook>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        let (batch, dropped) = book.take(Instant::now());
        metrics.activity_dropped(dropped);
        if !batch.is_empty() {
            match store.record_activity(&batch).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("live activity flushes resumed");
                }
                Ok(()) => {}
                Err(e) => {
                    metrics.store_error(&e);
                    metrics.activity_dropped(batch.len() as u64);
                    if !failing {
                        failing = true;
                        tracing::warn!(error = %e, "cannot flush live activity to the store; the dashboard's levels will lag until it is back");
                    }
                }
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(name: &str) -> Action {
        Action::parse(name).expect("valid action")
    }

    #[test]
    fn a_batch_sums_per_key_and_empties_on_take() {
        let book = ActivityBook::new();
        let a = action("post");
        book.record(&a, "u1", true, 10);
        book.record(&a, "u1", false, 12);
        book.record(&a, "u2", true, 11);
        let (mut batch, dropped) = book.take(Instant::now());
        batch.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(dropped, 0);
        assert_eq!(batch.len(), 2);
        assert_eq!(
            (batch[0].allowed, batch[0].denied, batch[0].last_seen_ms),
            (1, 1, 12)
        );
        assert_eq!((batch[1].allowed, batch[1].denied), (1, 0));
        assert!(book.take(Instant::now()).0.is_empty());
    }

    #[test]
    fn rates_count_the_last_span_only() {
        let book = ActivityBook::new();
        let a = action("post");
        let start = Instant::now();
        for _ in 0..4 {
            book.record(&a, "k", true, 0);
        }
        book.record(&a, "k", false, 0);
        let _ = book.take(start);
        let r = book.rates("post", start);
        assert_eq!(
            r,
            Rates {
                allowed_per_s: 2.0,
                denied_per_s: 0.5
            }
        );
        let later = start + RATE_SPAN + Duration::from_millis(1);
        assert_eq!(book.rates("post", later), Rates::default());
    }

    #[test]
    fn a_flood_of_distinct_keys_is_capped() {
        let book = ActivityBook::new();
        let a = action("post");
        for i in 0..(MAX_BATCH_KEYS + 5) {
            book.record(&a, &format!("k{i}"), true, 0);
        }
        let (batch, dropped) = book.take(Instant::now());
        assert_eq!(batch.len(), MAX_BATCH_KEYS);
        assert_eq!(dropped, 5);
    }
}
