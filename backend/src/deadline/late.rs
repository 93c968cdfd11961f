//! What a store step left behind when it finished after its caller gave up (the deadline passed,
//! or the caller hung up): its decision was never acted on, so it is not recorded as allowed or
//! denied anywhere (activity, history, `sluice_decisions_total`). What it debited stays: the
//! refund that exists (a commit at a lower actual cost, `sluice_core::commit`) is not applied to a
//! late step, so each debit is counted in `sluice_late_debits_total{action}` and logged at WARN,
//! at most once per [`LOG_EVERY`]. A step that ended in an error (a Redis timeout) may or may not
//! have debited: counted apart, in `sluice_late_unknown_total{action}`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sluice_core::leased::Leased;
use sluice_core::Rule;

use crate::metrics::Metrics;
use crate::store::{AllOutcome, StoreError};

/// Least time between two WARN lines about late debits.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Counts and logs late steps for one replica's metrics.
#[derive(Clone)]
pub struct Late {
    metrics: Arc<Metrics>,
}

/// The checks of one late all-or-nothing step: (rule, quantity) each.
pub type LateChecks = Vec<(Arc<Rule>, u64)>;

impl Late {
    /// Late steps counted in `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Late {
        Late { metrics }
    }

    /// A single decision's step (`quantity` units for `action`) ended after its caller gave up.
    pub fn single(&self, action: &str, quantity: u64, result: &Result<Leased, StoreError>) {
        match result {
            Ok(leased) => {
                let units = if leased.decision.allowed {
                    quantity + leased.grant.map_or(0, |g| g.units)
                } else {
                    0
                };
                if units > 0 {
                    self.debited(action, 1, units);
                }
            }
            Err(e) => self.unknown(action, e),
        }
    }

    /// An all-or-nothing step ended after its caller gave up: an allowed one debited every check
    /// that asked for units (one late debit each); a denied one debited nothing (or, on Redis
    /// Cluster, what its refund could not give back, counted as `sluice_all_unrefunded_total`).
    pub fn all(&self, checks: &LateChecks, result: &Result<AllOutcome, StoreError>) {
        match result {
            Ok(outcome) => {
                if outcome.unrefunded > 0 {
                    self.metrics
                        .unrefunded(u64::try_from(outcome.unrefunded).unwrap_or(u64::MAX));
                }
                if outcome.denied.is_none() {
                    for (rule, quantity) in checks {
                        if *quantity > 0 {
                            self.debited(rule.action().as_str(), 1, *quantity);
                        }
                    }
                }
            }
            Err(e) => {
                for (rule, _) in checks {
                    self.unknown(rule.action().as_str(), e);
                }
            }
        }
    }

    fn debited(&self, action: &str, debits: u64, units: u64) {
        self.metrics.late_debits(action, debits);
        if let Some(skipped) = log_due(Instant::now()) {
            tracing::warn!(
                action,
                units,
                late_debits_not_logged = skipped,
                "a decision's store step debited after its caller gave up (the caller's deadline \
                 passed: its failure mode decided the request); counted in \
                 sluice_late_debits_total. The store is slower than the filter's \
                 backend.timeout_ms: see docs/failure-modes.md, \"One deadline\""
            );
        }
    }

    fn unknown(&self, action: &str, e: &StoreError) {
        self.metrics.late_unknown(action);
        if let Some(skipped) = log_due(Instant::now()) {
            tracing::warn!(
                action,
                error = %e,
                late_debits_not_logged = skipped,
                "a decision's store step failed after its caller gave up; it may have debited \
                 (counted in sluice_late_unknown_total)"
            );
        }
    }
}

/// Whether a WARN line is due at `now` (at most one per [`LOG_EVERY`] per process), and how
/// many were skipped since the last one.
fn log_due(now: Instant) -> Option<u64> {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    static SKIPPED: AtomicU64 = AtomicU64::new(0);
    let origin = *ORIGIN.get_or_init(|| now);
    // +1 so that the first line (at 0 ms) is due.
    let now_ms = u64::try_from(now.saturating_duration_since(origin).as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let every = u64::try_from(LOG_EVERY.as_millis()).unwrap_or(u64::MAX);
    let last = LAST_MS.load(Ordering::Relaxed);
    if last != 0 && now_ms.saturating_sub(last) < every {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    if LAST_MS
        .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(SKIPPED.swap(0, Ordering::Relaxed))
}
