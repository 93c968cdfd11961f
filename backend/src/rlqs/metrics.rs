//! The RLQS server's Prometheus metrics, registered with the rest ([`crate::metrics::Metrics::register`]).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::sync::atomic::AtomicU64;

/// The assignment kinds, as labelled: allow_all, deny_all, token_bucket, abandon.
pub const ASSIGNMENT_KINDS: [&str; 4] = ["allow_all", "deny_all", "token_bucket", "abandon"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// Why a share's rate or burst was changed and pushed, as labelled.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Rebalance {
    /// Lowered towards its target: a holder joined, or the rule shrank.
    lowered,
    /// Raised back towards its target, within the rates paid for.
    raised,
    /// Its rate halved: the key owed more than a tick of refill the store could not pay.
    halved,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RebalanceLabels {
    action: String,
    kind: Rebalance,
}

/// Streams, buckets and assignments of the RLQS server. Clones share the same figures.
#[derive(Debug, Clone)]
pub struct RlqsMetrics {
    streams: Gauge,
    buckets: Gauge,
    assignments: Family<KindLabels, Counter>,
    over_bound: Counter,
    not_utf8: Counter,
    post_debited: Counter,
    unpaid: Counter,
    rebalances: Family<RebalanceLabels, Counter>,
    taken_over: Counter,
    taken_over_units: Counter,
    report_refused: Counter,
    tick_seconds: Histogram,
    oldest_assignment_age: Gauge<f64, AtomicU64>,
    ttl_seconds: Gauge,
    arrivals: Gauge,
}

impl Default for RlqsMetrics {
    fn default() -> Self {
        RlqsMetrics {
            streams: Gauge::default(),
            buckets: Gauge::default(),
            assignments: Family::default(),
            over_bound: Counter::default(),
            not_utf8: Counter::default(),
            post_debited: Counter::default(),
            unpaid: Counter::default(),
            rebalances: Family::default(),
            taken_over: Counter::default(),
            taken_over_units: Counter::default(),
            report_refused: Counter::default(),
            // 1 ms to ~16 s: a tick is due every second.
            tick_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            oldest_assignment_age: Gauge::default(),
            ttl_seconds: Gauge::default(),
            arrivals: Gauge::default(),
        }
    }
}

impl RlqsMetrics {
    /// New figures, registered in `metrics` (before it is shared).
    pub fn registered(metrics: &mut crate::metrics::Metrics) -> RlqsMetrics {
        let m = RlqsMetrics::default();
        metrics.register(
            "sluice_rlqs_streams",
            "Open RLQS streams (one per Envoy per quota filter domain)",
            m.streams.clone(),
        );
        metrics.register(
            "sluice_rlqs_buckets",
            "Quota filter buckets the RLQS streams hold (closed streams' shares until their TTL included)",
            m.buckets.clone(),
        );
        metrics.register(
            "sluice_rlqs_assignments",
            "RLQS assignments sent, by kind: allow_all (unmapped, no rule, shadow), deny_all (spent key, no burst for this holder now, unmatched: deny_all), token_bucket (a share, new or renewed), abandon",
            m.assignments.clone(),
        );
        metrics.register(
            "sluice_rlqs_rebalances",
            "RLQS shares changed and pushed, by action and kind: lowered (a holder joined, the rule shrank), raised (back within the rule), halved (refill the store could not pay)",
            m.rebalances.clone(),
        );
        metrics.register(
            "sluice_rlqs_tick_seconds",
            "How long the RLQS ledger's payment tick took (due every second: one taking longer delays every stream's pushes)",
            m.tick_seconds.clone(),
        );
        metrics.register(
            "sluice_rlqs_oldest_assignment_age_seconds",
            "Age of the least recently sent assignment of an open stream's bucket, at the last tick; past sluice_rlqs_assignment_ttl_seconds it has expired in Envoy (renewals fell behind)",
            m.oldest_assignment_age.clone(),
        );
        metrics.register(
            "sluice_rlqs_assignment_ttl_seconds",
            "The TTL every RLQS assignment carries (--rlqs-ttl)",
            m.ttl_seconds.clone(),
        );
        metrics.register(
            "sluice_rlqs_arrivals_waiting",
            "New RLQS buckets waiting for their first store steps (worked 256 per turn of the ledger task)",
            m.arrivals.clone(),
        );
        for kind in ASSIGNMENT_KINDS {
            let _ = m.assignments.get_or_create(&KindLabels { kind });
        }
        let counters = [
            (
                "sluice_rlqs_buckets_over_bound",
                "RLQS bucket reports given no assignment because their stream held the most buckets it may (Envoy applies the listener's no_assignment_behavior); one per bucket per report",
                &m.over_bound,
            ),
            (
                "sluice_rlqs_buckets_not_utf8",
                "Buckets left out of RLQS reports because their id is not UTF-8 (a client's header bytes): nothing can be assigned to them, so they follow the listener's no_assignment_behavior",
                &m.not_utf8,
            ),
            (
                "sluice_rlqs_post_debited_units",
                "Units Envoy reported allowed beyond what their shares had prepaid (no-assignment windows), debited after the fact",
                &m.post_debited,
            ),
            (
                "sluice_rlqs_unpaid_units",
                "Share refill the store could not pay when due (its rate was then lowered)",
                &m.unpaid,
            ),
            (
                "sluice_rlqs_shares_taken_over",
                "Share records of a stopped backend replica (crashed, restarted) this replica took over from the store",
                &m.taken_over,
            ),
            (
                "sluice_rlqs_taken_over_units",
                "Refill paid (post-debited) for the shares of stopped replicas, until they expired in Envoy",
                &m.taken_over_units,
            ),
            (
                "sluice_rlqs_report_units_refused",
                "Requests (allowed or denied) an RLQS report claimed of a bucket beyond what it could have seen (its share's paid tokens plus one period of the rule), not counted and not post-debited",
                &m.report_refused,
            ),
        ];
        for (name, help, counter) in counters {
            metrics.register(name, help, counter.clone());
        }
        m
    }

    /// Sets the open streams and held buckets.
    pub fn set_sizes(&self, streams: usize, buckets: usize) {
        self.streams.set(i64::try_from(streams).unwrap_or(i64::MAX));
        self.buckets.set(i64::try_from(buckets).unwrap_or(i64::MAX));
    }

    /// The open streams and held buckets, as last set (what `/readyz` reports).
    pub fn sizes(&self) -> sluice_core::wire::RlqsReady {
        sluice_core::wire::RlqsReady {
            streams: u64::try_from(self.streams.get()).unwrap_or(0),
            buckets: u64::try_from(self.buckets.get()).unwrap_or(0),
        }
    }

    /// Counts `shares` of one key of `action` changed and pushed, and why.
    pub fn rebalanced(&self, action: &str, kind: Rebalance, shares: usize) {
        if shares == 0 {
            return;
        }
        let labels = RebalanceLabels {
            action: action.to_owned(),
            kind,
        };
        let n = u64::try_from(shares).unwrap_or(u64::MAX);
        self.rebalances.get_or_create(&labels).inc_by(n);
    }

    /// Counts one assignment sent, by its kind (one of [`ASSIGNMENT_KINDS`]).
    pub fn assigned(&self, kind: &'static str) {
        self.assignments.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts one bucket report left unanswered at the per-stream bound.
    pub fn over_bound(&self) {
        self.over_bound.inc();
    }

    /// Counts buckets left out of a report (id not UTF-8).
    pub fn not_utf8(&self, buckets: u64) {
        self.not_utf8.inc_by(buckets);
    }

    /// Counts units post-debited.
    pub fn post_debited(&self, units: u64) {
        self.post_debited.inc_by(units);
    }

    /// Counts share records of stopped replicas taken over.
    pub fn taken_over(&self, records: u64) {
        self.taken_over.inc_by(records);
    }

    /// Counts refill units paid for stopped replicas' shares.
    pub fn taken_over_units(&self, units: u64) {
        self.taken_over_units.inc_by(units);
    }

    /// Records one tick's duration.
    pub fn tick_took(&self, took: std::time::Duration) {
        self.tick_seconds.observe(took.as_secs_f64());
    }

    /// Sets the oldest live assignment's age and the TTL it is held against.
    pub fn set_assignment_age(&self, oldest: std::time::Duration, ttl: std::time::Duration) {
        self.oldest_assignment_age.set(oldest.as_secs_f64());
        self.ttl_seconds
            .set(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    }

    /// Sets the new buckets waiting for their first store steps.
    pub fn set_arrivals(&self, waiting: usize) {
        self.arrivals
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// Counts units of report claims refused.
    pub fn report_refused(&self, units: u64) {
        self.report_refused.inc_by(units);
    }

    /// Counts refill units the store could not pay.
    pub fn unpaid(&self, units: u64) {
        self.unpaid.inc_by(units);
    }
}
