//! `POST /v1/report`: what only the filter knows (leased admissions, cached denials, failed
//! callouts) added to the Prometheus counters and the history, and a warning in the log while
//! requests pass unchecked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_core::wire::{ActionCounts, FilterReport};
use sluice_core::FieldError;

use super::pending::HistoryPending;
use super::{step_start, HistoryRecord, Tally};
use crate::metrics::Metrics;
use crate::rules::RuleSet;

/// The `action` label of counts reported for an action without a rule on this replica (no action
/// can be named so: parentheses are not allowed in action names). Such counts reach the metrics,
/// never the history, so a filter configured for actions nobody defined cannot grow either.
pub const UNKNOWN_ACTION_LABEL: &str = "(unknown)";
/// Least time between two "passed unchecked" warnings of one action.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Entries of the warning limiter beyond which old ones are forgotten.
const WARN_KEEP: usize = 1024;

#[derive(Debug, Default)]
struct Warned {
    last: Option<Instant>,
    /// Requests passed unchecked since the last line (included in the next one).
    pending: u64,
}

/// Rate-limits the "passed unchecked" warning to one line per action per [`WARN_EVERY`].
#[derive(Debug, Default)]
pub struct UncheckedWarnings {
    by_action: Mutex<HashMap<String, Warned>>,
}

impl UncheckedWarnings {
    /// A limiter that has warned about nothing yet.
    pub fn new() -> UncheckedWarnings {
        UncheckedWarnings::default()
    }

    /// Notes `n` requests of `label` passed unchecked at `now`; returns the count to log (those
    /// since the last line) when a line is due, `None` while within [`WARN_EVERY`] of the last.
    pub fn note(&self, label: &str, n: u64, now: Instant) -> Option<u64> {
        let mut map = self
            .by_action
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if map.len() >= WARN_KEEP && !map.contains_key(label) {
            map.retain(|_, w| w.last.is_some_and(|at| now.duration_since(at) < WARN_EVERY));
        }
        let warned = map.entry(label.to_owned()).or_default();
        warned.pending = warned.pending.saturating_add(n);
        let due = warned
            .last
            .is_none_or(|at| now.duration_since(at) >= WARN_EVERY);
        if !due {
            return None;
        }
        warned.last = Some(now);
        Some(std::mem::take(&mut warned.pending))
    }
}

/// What one report held, by whether its actions have a rule here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ingested {
    /// Entries for actions with a rule (counted under their name and in the history).
    pub known: usize,
    /// Entries for actions without one (counted under [`UNKNOWN_ACTION_LABEL`] only).
    pub unknown: usize,
}

fn tally(counts: &ActionCounts) -> Tally {
    Tally {
        leased: counts.leased,
        cached_denied: counts.cached_denied,
        passed_unchecked: counts.passed_unchecked,
        failed: counts.failed_timeout.saturating_add(counts.failed_error),
        ..Tally::default()
    }
}

/// Validates `report` (the refusal names the field) and adds it to the metrics and to the pending
/// history at `now_ms`; warns (rate-limited) when requests passed unchecked.
pub fn ingest(
    report: &FilterReport,
    rules: &RuleSet,
    metrics: &Metrics,
    pending: &HistoryPending,
    warnings: &UncheckedWarnings,
    now_ms: u64,
    now: Instant,
) -> Result<Ingested, FieldError> {
    let entries = report.validate()?;
    let mut ingested = Ingested::default();
    for (action, counts) in entries {
        let known = rules.rules.contains_key(action.as_str());
        let label = if known {
            ingested.known += 1;
            action.as_str()
        } else {
            ingested.unknown += 1;
            UNKNOWN_ACTION_LABEL
        };
        metrics.filter_counts(label, counts);
        let tally = tally(counts);
        if known
            && !tally.is_zero()
            && !pending.add(HistoryRecord {
                action: action.clone(),
                step_ms: step_start(now_ms),
                tally,
                last_seen_ms: now_ms,
            })
        {
            metrics.activity_dropped(1);
        }
        if counts.passed_unchecked > 0 {
            if let Some(n) = warnings.note(label, counts.passed_unchecked, now) {
                tracing::warn!(
                    action = label,
                    passed_unchecked = n,
                    failed_timeout = counts.failed_timeout,
                    failed_error = counts.failed_error,
                    "requests passed unchecked: the filter's callouts to the backend failed (timed out or errored) and its failure mode let them through; is the backend slow, overloaded or unreachable from Envoy?"
                );
            }
        }
    }
    Ok(ingested)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_action_per_ten_seconds_carrying_what_was_held_back() {
        let w = UncheckedWarnings::new();
        let t0 = Instant::now();
        assert_eq!(w.note("a", 3, t0), Some(3));
        assert_eq!(w.note("a", 2, t0 + Duration::from_secs(1)), None);
        assert_eq!(w.note("b", 1, t0 + Duration::from_secs(1)), Some(1));
        assert_eq!(w.note("a", 4, t0 + Duration::from_secs(9)), None);
        assert_eq!(w.note("a", 1, t0 + WARN_EVERY), Some(7));
    }

    #[test]
    fn the_limiter_forgets_old_actions_beyond_its_bound() {
        let w = UncheckedWarnings::new();
        let t0 = Instant::now();
        for i in 0..WARN_KEEP {
            w.note(&format!("a{i}"), 1, t0);
        }
        assert_eq!(w.note("late", 1, t0 + WARN_EVERY), Some(1));
        let held = w.by_action.lock().map(|m| m.len()).unwrap_or(0);
        assert!(held <= 2, "{held}");
    }
}
