//! Prometheus metrics (prometheus-client, OpenMetrics text). Labels are bounded: actions come
//! from the rules, never from a request; the raw key is never a label.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sluice_core::{Algorithm, Mode};

use crate::store::{CommitOutcome, HealthStore, StoreError};

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
    algorithm: &'static str,
    outcome: Outcome,
}

/// How a filter decided a request without the backend, as reported by `POST /v1/report`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum FilterOutcome {
    /// Admitted from a lease.
    leased,
    /// Denied from the filter's denial cache.
    cached_denied,
    /// A failed callout the failure mode let through.
    passed_unchecked,
}

/// Why a filter's callout failed, as reported by `POST /v1/report`.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum FailureReason {
    /// The callout timed out.
    timeout,
    /// The callout failed otherwise (refused, another status, an unreadable answer).
    error,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FilterLabels {
    action: String,
    outcome: FilterOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    action: String,
    reason: FailureReason,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DomainLabels {
    domain: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    action: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithdrawnLabels {
    action: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: String,
}

/// Every metric the service exports, registered once.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    duration: Histogram,
    store_errors: Family<ErrorLabels, Counter>,
    unknown_action: Counter,
    rls_unknown_domain: Family<DomainLabels, Counter>,
    rules: Gauge,
    activity_dropped: Counter,
    unrefunded: Counter,
    lease_units: Family<LeaseLabels, Counter>,
    filter_decisions: Family<FilterLabels, Counter>,
    filter_failures: Family<FailureLabels, Counter>,
    exchange_streams: Gauge,
    late_debits: Family<LeaseLabels, Counter>,
    withdrawn: Family<WithdrawnLabels, Counter>,
    late_unknown: Family<LeaseLabels, Counter>,
    deadline_exceeded: Family<StageLabels, Counter>,
    wrong_listener: Family<ListenerLabels, Counter>,
    commit_refunded: Family<LeaseLabels, Counter>,
    commit_overshoot: Family<LeaseLabels, Counter>,
    commit_duplicates: Counter,
    commits_unrecorded: Family<LeaseLabels, Counter>,
    receipts_shed: Family<LeaseLabels, Counter>,
    reservations_unheld: Family<LeaseLabels, Counter>,
    report_marks_dropped: Family<LeaseLabels, Counter>,
    report_marks_shed: Family<LeaseLabels, Counter>,
}

/// The store's own figures ([`HealthStore::health`]), read at each scrape so they are never stale and
/// cost nothing per decision: `sluice_store_evictions_total` always, `sluice_store_keys` and
/// `sluice_store_max_keys` when the store counts its keys (the memory store).
struct StoreCollector(Arc<dyn HealthStore>);

impl std::fmt::Debug for StoreCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreCollector({})", self.0.kind())
    }
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let health = self.0.health();
        let evictions = ConstCounter::new(health.evictions);
        evictions.encode(encoder.encode_descriptor(
            "sluice_store_evictions",
            "Throttle keys evicted while they still held state: memory store, to stay within --max-keys (each may pass one extra burst); Redis, its evicted_keys",
            None,
            evictions.metric_type(),
        )?)?;
        let gauges = [
            (
                "sluice_store_keys",
                "Throttle keys the memory store holds",
                health.keys,
            ),
            (
                "sluice_store_max_keys",
                "The memory store's bound on throttle keys (--max-keys)",
                health.max_keys,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
    }
}

impl Metrics {
    /// Registers the metrics, with the store's own figures ([`StoreCollector`]) read from
    /// `store` at each scrape.
    pub fn with_store(store: Arc<dyn HealthStore>) -> Metrics {
        let mut metrics = Metrics::new();
        metrics
            .registry
            .register_collector(Box::new(StoreCollector(store)));
        metrics
    }

    /// Registers a metric counted elsewhere (the listeners' refused TLS handshakes,
    /// [`crate::tls::refusal`]), so it is exported with the rest.
    pub fn register(
        &mut self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.registry.register(name, help, metric);
    }

