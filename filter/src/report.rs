//! What only the filter knows, counted per action and sent to the backend: admissions from a
//! lease, denials from the denial cache, failed callouts by reason and how many of those passed
//! unchecked. The backend adds them to its metrics, history and dashboard (`POST /v1/report`,
//! body core's [`FilterReport`], answer 204).
//!
//! # Where the counts live
//!
//! In the worker's own memory ([`Worker`], one per root context, i.e. per Envoy worker thread
//! and plugin): a request adds to a table indexed by its route's action index, with no hostcall
//! and no shared data, so counting costs a request nothing measurable. The table has one row per
//! distinct action of the configuration, at most [`MAX_REPORT_ACTIONS`]; actions beyond that
//! bound are not counted (a configuration with more than 256 distinct actions loses their counts).
//!
//! # Sending
//!
//! The root context's tick (`report.period_ms`, default 1 s) sends what accumulated, when
//! anything is non-zero, as one `POST` to the backend: the counts move from the table into the
//! report in flight, and the table starts again from zero. One report is in flight at a time. On
//! a 2xx answer the report is done; on any other answer, a timeout, or a callout that cannot
//! start, the *same* report (same counts, same sequence number) is sent again at the next tick,
//! until one copy is accepted; what accumulated meanwhile waits in the table for the report after
//! it. Counts are lost only when the worker's VM goes away (Envoy restarts or reloads the plugin)
//! with counts not yet accepted: at most one period's counts plus whatever the backend has
//! refused since. Adds saturate at `u64::MAX`.
//!
//! # Exactly once
//!
//! Every report carries this worker's reporter id (random, drawn once per worker) and a sequence
//! number that grows by one per *new* report, never per copy. A copy whose first twin the backend
//! counted but whose answer was lost (a stalled backend, a timeout) is recognised by the backend
//! (it keeps the highest `seq` applied per action and reporter, in the store) and counted once;
//! merging a failed report's counts into the next one, as before, made such copies count twice.
//!
//! # Requests given up on
//!
//! Each decision request carries an id of this worker's ([`Worker::decision_id`]: a random base
//! plus a counter). A request whose callout failed after it was sent (its timeout passed first,
//! the stream closed) is counted as failed and its id noted ([`Worker::gave_up`]); each report
//! names up to [`MAX_REPORT_GAVE_UP`] of them (past that, the oldest and the newest half each:
//! the rest wait for the next reports), so that a decision the backend made for one of them all the same (it answered after this
//! worker stopped waiting) is withdrawn there, and the request is counted once, as what Envoy
//! did with it. A worker holds at most [`MAX_GAVE_UP_HELD`] ids; past it (a stall of minutes)
//! it keeps the first [`MAX_REPORT_GAVE_UP`] (a stall's edge is its first timeout) and the
//! latest (the backlog answered late after the resume), and forgets the ones between.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use sluice_core::limits::{MAX_REPORT_ACTIONS, MAX_REPORT_GAVE_UP};
use sluice_core::wire::{ActionCounts, FilterReport};

use crate::config::{Config, FailureMode};
use crate::cost::Commits;
use crate::exchange::{self, Outcome};
use crate::failure::log::FailureLog;
use crate::host::{Callout, Counter, ExchangeCall, Host};
use crate::lease::asking::RuleLeases;
use crate::lease::pocket::Pockets;
use crate::lease::watch::Watch;
use crate::lease::{returns, Return};

/// Most decision ids given up on one worker holds for its reports: sixteen reports' worth, a
/// stall of a minute or two at a few hundred requests a second per worker.
pub const MAX_GAVE_UP_HELD: usize = 16 * MAX_REPORT_GAVE_UP;

/// One action's counts since the last accepted report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Admitted from a lease.
    pub leased: u64,
    /// Denied from the denial cache.
    pub cached_denied: u64,
    /// Callouts that timed out (504 from Envoy; gRPC DEADLINE_EXCEEDED).
    pub failed_timeout: u64,
    /// Callouts that failed otherwise (refused, other non-200, unreadable answer, not started).
    pub failed_error: u64,
    /// Of the failed ones, those `failure_mode: allow` let through.
    pub passed_unchecked: u64,
}

impl Counts {
    fn is_zero(&self) -> bool {
        *self == Counts::default()
    }

    fn add(&mut self, other: &Counts) {
        self.leased = self.leased.saturating_add(other.leased);
        self.cached_denied = self.cached_denied.saturating_add(other.cached_denied);
        self.failed_timeout = self.failed_timeout.saturating_add(other.failed_timeout);
        self.failed_error = self.failed_error.saturating_add(other.failed_error);
        self.passed_unchecked = self.passed_unchecked.saturating_add(other.passed_unchecked);
    }
}

