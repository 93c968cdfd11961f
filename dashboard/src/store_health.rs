//! The model of the store line and the warning banner (`app/store_health.rs`): how the store
//! stands (kind, keys held against the bound, evictions), from the `store` part of each levels
//! snapshot, and how fast it is evicting, from successive snapshots.
//!
//! The warnings are the backend's sentences for operators (e.g. Redis `maxmemory-policy
//! noeviction`: a spray of new keys would make every decision fail). They are shown as they come,
//! as text only.

use std::collections::VecDeque;

use crate::format::{per_second, short_number};
use crate::live_view::Tone;
use sluice_core::wire::{LevelsBody, StoreHealth};

/// The eviction rate is the evictions counted over about this long (snapshots come about twice
/// a second, so it spans about ten of them).
pub const RATE_WINDOW_MS: u64 = 5_000;

/// One snapshot's eviction counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    at_ms: u64,
    evictions: u64,
}

/// The eviction counters of the last [`RATE_WINDOW_MS`], enough to tell a rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictionRate {
    samples: VecDeque<Sample>,
}

impl EvictionRate {
    /// Takes the counter of a snapshot read at `at_ms`.
    ///
    /// A counter that went down (the backend restarted, or the page now talks to another
    /// replica) or a clock that went back starts the history again, rather than showing a
    /// negative or made-up rate. A second snapshot with the same time replaces the first.
    pub fn observe(&mut self, at_ms: u64, evictions: u64) {
        if let Some(last) = self.samples.back() {
            if at_ms < last.at_ms || evictions < last.evictions {
                self.samples.clear();
            } else if at_ms == last.at_ms {
                self.samples.pop_back();
            }
        }
        self.samples.push_back(Sample { at_ms, evictions });
        let since = at_ms.saturating_sub(RATE_WINDOW_MS);
        while self.samples.front().is_some_and(|s| s.at_ms < since) {
            self.samples.pop_front();
        }
    }

    /// Evictions per second over the samples held, or `None` before two snapshots in the window
    /// (the first one, or the first after the stream was away for longer than the window).
    pub fn per_second(&self) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        if last.at_ms <= first.at_ms {
            return None;
        }
        let seconds = (last.at_ms - first.at_ms) as f64 / 1000.0;
        Some((last.evictions - first.evictions) as f64 / seconds)
    }
}

/// What the store line and the banner show.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreView {
    /// Whether a snapshot said which store this is (nothing is drawn before that).
    pub known: bool,
    /// `"memory"`, `"redis"`, `"redis-cluster"`, as the backend names it.
    pub kind: String,
    /// `"memory"`, `"Redis"`, `"Redis Cluster"` (after the line's label, "Store").
    pub kind_text: String,
    /// The backend's warnings, in its order (untrusted text: rendered as text only).
    pub warnings: Vec<String>,
    /// Throttle keys held now (memory store).
    pub keys: Option<u64>,
    /// The most keys held before evicting (memory store).
    pub max_keys: Option<u64>,
    /// keys / max_keys, clamped to 0..=1 (the drawn width), when both are known.
    pub fill: Option<f64>,
    /// The fill bar's colour: the table filling up as a funnel does.
    pub tone: Tone,
    /// `"1234 / 5000 keys"`, `"1234 keys"`, or empty when the store does not count keys.
    pub keys_text: String,
    /// `"25 %"` when there is a bound, else empty.
    pub fill_text: String,
    /// Evictions in total, as the store counts them.
    pub evictions: u64,
    /// `"12 evicted"`.
    pub evictions_text: String,
    /// Evictions per second over the last [`RATE_WINDOW_MS`], once two snapshots are in.
    pub eviction_rate: Option<f64>,
    /// `"3.2/s"`, or `"–"` while unknown.
    pub eviction_rate_text: String,
    history: EvictionRate,
}

impl StoreView {
    /// The view after `body`, carrying the eviction history of `previous` (the view of the
    /// snapshot before, if any).
    pub fn next(previous: Option<&StoreView>, body: &LevelsBody) -> StoreView {
        let mut history = previous.map(|p| p.history.clone()).unwrap_or_default();
        let store = &body.store;
        // A snapshot without a time is the page's placeholder, not the backend's.
        if body.at_ms > 0 && !store.kind.is_empty() {
            history.observe(body.at_ms, store.evictions);
        }
        let eviction_rate = history.per_second();
        StoreView {
            known: !store.kind.is_empty(),
            kind: store.kind.clone(),
            kind_text: kind_text(&store.kind),
            warnings: store.warnings.clone(),
            keys: store.keys,
            max_keys: store.max_keys,
            fill: fill(store),
            tone: tone(store),
            keys_text: keys_text(store),
            fill_text: fill(store).map(percent).unwrap_or_default(),
            evictions: store.evictions,
            evictions_text: format!("{} evicted", short_number(store.evictions as f64)),
            eviction_rate,
            eviction_rate_text: eviction_rate.map_or_else(|| "–".to_owned(), per_second),
            history,
        }
    }
}