    /// Registers the metrics (without the store's figures: see [`Metrics::with_store`]).
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
        let rls_unknown_domain = Family::<DomainLabels, Counter>::default();
        registry.register(
            "sluice_rls_unknown_domain",
            "RLS requests for a domain in no file of --ratelimit-config, answered OK with no limit (the peer's answer: not_found), by domain (at most 100 named, the rest \"(other)\")",
            rls_unknown_domain.clone(),
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
        let unrefunded = Counter::default();
        registry.register(
            "sluice_all_unrefunded",
            "Redis Cluster only: debits a request denied by another of its limits kept, because another request changed the key before the refund (never a pass: the limit only counts one request more)",
            unrefunded.clone(),
        );
        let commit_refunded = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_commit_refunded_units",
            "Units given back by commits of reservations (POST /v1/commit), by action",
            commit_refunded.clone(),
        );
        let commit_overshoot = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_commit_overshoot_units",
            "Units commits debited beyond what the limit had left (admitted over the budget: the response was already out; carried as debt), by action",
            commit_overshoot.clone(),
        );
        let report_marks_dropped = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_report_marks_dropped",
            "Filter report sequence records dropped at the per-action bound (MAX_REPORTERS_PER_ACTION) to make room for a new reporter: the least recently applied, settled for 10 minutes; by action ((unknown): the set actions without a rule share)",
            report_marks_dropped.clone(),
        );
        let report_marks_shed = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_report_marks_shed",
            "Filter report sequence records shed at the per-action bound to make room for a new reporter although applied within 10 minutes (a bound held full by young records, as minted ids re-reported keep it): the least recently applied; a copy of its reporter's last report would count twice; by action",
            report_marks_shed.clone(),
        );
        let receipts_shed = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_commit_receipts_shed",
            "Commit receipts dropped to keep a key within its bound (1,024 per key; the memory store also 100,000 in all), by action: a retry of such a commit applies again (it can only debit again)",
            receipts_shed.clone(),
        );
        let commits_unrecorded = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_commits_unrecorded",
            "First commits that claimed a reservation (reserved > 0) with no reservation recorded under their id: nothing given back, the whole actual debited, by action (a caller that reserved without a reservation_id, or one claiming units it never reserved)",
            commits_unrecorded.clone(),
        );
        let commit_duplicates = Counter::default();
        registry.register(
            "sluice_commit_duplicates",
            "Commits whose request id was already committed (retries): answered, nothing changed",
            commit_duplicates.clone(),
        );
        let reservations_unheld = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_reservations_unheld",
            "Allowed reservations (throttle requests with a reservation_id) not held as in flight for the dashboard: the store failed (said in the log) or the key already held 1024; the decision stands, by action",
            reservations_unheld.clone(),
        );
        let lease_units = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_lease_units_granted",
            "Units the backend debited in advance as lease grants to the Envoy filters, by action (each is admitted by a filter with no callout, or lost when its lease expires)",
            lease_units.clone(),
        );
        let filter_decisions = Family::<FilterLabels, Counter>::default();
        registry.register(
            "sluice_filter_decisions",
            "Requests the Envoy filters decided without the backend, from their reports (POST /v1/report), by action and outcome (leased, cached_denied, passed_unchecked); action \"(unknown)\" for actions without a rule",
            filter_decisions.clone(),
        );
        let filter_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "sluice_filter_failures",
            "The Envoy filters' failed callouts to the backend, from their reports, by action and reason (timeout, error)",
            filter_failures.clone(),
        );
        let exchange_streams = Gauge::default();
        registry.register(
            "sluice_exchange_streams",
            "Decision exchange streams open on the gRPC listener (sluice.v1.DecisionExchange/Stream; one per Envoy worker using the filter's gRPC callout)",
            exchange_streams.clone(),
        );
        // One deadline (backend/src/deadline/): decisions whose caller's deadline passed.
        let late_debits = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_late_debits",
            "Decisions whose store step debited after the caller had given up (its deadline passed: the filter's failure mode decided the request), by action; docs/failure-modes.md, \"One deadline\"",
            late_debits.clone(),
        );
        let withdrawn = Family::<WithdrawnLabels, Counter>::default();
        registry.register(
            "sluice_decisions_withdrawn",
            "Decisions counted in sluice_decisions_total whose caller had given up on them (a filter's report named them: the answer reached it after its timeout, at the edge of a stall of this process), so Envoy never acted on them; withdrawn from the history, by action and outcome. An allowed one's debit is counted in sluice_late_debits_total",
            withdrawn.clone(),
        );
        let late_unknown = Family::<LeaseLabels, Counter>::default();
        registry.register(
            "sluice_late_unknown",
            "Decisions whose store step failed (e.g. a Redis timeout) after the caller had given up: it may or may not have debited, by action",
            late_unknown.clone(),
        );
        let deadline_exceeded = Family::<StageLabels, Counter>::default();
        registry.register(
            "sluice_deadline_exceeded",
            "Decisions answered 503 deadline_exceeded, by stage: not_started (the time left was below the store's recent latency; nothing debited), late (the store step outlived the deadline)",
            deadline_exceeded.clone(),
        );
        for stage in ["not_started", "late"] {
            let _ = deadline_exceeded.get_or_create(&StageLabels { stage });
        }
        let wrong_listener = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "sluice_wrong_listener",
            "Requests that reached a listener not speaking their protocol, by the listener that refused them: decision (a gRPC request: use the gRPC listener), grpc (an HTTP request: use the decision listener)",
            wrong_listener.clone(),
        );
        for listener in ["decision", "grpc"] {
            let _ = wrong_listener.get_or_create(&ListenerLabels {
                listener: listener.to_owned(),
            });
        }
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
            rls_unknown_domain,
            rules,
            activity_dropped,
            unrefunded,
            lease_units,
            filter_decisions,
            filter_failures,
            exchange_streams,
            late_debits,
            withdrawn,
            late_unknown,
            deadline_exceeded,
            wrong_listener,
            commit_refunded,
            commit_overshoot,
            commit_duplicates,
            commits_unrecorded,
            receipts_shed,
            reservations_unheld,
            report_marks_dropped,
            report_marks_shed,
        }
    }

    /// Counts `n` report sequence records of `action` dropped at the bound.
    pub fn report_marks_dropped(&self, action: &str, n: u64) {
        if n == 0 {
            return;
        }
        self.report_marks_dropped
            .get_or_create(&LeaseLabels {
                action: action.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts `n` young report sequence records of `action` shed at the bound.
    pub fn report_marks_shed(&self, action: &str, n: u64) {
        if n == 0 {
            return;
        }
        self.report_marks_shed
            .get_or_create(&LeaseLabels {
                action: action.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts one allowed reservation of `action` that is not shown as in flight.
    pub fn reservation_not_recorded(&self, action: &str) {
        self.reservations_unheld
            .get_or_create(&LeaseLabels {
                action: action.to_owned(),
            })
            .inc();
    }

    /// Counts one commit of `action`: its refunded and overshoot units, or a duplicate.
    pub fn commit(&self, action: &str, outcome: &CommitOutcome) {
        if outcome.duplicate {
            self.commit_duplicates.inc();
            return;
        }
        let labels = LeaseLabels {
            action: action.to_owned(),
        };
        self.commit_refunded
            .get_or_create(&labels)
            .inc_by(outcome.committed.refunded);
        self.commit_overshoot
            .get_or_create(&labels)
            .inc_by(outcome.committed.overshoot);
        if outcome.unrecorded {
            self.commits_unrecorded.get_or_create(&labels).inc();
        }
        if outcome.receipts_shed > 0 {
            self.receipts_shed
                .get_or_create(&labels)
                .inc_by(outcome.receipts_shed);
        }
    }

    /// Counts one request refused by `listener` (`decision` or `grpc`) for speaking the other
    /// listener's protocol.
    pub fn wrong_listener(&self, listener: &str) {
        self.wrong_listener
            .get_or_create(&ListenerLabels {
                listener: listener.to_owned(),
            })
            .inc();
    }

    /// Adds one filter report entry under the `action` label `label` (zero counts create no
    /// series).
    pub fn filter_counts(&self, label: &str, counts: &sluice_core::wire::ActionCounts) {
        let outcomes = [
            (FilterOutcome::leased, counts.leased),
            (FilterOutcome::cached_denied, counts.cached_denied),
            (FilterOutcome::passed_unchecked, counts.passed_unchecked),
        ];
        for (outcome, n) in outcomes {
            if n > 0 {
                self.filter_decisions
                    .get_or_create(&FilterLabels {
                        action: label.to_owned(),
                        outcome,
                    })
                    .inc_by(n);
            }
        }
        let failures = [
            (FailureReason::timeout, counts.failed_timeout),
            (FailureReason::error, counts.failed_error),
        ];
        for (reason, n) in failures {
            if n > 0 {
                self.filter_failures
                    .get_or_create(&FailureLabels {
                        action: label.to_owned(),
                        reason,
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts the units of one lease grant under `action` (a label from the rules).
    pub fn lease_granted(&self, action: &str, units: u64) {
        self.lease_units
            .get_or_create(&LeaseLabels {
                action: action.to_owned(),
            })
            .inc_by(units);
    }

    /// Counts one decision and its latency.
    pub fn decision(&self, action: &str, algorithm: Algorithm, outcome: Outcome, seconds: f64) {
        self.decisions
            .get_or_create(&DecisionLabels {
                action: action.to_owned(),
                algorithm: algorithm.name(),
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
                kind: error.metric_kind().to_owned(),
            })
            .inc();
    }

    /// Counts one RLS request for a domain no ratelimit-config file has, under `domain` (already
    /// bounded by the caller: [`crate::grpc::rls::unknown_domains`]).
    pub fn rls_unknown_domain(&self, domain: &str) {
        self.rls_unknown_domain
            .get_or_create(&DomainLabels {
                domain: domain.to_owned(),
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

    /// Counts debits a denied all-or-nothing request kept on Redis Cluster (a skipped refund).
    pub fn unrefunded(&self, n: u64) {
        self.unrefunded.inc_by(n);
    }

    /// Counts `n` late debits of `action` ([`crate::deadline::late`]).
    pub fn late_debits(&self, action: &str, n: u64) {
        self.late_debits
            .get_or_create(&LeaseLabels {
                action: action.to_owned(),
            })
            .inc_by(n);
    }

    /// Counts one decision of `action` withdrawn (its caller had given up on it).
    pub fn withdrawn(&self, action: &str, outcome: Outcome) {
        self.withdrawn
            .get_or_create(&WithdrawnLabels {
                action: action.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts one late store step of `action` that failed (it may have debited).
    pub fn late_unknown(&self, action: &str) {
        self.late_unknown
            .get_or_create(&LeaseLabels {
                action: action.to_owned(),
            })
            .inc();
    }

    /// Counts one decision answered `deadline_exceeded` at `stage` (`not_started`, `late`).
    pub fn deadline_exceeded(&self, stage: &'static str) {
        self.deadline_exceeded
            .get_or_create(&StageLabels { stage })
            .inc();
    }

    /// Counts one decision exchange stream opened.
    pub fn exchange_stream_opened(&self) {
        self.exchange_streams.inc();
    }

    /// Counts one decision exchange stream closed.
    pub fn exchange_stream_closed(&self) {
        self.exchange_streams.dec();
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

#[cfg(test)]
mod tests;