/// Something the filter decided (or failed to have decided) without the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Admitted from a lease.
    Leased,
    /// Denied from the denial cache.
    CachedDenied,
    /// A callout failed; `timeout` for a timeout, `passed` when the failure mode let it through.
    Failed {
        /// The callout timed out.
        timeout: bool,
        /// `failure_mode: allow` passed the request unchecked.
        passed: bool,
    },
}

impl Event {
    /// The failure event for a failure reason (`x-sluice-failure`) under the failure `mode`:
    /// `timeout` (HTTP 504) and `grpc_4` (DEADLINE_EXCEEDED) are timeouts, every other reason
    /// an error; `allow` passed the request unchecked.
    pub fn failed(reason: &str, mode: FailureMode) -> Event {
        Event::Failed {
            timeout: reason == "timeout" || reason == "grpc_4",
            passed: mode == FailureMode::Allow,
        }
    }
}

/// A report's sequence number and counts, until the backend accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unsent {
    seq: u64,
    counts: Vec<Counts>,
    /// Decision ids given up on (see the module's "Requests given up on").
    gave_up: Vec<u64>,
}

/// The ids one report names: all of them when they fit, else the oldest half a report and the
/// newest half (a stall's edge is its first timeouts, the backlog answered late after its resume
/// its latest); the ones between wait for the next reports.
fn take_named(held: &mut Vec<u64>) -> Vec<u64> {
    if held.len() <= MAX_REPORT_GAVE_UP {
        return std::mem::take(held);
    }
    let half = MAX_REPORT_GAVE_UP / 2;
    let mut named: Vec<u64> = held.drain(..half).collect();
    let newest = held.len() - half;
    named.extend(held.drain(newest..));
    named
}

/// A fresh reporter id: 128 random bits in hex. `RandomState` seeds from the host's random source
/// (WASI `random_get` in Envoy), so no crate is needed for it; two workers, VMs or Envoys drawing
/// the same id is as likely as a 128-bit collision.
fn new_reporter() -> String {
    let draw = || RandomState::new().hash_one(0u8);
    format!("{:016x}{:016x}", draw(), draw())
}

/// The state one worker's requests share: the counts table, the report in flight and the lease
/// pockets.
#[derive(Debug, Default)]
pub struct Worker {
    counts: RefCell<Vec<Counts>>,
    /// Decision ids given up on, not yet in a report (at most [`MAX_GAVE_UP_HELD`]).
    gave_up: RefCell<Vec<u64>>,
    /// The next decision id (a random base, then one more per request).
    next_decision: Cell<u64>,
    /// This worker's reporter id (see the module's "Exactly once").
    reporter: String,
    /// The sequence number of the last report built (0: none yet).
    seq: Cell<u64>,
    /// The report being sent, by token, with its sequence number and counts.
    in_flight: RefCell<Option<(u32, Unsent)>>,
    /// A report that did not go through, to be sent again as it is (same `seq`) at the next tick.
    retry: RefCell<Option<Unsent>>,
    /// A report failed since the last accepted one (so the failure is logged once, not per tick).
    failing: Cell<bool>,
    /// This worker's lease pockets (`lease::pocket`): per worker, like the counts.
    pockets: RefCell<Pockets>,
    /// This worker's failure log (`failure::log`): one line per reason per 10 s at most.
    failures: RefCell<FailureLog>,
    /// This worker's cost commits (`cost.rs`) and lease returns (`lease::returns`), sent on
    /// the tick.
    commits: RefCell<Commits>,
    /// The grants this worker stored, swept on the tick once expired (`lease::watch`).
    watch: RefCell<Watch>,
    /// Which actions' rules grant leases, as learnt (`lease::asking`).
    rule_leases: RefCell<RuleLeases>,
    /// Grant ids: this worker's random start, then one more per grant (`lease::Grant::id`).
    grant_ids: Cell<u64>,
}

impl Worker {
    /// A worker counting the configuration's actions (the first [`MAX_REPORT_ACTIONS`]).
    pub fn new(config: &Config) -> Worker {
        let rows = config.actions.len().min(MAX_REPORT_ACTIONS);
        Worker {
            counts: RefCell::new(vec![Counts::default(); rows]),
            reporter: new_reporter(),
            rule_leases: RefCell::new(RuleLeases::new(config.actions.len())),
            grant_ids: Cell::new(RandomState::new().hash_one(1u8)),
            next_decision: Cell::new(RandomState::new().hash_one(1u8)),
            ..Worker::default()
        }
    }