fn kind_text(kind: &str) -> String {
    match kind {
        "memory" => "memory".into(),
        "redis" => "Redis".into(),
        "redis-cluster" => "Redis Cluster".into(),
        other => other.into(),
    }
}

fn fill(store: &StoreHealth) -> Option<f64> {
    match (store.keys, store.max_keys) {
        (Some(keys), Some(max)) if max > 0 => Some((keys as f64 / max as f64).clamp(0.0, 1.0)),
        _ => None,
    }
}

fn tone(store: &StoreHealth) -> Tone {
    match (fill(store), store.keys, store.max_keys) {
        (Some(fill), Some(keys), Some(max)) => Tone::of(fill, max.saturating_sub(keys)),
        _ => Tone::Calm,
    }
}

fn keys_text(store: &StoreHealth) -> String {
    match (store.keys, store.max_keys) {
        (Some(keys), Some(max)) => format!(
            "{} / {} keys",
            short_number(keys as f64),
            short_number(max as f64)
        ),
        (Some(keys), None) => format!("{} keys", short_number(keys as f64)),
        _ => String::new(),
    }
}

/// `"0 %"`, `"<1 %"` (some, but under one), `"25 %"`, `"100 %"`.
fn percent(fill: f64) -> String {
    let pct = fill * 100.0;
    if pct > 0.0 && pct < 1.0 {
        "<1 %".into()
    } else if pct < 100.0 {
        format!("{} %", pct.floor().min(99.0))
    } else {
        "100 %".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(at_ms: u64, store: StoreHealth) -> LevelsBody {
        LevelsBody {
            at_ms,
            actions: vec![],
            store,
        }
    }

    fn memory(keys: u64, max_keys: u64, evictions: u64) -> StoreHealth {
        StoreHealth {
            kind: "memory".into(),
            warnings: vec![],
            keys: Some(keys),
            max_keys: Some(max_keys),
            evictions,
        }
    }

    /// Feeds the snapshots in order, as the page's memo does.
    fn after(snapshots: &[LevelsBody]) -> StoreView {
        snapshots
            .iter()
            .fold(None, |prev: Option<StoreView>, body| {
                Some(StoreView::next(prev.as_ref(), body))
            })
            .expect("at least one snapshot")
    }

    #[test]
    fn a_bounded_memory_store_shows_keys_against_its_bound() {
        let view = after(&[snapshot(1_000, memory(250, 1_000, 0))]);
        assert!(view.known);
        assert_eq!(view.kind_text, "memory");
        assert_eq!(view.keys_text, "250 / 1000 keys");
        assert_eq!(view.fill, Some(0.25));
        assert_eq!(view.fill_text, "25 %");
        assert_eq!(view.tone, Tone::Calm);
        assert_eq!(view.evictions_text, "0 evicted");
        assert!(view.warnings.is_empty());
    }

    #[test]
    fn a_full_table_is_red_and_its_percentages_never_round_to_full_early() {
        let full = after(&[snapshot(1_000, memory(1_000, 1_000, 7))]);
        assert_eq!(full.tone, Tone::Full);
        assert_eq!(full.fill_text, "100 %");
        let almost = after(&[snapshot(1_000, memory(999, 1_000, 0))]);
        assert_eq!(almost.fill_text, "99 %");
        assert_eq!(almost.tone, Tone::Hot);
        let some = after(&[snapshot(1_000, memory(3, 1_000, 0))]);
        assert_eq!(some.fill_text, "<1 %");
        let none = after(&[snapshot(1_000, memory(0, 1_000, 0))]);
        assert_eq!(none.fill_text, "0 %");
    }

    #[test]
    fn the_eviction_rate_comes_from_successive_snapshots() {
        let first = after(&[snapshot(10_000, memory(1_000, 1_000, 100))]);
        assert_eq!(first.eviction_rate, None, "one snapshot tells no rate");
        assert_eq!(first.eviction_rate_text, "–");
        // 500 ms later, 50 more: 100 per second.
        let second = StoreView::next(Some(&first), &snapshot(10_500, memory(1_000, 1_000, 150)));
        assert_eq!(second.eviction_rate, Some(100.0));
        assert_eq!(second.eviction_rate_text, "100/s");
        assert_eq!(second.evictions, 150);
        assert_eq!(second.evictions_text, "150 evicted");
    }

    #[test]
    fn the_rate_spans_the_window_and_falls_to_zero_when_evictions_stop() {
        // 20 per second for 10 s, then nothing for 6 s.
        let mut snapshots = vec![];
        for i in 0..=20u64 {
            snapshots.push(snapshot(
                1_000 + i * 500,
                memory(1_000, 1_000, 1_000 + i * 10),
            ));
        }
        let busy = after(&snapshots);
        assert_eq!(busy.eviction_rate, Some(20.0));
        for i in 1..=12u64 {
            snapshots.push(snapshot(11_000 + i * 500, memory(1_000, 1_000, 1_200)));
        }
        let quiet = after(&snapshots);
        assert_eq!(quiet.eviction_rate, Some(0.0), "only the last 5 s count");
        assert_eq!(quiet.eviction_rate_text, "0/s");
        assert_eq!(quiet.evictions_text, "1200 evicted");
    }

    #[test]
    fn a_counter_that_went_back_starts_over_instead_of_going_negative() {
        // The backend restarted (or another replica answers): its counter starts again.
        let before = after(&[
            snapshot(1_000, memory(10, 100, 500)),
            snapshot(1_500, memory(10, 100, 600)),
        ]);
        assert_eq!(before.eviction_rate, Some(200.0));
        let restarted = StoreView::next(Some(&before), &snapshot(2_000, memory(10, 100, 3)));
        assert_eq!(restarted.eviction_rate, None);
        let next = StoreView::next(Some(&restarted), &snapshot(3_000, memory(10, 100, 13)));
        assert_eq!(next.eviction_rate, Some(10.0));
        // A clock that went back does the same.
        let back = StoreView::next(Some(&next), &snapshot(2_500, memory(10, 100, 20)));
        assert_eq!(back.eviction_rate, None);
    }

    #[test]
    fn a_repeated_snapshot_time_replaces_the_sample_and_a_gap_forgets_the_old_one() {
        let a = after(&[
            snapshot(1_000, memory(1, 10, 0)),
            snapshot(2_000, memory(1, 10, 10)),
            snapshot(2_000, memory(1, 10, 12)),
        ]);
        assert_eq!(a.eviction_rate, Some(12.0));
        // The stream was away for a minute: no rate is made up from a minute-old sample.
        let later = StoreView::next(Some(&a), &snapshot(62_000, memory(1, 10, 600)));
        assert_eq!(later.eviction_rate, None);
        assert_eq!(later.evictions, 600);
    }

    #[test]
    fn redis_shows_its_warnings_and_its_own_eviction_count_without_a_key_bound() {
        let warning = "Redis maxmemory-policy is \"noeviction\": a spray of new keys makes every decision fail".to_owned();
        let view = after(&[snapshot(
            1_000,
            StoreHealth {
                kind: "redis".into(),
                warnings: vec![warning.clone()],
                keys: None,
                max_keys: None,
                evictions: 42,
            },
        )]);
        assert_eq!(view.kind_text, "Redis");
        assert_eq!(
            view.warnings,
            [warning],
            "kept exactly as sent, quotes and all"
        );
        assert_eq!(view.keys_text, "");
        assert_eq!(view.fill, None);
        assert_eq!(view.fill_text, "");
        assert_eq!(view.tone, Tone::Calm);
        assert_eq!(view.evictions_text, "42 evicted");
    }

    #[test]
    fn keys_without_a_bound_are_counted_without_a_bar() {
        let mut store = memory(12_345, 0, 0);
        store.max_keys = None;
        let view = after(&[snapshot(1_000, store)]);
        assert_eq!(view.keys_text, "12.3k keys");
        assert_eq!(view.fill, None);
        let mut zero = memory(0, 0, 0);
        zero.max_keys = Some(0);
        assert_eq!(
            after(&[snapshot(1_000, zero)]).fill,
            None,
            "no division by zero"
        );
    }

    #[test]
    fn nothing_is_known_before_the_first_snapshot() {
        let view = StoreView::next(None, &LevelsBody::default());
        assert!(!view.known);
        assert!(view.warnings.is_empty());
        assert_eq!(view.eviction_rate, None);
        // The placeholder adds no sample: the first real snapshot still tells no rate.
        let first = StoreView::next(Some(&view), &snapshot(5_000, memory(1, 10, 9)));
        assert_eq!(first.eviction_rate, None);
    }

    #[test]
    fn a_snapshot_as_the_backend_sends_it_is_read() {
        let body: LevelsBody = serde_json::from_str(
            r#"{"at_ms": 7, "actions": [], "store": {"kind": "memory", "warnings": [],
               "keys": 64, "max_keys": 64, "evictions": 130}}"#,
        )
        .unwrap();
        let view = after(&[body]);
        assert_eq!(view.keys_text, "64 / 64 keys");
        assert_eq!(view.evictions, 130);
        assert_eq!(view.tone, Tone::Full);
        // An older backend sends no `store`: nothing is drawn, nothing fails.
        let old: LevelsBody = serde_json::from_str(r#"{"at_ms": 7, "actions": []}"#).unwrap();
        assert!(!after(&[old]).known);
    }
}
