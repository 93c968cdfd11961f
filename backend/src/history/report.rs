//! `POST /v1/report`: what only the filter knows (leased admissions, cached denials, failed
//! callouts) added to the Prometheus counters and the history, once per report however often
//! the filter had to send it, and a warning in the log while requests pass unchecked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_core::wire::{ActionCounts, FilterReport};
use sluice_core::{FieldError, Mode};

use super::attempts::{Attempts, Ended};
use super::edge::{Decided, Edge};
use super::marks::ReportApplied;
use super::pending::HistoryPending;
use super::{step_start, HistoryRecord, ReportMark, Tally};
use crate::deadline::stall;
use crate::metrics::{Metrics, Outcome};
use crate::rules::RuleSet;
use crate::store::{HistoryStore, StoreError};
use crate::touched::TouchedPending;

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
    /// Entries already applied from an earlier copy of the report (counted nowhere now).
    pub copies: usize,
    /// Decisions withdrawn: the report named them as given up on.
    pub withdrawn: usize,
}

/// Withdraws decisions whose caller gave up on them ([`super::edge`]): their count comes out of
/// the history step they were counted in (with the next flush), they are counted in
/// `sluice_decisions_withdrawn_total`, and an allowed one's debit as a late debit.
fn withdraw(decided: Vec<Decided>, sinks: Sinks<'_>) {
    if decided.is_empty() {
        return;
    }
    for d in &decided {
        let outcome = Outcome::of(d.allowed, d.mode);
        // The history counts a shadow rule's would-denial as allowed (Envoy let it through).
        let back = if d.allowed || d.mode == Mode::Shadow {
            Tally {
                allowed: 1,
                ..Tally::default()
            }
        } else {
            Tally {
                denied: 1,
                ..Tally::default()
            }
        };
        let record = HistoryRecord {
            action: d.action.clone(),
            step_ms: step_start(d.at_ms),
            tally: Tally::default(),
            withdrawn: back,
            last_seen_ms: 0,
        };
        if !sinks.pending.add(record) {
            sinks.metrics.activity_dropped(1);
        }
        sinks.metrics.withdrawn(d.action.as_str(), outcome);
        if d.allowed {
            sinks.metrics.late_debits(d.action.as_str(), 1);
        }
    }
    tracing::info!(
        withdrawn = decided.len(),
        "decisions withdrawn: a filter reported it had given up on them before their answers \
         reached it (the edge of a stall of this process); Envoy's failure mode decided them, \
         so they are not counted as the backend's (sluice_decisions_withdrawn_total)"
    );
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

/// What counting a report needs: the rules (which actions have a history), the metrics, the
/// pending history (reports without an identity) and the warning limiter.
#[derive(Clone, Copy)]
pub struct Sinks<'a> {
    /// The rules in force.
    pub rules: &'a RuleSet,
    /// Prometheus counters.
    pub metrics: &'a Metrics,
    /// History counts waiting for the next flush.
    pub pending: &'a HistoryPending,
    /// The "passed unchecked" warning's limiter.
    pub warnings: &'a UncheckedWarnings,
    /// Decisions recorded with their caller's id (a report's `gave_up` withdraws them).
    pub edge: &'a Edge,
    /// Report attempts whose store answer was lost (their metrics counted by the next copy).
    pub attempts: &'a Attempts,
    /// Actions touched, for the store's index at the next flush (`crate::touched`).
    pub touched: &'a TouchedPending,
}

/// Why a report was not (fully) counted.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The body is wrong; the field is named.
    #[error("{0}")]
    Invalid(FieldError),
    /// The store did not answer: the filter sends the same report again, and what was applied
    /// before the failure is recognised then.
    #[error("{0}")]
    Store(StoreError),
}

/// Validates `report` (the refusal names the field) and counts it at `now_ms`: a report with an
/// identity once per (action, reporter, seq), through the store's atomic
/// [`HistoryStore::apply_report`] (its history at once, the metrics when the store applied it);
/// a report without one (an older filter) into the metrics and the pending history, every copy.
/// Warns (rate-limited) when requests passed unchecked.
pub async fn ingest(
    report: &FilterReport,
    sinks: Sinks<'_>,
    store: &dyn HistoryStore,
    now_ms: u64,
    now: Instant,
) -> Result<Ingested, IngestError> {
    let entries = report.validate().map_err(IngestError::Invalid)?;
    let id = report.id().map_err(IngestError::Invalid)?;
    let mut ingested = Ingested::default();
    // Taken out of the book first, under its lock: whichever copy of the report comes first
    // withdraws them, once, however the rest of it fares.
    let decided = sinks.edge.take(&report.gave_up, stall::last_stall(), now);
    ingested.withdrawn = decided.len();
    withdraw(decided, sinks);
    for (action, counts) in entries {
        let known = sinks.rules.rules.contains_key(action.as_str());
        let label = if known {
            ingested.known += 1;
            action.as_str()
        } else {
            ingested.unknown += 1;
            UNKNOWN_ACTION_LABEL
        };
        let tally = tally(counts);
        // Counts of an action without a rule reach the metrics only (the mark still applies).
        let record = HistoryRecord {
            action: action.clone(),
            step_ms: step_start(now_ms),
            tally: if known { tally } else { Tally::default() },
            withdrawn: Tally::default(),
            last_seen_ms: if known && !tally.is_zero() { now_ms } else { 0 },
        };
        match &id {
            Some(id) => {
                let mark = ReportMark {
                    reporter: id.reporter.to_owned(),
                    seq: id.seq,
                    now_ms,
                    shared: !known,
                };
                // Tracked, so that an attempt whose answer is lost (cut at its deadline, a
                // timeout just as this process stood still) is counted by the next copy.
                let attempt = sinks.attempts.begin(action.as_str(), id.reporter, id.seq);
                let applied = match store.apply_report(&mark, &record).await {
                    Ok(applied) => applied,
                    Err(e) => {
                        attempt.end(Ended::Unknown);
                        return Err(IngestError::Store(e));
                    }
                };
                let count = match applied {
                    ReportApplied::Applied { dropped, shed } => {
                        sinks.metrics.report_marks_dropped(label, dropped);
                        sinks.metrics.report_marks_shed(label, shed);
                        attempt.end(Ended::Applied)
                    }
                    ReportApplied::Copy => attempt.end(Ended::Copy),
                };
                if !count {
                    ingested.copies += 1;
                    continue;
                }
                if known && !tally.is_zero() {
                    sinks.touched.touch(&action);
                }
            }
            None => {
                if known && !tally.is_zero() && !sinks.pending.add(record) {
                    sinks.metrics.activity_dropped(1);
                }
            }
        }
        sinks.metrics.filter_counts(label, counts);
        if counts.passed_unchecked > 0 {
            if let Some(n) = sinks.warnings.note(label, counts.passed_unchecked, now) {
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
