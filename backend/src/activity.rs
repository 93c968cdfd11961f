//! Live-activity bookkeeping: the decision path adds to an in-process batch (no store round trip
//! per decision); a task flushes the batch to the store every ≤ 250 ms, so the dashboard sees
//! traffic through any replica within a second. Per-action allowed/denied rates are kept here too.
//!
//! The same flush writes the history ([`crate::history`]): each action's allowed/denied counts of
//! the batch (shadow-mode would-denials counted as allowed, as Envoy let them through), the keys
//! it denied (for top denied), and the filter reports received since the last flush. A history
//! write the store refuses is kept and retried with the next flush (bounded).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_core::{Action, Mode};
use tokio::sync::watch;

use crate::clock::now_ms;
use crate::history::attempts::Attempts;
use crate::history::edge::Edge;
use crate::history::pending::HistoryPending;
use crate::history::report::UncheckedWarnings;
use crate::history::{step_start, DeniedRecord, HistoryRecord, Tally};
use crate::metrics::Metrics;
use crate::rules::RuleCache;
use crate::store::{Activity, ActivityStore, HistoryStore, StoreError};
use crate::touched::TouchedPending;

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
    /// (step start, allowed, denied) per history step the batch's decisions fell in (one, or
    /// two across a step's end), so each is counted in its own step and a withdrawal
    /// ([`crate::history::edge`]) takes it back from there.
    steps: Vec<(u64, u64, u64)>,
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
    /// History counts waiting for the next flush (filter reports, refused writes).
    pub steps: HistoryPending,
    /// The "passed unchecked" warning limiter of filter reports.
    pub unchecked: UncheckedWarnings,
    /// Decisions recorded with their caller's id, until a report withdraws them.
    pub edge: Edge,
    /// Report attempts whose store answer was lost (`history::attempts`).
    pub attempts: Attempts,
    /// Actions touched without a record in the batch (`crate::touched`).
    pub touched: TouchedPending,
}

