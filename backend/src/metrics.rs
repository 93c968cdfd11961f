//! Prometheus metrics (prometheus-client, OpenMetrics text). Labels are bounded: actions come
//! from the rules, never from a request; the raw key is never a label.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sluice_core::{Algorithm, Mode};

use crate::store::StoreError;

/// How a decision came out, as a label value.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// Passed.
    allowed,
    /// Refused under an enforced rule.
    denied,
    /// Would have been refused; passed because the rule is in shadow mode.
    shadow_denied,
}

impl Outcome {
    /// The outcome of an algorithm's answer under a rule's mode.
    pub fn of(allowed: bool, mode: Mode) -> Outcome {
        match (allowed, mode) {
            (true, _) => Outcome::allowed,
            (false, Mode::Enforce) => Outcome::denied,
            (false, Mode::Shadow) => Outcome::shadow_denied,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    action: String,
    algorithm: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: String,
}

/// The metric name suffix of a store error (`sluice_store_errors_total{kind}`).
pub fn error_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Timeout(_) => "timeout",
        StoreError::Overloaded(_) => "overloaded",
        StoreError::Full(_) => "full",
        StoreError::WrongType { .. } => "wrong_type",
        StoreError::Corrupt(_) => "corrupt",
        StoreError::Script { .. } => "script",
    }
}

/// Every metric the service exports, registered once.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    duration: Histogram,
    store_errors: Family<ErrorLabels, Counter>,
    unknown_action: Counter,
    rules: Gauge,
    activity_dropped: Counter,
}

impl Metrics {
    /// Registers the metrics.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "sluice_decisions",
            "Throttle decisions by action, algorithm and outcome (allowed, denied, shadow_denied)",
            decisions.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register(
            "sluice_decision_duration_seconds",
            "Time to answer POST /v1/throttle and /v1/cl.throttle, store call included",
            duration.clone(),
        );
        let store_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "sluice_store_errors",
            "Store calls that failed, by kind (unavailable, timeout, overloaded, full, wrong_type, corrupt, script)",
            store_errors.clone(),
        );
        let unknown_action = Counter::default();
        registry.register(
            "sluice_unknown_action",
            "Decision requests for an action that has no rule (answered 404)",
            unknown_action.clone(),
        );
        let rules = Gauge::default();
        registry.register(
            "sluice_rules",
            "Rules in this replica's cache",
            rules.clone(),
        );
        let activity_dropped = Counter::default();
        registry.register(
            "sluice_activity_dropped",
            "Live-activity records dropped (batch full, or the store refused the flush)",
            activity_dropped.clone(),
        );
        for kind in [
            "unavailable",
            "timeout",
            "overloaded",
            "full",
            "wrong_type",
            "corrupt",
            "script",
        ] {
            let _ = store_errors.get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
            });
        }
        Metrics {
            registry,
            decisions,
            duration,
            store_errors,
            unknown_action,
            rules,
            activity_dropped,
        }
    }

    /// Counts one decision and its latency.
    pub fn decision(&self, action: &str, algorithm: Algorithm, outcome: Outcome, seconds: f64) {
        self.decisions
            .get_or_create(&DecisionLabels {
                action: action.to_owned(),
                algorithm: algorithm.name().to_owned(),
                outcome,
            })
            .inc();
        self.duration.observe(seconds);
    }

    /// Records a latency without a rule decision (cl.throttle).
    pub fn latency(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    /// Counts one failed store call.
    pub fn store_error(&self, error: &StoreError) {
        self.store_errors
            .get_or_create(&ErrorLabels {
                kind: error_kind(error).to_owned(),
            })
            .inc();
    }

    /// Counts one decision request for an action without a rule.
    pub fn unknown_action(&self) {
        self.unknown_action.inc();
    }

    /// Sets how many rules are cached.
    pub fn set_rules(&self, n: usize) {
        self.rules.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts activity records that could not be kept.
    pub fn activity_dropped(&self, n: u64) {
        self.activity_dropped.inc_by(n);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}