    /// A fresh grant id: distinct per worker by its random start, per grant by one more.
    pub fn next_grant_id(&self) -> u64 {
        let id = self.grant_ids.get().wrapping_add(1);
        self.grant_ids.set(id);
        id
    }

    /// What this worker has learnt of its actions' rules (`lease::asking`).
    pub fn rule_leases(&self) -> RefMut<'_, RuleLeases> {
        self.rule_leases.borrow_mut()
    }

    /// This worker's watch over the grants it stored (`lease::watch`).
    pub fn watch(&self) -> RefMut<'_, Watch> {
        self.watch.borrow_mut()
    }

    /// Queues `returns` (units taken out of the lease table unspent) to go back to the backend
    /// with the next tick's commits; one whose identity does not parse is counted lost.
    pub fn give_back(&self, host: &mut dyn Host, returns: Vec<Return>) {
        for r in returns {
            match returns::commit(&r) {
                Some(request) => self.commits().push_return(host, request, r.grant.units),
                None => host.count_by(Counter::LeaseUnitsLost, r.grant.units),
            }
        }
    }

    /// The tick's lease and commit part, on every tick: sweeps the expired grants this worker
    /// watches (`lease::watch`), then sends every queued commit and return.
    pub fn settle(&self, host: &mut dyn Host, config: &Config) {
        if config.lease.enabled && !self.watch.borrow().is_empty() {
            let mut back = Vec::new();
            let now = host.now_ns();
            self.watch().sweep(host, config.lease.slots, now, &mut back);
            self.give_back(host, back);
        }
        self.commits().send(host, config);
    }

    /// This worker's lease pockets, borrowed for one admission (`lease::table::spend`).
    pub fn pockets(&self) -> RefMut<'_, Pockets> {
        self.pockets.borrow_mut()
    }

    /// This worker's cost commits, borrowed to queue one (or for the tick).
    pub fn commits(&self) -> RefMut<'_, Commits> {
        self.commits.borrow_mut()
    }

    /// This worker's failure log, borrowed for one failure (or the tick).
    pub fn failures(&self) -> RefMut<'_, FailureLog> {
        self.failures.borrow_mut()
    }

    /// Counts one event for the action at `action_index` (ignored beyond the table's bound).
    pub fn record(&self, action_index: usize, event: Event) {
        let mut counts = self.counts.borrow_mut();
        let Some(c) = counts.get_mut(action_index) else {
            return;
        };
        let one = |n: &mut u64| *n = n.saturating_add(1);
        match event {
            Event::Leased => one(&mut c.leased),
            Event::CachedDenied => one(&mut c.cached_denied),
            Event::Failed { timeout, passed } => {
                one(if timeout {
                    &mut c.failed_timeout
                } else {
                    &mut c.failed_error
                });
                if passed {
                    one(&mut c.passed_unchecked);
                }
            }
        }
    }

    /// A fresh id for one decision request: unique within this worker (a counter) and, from a
    /// random 64-bit base, across workers as long as two bases are not within the requests one
    /// of them makes.
    pub fn decision_id(&self) -> u64 {
        let id = self.next_decision.get();
        self.next_decision.set(id.wrapping_add(1));
        id
    }

    /// Notes that this worker gave up on the decision request `id` (its callout failed after it
    /// was sent): a report names it. Past [`MAX_GAVE_UP_HELD`] held, the oldest after the first
    /// [`MAX_REPORT_GAVE_UP`] is forgotten.
    pub fn gave_up(&self, id: u64) {
        let mut ids = self.gave_up.borrow_mut();
        if ids.len() >= MAX_GAVE_UP_HELD {
            ids.remove(MAX_REPORT_GAVE_UP);
        }
        ids.push(id);
    }

    /// This worker's reporter id.
    pub fn reporter(&self) -> &str {
        &self.reporter
    }

    /// The counts not yet accepted by the backend: the table plus the report in flight or
    /// waiting to be sent again.
    pub fn unreported(&self) -> Vec<Counts> {
        let mut all = self.counts.borrow().clone();
        let in_flight = self.in_flight.borrow();
        let retry = self.retry.borrow();
        for unsent in in_flight.iter().map(|(_, u)| u).chain(retry.iter()) {
            for (row, c) in all.iter_mut().zip(&unsent.counts) {
                row.add(c);
            }
        }
        all
    }

    /// The report to send now: the one waiting to be sent again, else the table's counts under
    /// the next sequence number (the table starts again from zero); `None` when all is zero.
    fn next_report(&self) -> Option<Unsent> {
        if let Some(unsent) = self.retry.borrow_mut().take() {
            return Some(unsent);
        }
        let mut counts = self.counts.borrow_mut();
        let mut gave_up = self.gave_up.borrow_mut();
        if counts.iter().all(Counts::is_zero) && gave_up.is_empty() {
            return None;
        }
        let zeros = vec![Counts::default(); counts.len()];
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        Some(Unsent {
            seq,
            counts: std::mem::replace(&mut *counts, zeros),
            gave_up: take_named(&mut gave_up),
        })
    }

    /// The tick: sends what accumulated, if anything and if no report is in flight.
    pub fn tick(&self, host: &mut dyn Host, config: &Config) {
        // Failure counts held back by the log's rate limit go out once their 10 s have passed,
        // even when no further failure comes to carry them.
        let lines = self.failures().due(host.now_ns(), config);
        for line in lines {
            host.warn(&line);
        }
        self.settle(host, config);
        if config.report.cluster.is_none() && !config.report.via_exchange {
            return;
        }
        if self.in_flight.borrow().is_some() {
            return;
        }
        let Some(unsent) = self.next_report() else {
            return;
        };
        let report = FilterReport {
            reporter: Some(self.reporter.clone()),
            seq: Some(unsent.seq),
            gave_up: unsent.gave_up.clone(),
            actions: unsent
                .counts
                .iter()
                .zip(&config.actions)
                .filter(|(c, _)| !c.is_zero())
                .map(|(c, action)| ActionCounts {
                    action: action.clone(),
                    leased: c.leased,
                    cached_denied: c.cached_denied,
                    failed_timeout: c.failed_timeout,
                    failed_error: c.failed_error,
                    passed_unchecked: c.passed_unchecked,
                })
                .collect(),
        };
        let sent = serde_json::to_vec(&report)
            .map_err(|e| format!("encode: {e}"))
            .and_then(|body| match &config.report.cluster {
                None => host
                    .exchange(&ExchangeCall {
                        path: config.report.path.clone(),
                        body,
                        timeout_ms: config.report.timeout_ms,
                    })
                    .map_err(|f| format!("{} ({})", f.reason.name(), f.seen)),
                Some(cluster) => host.dispatch(&Callout::post_json(
                    cluster,
                    &config.report.path,
                    &config.backend.authority,
                    body,
                    config.report.timeout_ms,
                )),
            });
        match sent {
            Ok(token) => *self.in_flight.borrow_mut() = Some((token, unsent)),
            Err(e) => self.failed(host, unsent, &format!("could not start: {e}")),
        }
    }

    /// The answer to a callout of the root's: a cost commit's (`cost.rs`) or the report's
    /// (`status` is `:status`; a timeout arrives as 504 or without one).
    pub fn on_report_response(&self, host: &mut dyn Host, token: u32, status: Option<&[u8]>) {
        if self.commits().answered(host, token, status) {
            return;
        }
        let Some((_, sent)) = self.in_flight.borrow_mut().take_if(|(t, _)| *t == token) else {
            return;
        };
        let status = status.and_then(|s| std::str::from_utf8(s).ok());
        if status.is_some_and(|s| s.len() == 3 && s.starts_with('2')) {
            host.count(Counter::ReportsSent);
            self.failing.set(false);
        } else {
            let status = status.unwrap_or("none");
            self.failed(host, sent, &format!("answered status {status}"));
        }
    }

    /// The answer to a report or commit sent as an exchange (`report.via_exchange`), read as
    /// an HTTP callout's.
    pub fn on_exchange_report(&self, host: &mut dyn Host, token: u32, outcome: &Outcome) {
        let status = exchange::http_status(outcome);
        self.on_report_response(host, token, status.as_deref());
    }

    /// A report that did not go through: it is sent again, as it is, at the next tick (its
    /// counts are not merged into the table: a copy the backend did count must keep its `seq`).
    fn failed(&self, host: &mut dyn Host, sent: Unsent, why: &str) {
        *self.retry.borrow_mut() = Some(sent);
        host.count(Counter::ReportsFailed);
        if !self.failing.replace(true) {
            host.warn(&format!(
                "sluice: count report {why}; it is kept and sent again with the next tick"
            ));
        }
    }
}

#[cfg(test)]
mod tests;