/// What one flush writes to the store.
#[derive(Debug, Default)]
pub struct Flush {
    /// Per-key live activity.
    pub activity: Vec<Activity>,
    /// Records dropped for space in the batch.
    pub dropped: u64,
    /// History counts per (action, step), decisions and filter reports together.
    pub history: Vec<HistoryRecord>,
    /// Backend denials per key under enforced rules (for top denied).
    pub denied: Vec<DeniedRecord>,
    /// Every action the flush writes anything of, and the touches pending (`crate::touched`).
    pub touched: BTreeSet<Action>,
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
                    steps: Vec::new(),
                    keys: HashMap::new(),
                }),
        };
        bump(&mut batch.totals, allowed, now_ms);
        let step = step_start(now_ms);
        let (a, d) = (u64::from(allowed), u64::from(!allowed));
        match batch.steps.iter_mut().rev().find(|(at, _, _)| *at == step) {
            Some((_, allowed_n, denied_n)) => {
                *allowed_n += a;
                *denied_n += d;
            }
            None => batch.steps.push((step, a, d)),
        }
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

    /// The actions this replica has something of that its next flush writes (decisions,
    /// history counts, touches): not yet in the store's index of touched actions, so the views
    /// of what is active read them too, and a decision shows at once in this replica's views.
    pub fn unflushed_actions(&self) -> BTreeSet<Action> {
        let mut actions: BTreeSet<Action> = lock(&self.pending)
            .actions
            .values()
            .map(|batch| batch.action.clone())
            .collect();
        actions.extend(self.steps.actions());
        actions.extend(self.touched.actions());
        actions
    }

    /// Takes the batch: the per-key records for the store, and the records dropped for space.
    /// Folds the per-action totals into the rate history (the history counts of the batch stay
    /// pending: see [`ActivityBook::take_flush`]).
    pub fn take(&self, now: Instant) -> (Vec<Activity>, u64) {
        let flush = self.take_flush(now, |_| false);
        self.touched.flush_ended(&flush.touched, false);
        for record in flush.history {
            self.steps.add(record);
        }
        (flush.activity, flush.dropped)
    }

    /// Takes everything a flush writes: the batch's per-key records, its per-action history
    /// counts (each decision in its own step; denials of actions for which
    /// `shadow` is true count as allowed, as Envoy let them through), the keys denied under
    /// enforced rules, and the pending history (filter reports). Folds the per-action totals
    /// into the rates.
    pub fn take_flush(&self, now: Instant, shadow: impl Fn(&str) -> bool) -> Flush {
        let taken = std::mem::take(&mut *lock(&self.pending));
        let mut out = Vec::with_capacity(taken.keys);
        let mut denied = Vec::new();
        let mut history = lock(&self.history);
        for (name, batch) in taken.actions {
            history.samples.entry(name.clone()).or_default().push_back((
                now,
                batch.totals.allowed,
                batch.totals.denied,
            ));
            let shadowed = shadow(&name);
            for (step_ms, allowed, denials) in batch.steps {
                let (allowed, refused) = if shadowed {
                    (allowed + denials, 0)
                } else {
                    (allowed, denials)
                };
                self.steps.add(HistoryRecord {
                    action: batch.action.clone(),
                    step_ms,
                    tally: Tally {
                        allowed,
                        denied: refused,
                        ..Tally::default()
                    },
                    withdrawn: Tally::default(),
                    last_seen_ms: batch.totals.last_seen_ms,
                });
            }
            for (key, c) in batch.keys {
                if c.denied > 0 && !shadowed {
                    denied.push(DeniedRecord {
                        action: batch.action.clone(),
                        key: key.clone(),
                        at_ms: c.last_seen_ms,
                        denied: c.denied,
                    });
                }
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
        let history = self.steps.take();
        let touched = self.touched.begin_flush(
            out.iter()
                .map(|a| a.action.clone())
                .chain(history.iter().map(|h| h.action.clone())),
        );
        Flush {
            activity: out,
            dropped: taken.dropped,
            history,
            denied,
            touched,
        }
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

/// Writes one flush: the live activity, the history and the denied keys, concurrently. A history
/// write the store refuses goes back to [`ActivityBook::steps`] for the next flush (steps older
/// than the history span are dropped and counted); refused activity and denied keys are dropped
/// and counted in `sluice_activity_dropped_total`. Returns the first error.
pub async fn write_flush<S: ActivityStore + HistoryStore + ?Sized>(
    book: &ActivityBook,
    store: &S,
    metrics: &Metrics,
    flush: Flush,
    now_ms: u64,
) -> Result<(), StoreError> {
    metrics.activity_dropped(flush.dropped);
    let activity = async {
        if flush.activity.is_empty() {
            return Ok(());
        }
        store
            .record_activity(&flush.activity)
            .await
            .inspect_err(|_| {
                metrics.activity_dropped(flush.activity.len() as u64);
            })
    };
    let history = async {
        if flush.history.is_empty() {
            return Ok(());
        }
        let result = store.record_history(&flush.history).await;
        if result.is_err() {
            metrics.activity_dropped(book.steps.put_back(flush.history.clone(), now_ms));
        }
        result
    };
    let denied = async {
        if flush.denied.is_empty() {
            return Ok(());
        }
        store.record_denied(&flush.denied).await.inspect_err(|_| {
            metrics.activity_dropped(flush.denied.len() as u64);
        })
    };
    let touched = async {
        if flush.touched.is_empty() {
            return Ok(());
        }
        let actions: Vec<Action> = flush.touched.iter().cloned().collect();
        let result = store.touch_actions(&actions, now_ms).await;
        book.touched.flush_ended(&flush.touched, result.is_ok());
        result
    };
    let (a, h, d, t) = futures::join!(activity, history, denied, touched);
    for e in [&a, &h, &d, &t]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
    {
        metrics.store_error(e);
    }
    a.and(h).and(d).and(t)
}

/// Flushes the batch every `every` until `stop`, then once more. `rules` says which actions are
/// in shadow mode (their denials count as allowed in the history).
pub async fn flush_loop<S: ActivityStore + HistoryStore + ?Sized>(
    book: Arc<ActivityBook>,
    store: Arc<S>,
    metrics: Arc<Metrics>,
    rules: Arc<RuleCache>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = crate::clock::ticker(every);
    let mut failing = false;
    loop {
        let stopping = tokio::select! {
            _ = ticker.tick() => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        let set = rules.current();
        let flush = book.take_flush(Instant::now(), |action| {
            set.rules
                .get(action)
                .is_some_and(|r| r.mode() == Mode::Shadow)
        });
        match write_flush(&book, store.as_ref(), &metrics, flush, now_ms()).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("live activity and history flushes resumed");
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    failing = true;
                    tracing::warn!(error = %e, "cannot flush live activity and history to the store; the dashboard's levels and history will lag until it is back (history is kept and retried for up to an hour)");
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
    use crate::test_support::action;

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
    fn a_flush_carries_history_and_denied_keys_and_shadow_denials_count_as_allowed() {
        let book = ActivityBook::new();
        let (post, dry) = (action("post"), action("dry"));
        book.record(&post, "alice", true, 1_700_000_012_000);
        book.record(&post, "mallory", false, 1_700_000_012_100);
        book.record(&post, "mallory", false, 1_700_000_012_200);
        book.record(&dry, "bob", false, 1_700_000_012_300);
        book.steps.add(HistoryRecord {
            action: post.clone(),
            step_ms: 1_700_000_010_000,
            tally: Tally {
                cached_denied: 7,
                ..Tally::default()
            },
            withdrawn: Tally::default(),
            last_seen_ms: 1_700_000_011_000,
        });
        let mut flush = book.take_flush(Instant::now(), |a| a == "dry");
        flush.history.sort_by(|a, b| a.action.cmp(&b.action));
        assert_eq!(flush.history.len(), 2);
        let (d, p) = (&flush.history[0], &flush.history[1]);
        assert_eq!(
            (d.action.as_str(), d.tally.allowed, d.tally.denied),
            ("dry", 1, 0)
        );
        assert_eq!(
            (
                p.step_ms,
                p.tally.allowed,
                p.tally.denied,
                p.tally.cached_denied
            ),
            (1_700_000_010_000, 1, 2, 7)
        );
        assert_eq!(p.last_seen_ms, 1_700_000_012_200);
        assert_eq!(
            flush.denied,
            vec![DeniedRecord {
                action: post,
                key: "mallory".into(),
                at_ms: 1_700_000_012_200,
                denied: 2
            }]
        );
        assert!(book
            .take_flush(Instant::now(), |_| false)
            .history
            .is_empty());
    }

    #[tokio::test]
    async fn a_refused_history_write_is_retried_with_the_next_flush() {
        let book = ActivityBook::new();
        let store = crate::store::memory::MemoryStore::with_max_keys(16);
        let metrics = Metrics::new();
        let now = 1_700_000_012_000;
        book.record(&action("post"), "k", true, now);
        let mut flush = book.take_flush(Instant::now(), |_| false);
        // Played refusal: put back as write_flush does on an error.
        let dropped = book.steps.put_back(std::mem::take(&mut flush.history), now);
        assert_eq!(dropped, 0);
        let flush = book.take_flush(Instant::now(), |_| false);
        assert_eq!(flush.history.len(), 1);
        write_flush(&book, &store, &metrics, flush, now)
            .await
            .expect("memory");
        let h = store
            .read_history(&action("post"), 1_700_000_010_000, 1, now)
            .await
            .expect("memory");
        assert_eq!(h.steps[0].1.allowed, 1);
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
