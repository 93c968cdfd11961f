//! Count reports without `on_tick`: the dynamic-module ABI gives a worker no timer, so the
//! configuration's timer thread wakes Envoy's main thread (the configuration's scheduler) every
//! `report.period_ms`, and the main thread runs each worker's report turn (`report::Worker::tick`)
//! under that worker's lock ([`WorkerBound`]), sending the report as a config-level HTTP callout
//! (a request's own callout would be cancelled when its request ends). The answer comes back on
//! the main thread and is handed to the worker the same way.
//!
//! Delay: as the wasm build's tick: a count goes out within one `report.period_ms` (plus the
//! main thread's scheduling).
//!
//! Only when there is work: the timer does not tick on its own. A worker that ran a request's
//! flow pokes it ([`Reports::poke`]: the flow may have counted something, queued a commit or held
//! back a failure line), which asks for a turn within one period; each turn (and each answer)
//! asks again for what it leaves behind ([`next_tick`]): commits still queued or in flight,
//! counts not yet accepted (at the next report turn), failure lines held back. An idle
//! configuration's main thread is not woken (`timer.rs` says why a poke racing a turn is kept).
//!
//! Cost commits (`sluice_filter::cost`) ride the same turn: with cost routes the timer's period
//! is [`COMMIT_TICK_MS`] (whether or not reports are on, as the wasm root's tick), so a queued
//! commit goes out within it, and each turn sends every worker's queued commits; the report part
//! runs at most once per `report.period_ms` of those turns. A commit's answer comes back like a report's and is handed
//! to its worker's commit queue (`Worker::on_report_response`).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use sluice_core::exchange::CALL_PATH;
use sluice_filter::config::Config;
use sluice_filter::exchange::{self, ExchangeStart, Route};
use sluice_filter::failure::log::LOG_EVERY_NS;
use sluice_filter::failure::Failure;
use sluice_filter::host::{
    Callout, CasError, Counter, ExchangeCall, GrpcCall, Host, COMMIT_TICK_MS,
};
use sluice_filter::report::Counts;

use crate::abi::{self, ConfigHandle, Level, LocalState, Scheduler, WorkerBound};
use crate::copied::CalloutAnswer;
use crate::grpc;
use crate::shared;
use crate::timer::{now_ns, Alarm, Timer};

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A report in flight: its worker, its token, how it went.
type InFlight = (Weak<WorkerBound>, u32, Via);

/// How a report or commit went to the backend, which says how its answer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// A plain HTTP callout (`report.cluster`): its `:status`.
    Http,
    /// A unary exchange (gRPC, framed by hand): its reply's status, or no answer.
    Exchange,
}

/// Whether reports are sent (else counts are never taken out of the table: not work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reporting {
    /// `report.cluster` or `report.via_exchange`: counts go out.
    On,
    /// No reports: the turn only carries commits, lease expiries and held lines.
    Off,
}

/// The main thread's side of one configuration's reports.
#[derive(Debug)]
pub struct Reports {
    /// Where exchanges (reports and commits with `protocol: grpc_stream`) go: the backend's
    /// gRPC listener. A `report.cluster` is the decision listener: reports to it are plain HTTP
    /// callouts, never exchanges.
    exchange_cluster: String,
    authority: String,
    /// `report.period_ms` in ns, and when the next report turn is due (the tick may be faster:
    /// cost commits).
    report_period_ns: u64,
    next_report_ns: AtomicU64,
    workers: Mutex<Vec<Weak<WorkerBound>>>,
    in_flight: Mutex<HashMap<u64, InFlight>>,
    /// Answers that came inside their own `http_callout` (before their id was known).
    early: Mutex<HashMap<u64, CalloutAnswer>>,
    timer: Mutex<Option<Timer>>,
    /// Asks the timer for a turn (`None`: no timer, nothing ticks).
    alarm: Option<Alarm>,
    /// Whether reports are sent.
    reporting: Reporting,
}

/// What a worker leaves for a later turn, read under its lock after its turn (or an answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Left {
    /// Commits queued for a retry or in flight (an answer may queue a retry).
    commits: bool,
    /// Counts not yet accepted by the backend (the table, the report in flight or to resend).
    counts: bool,
    /// Failure lines held back by the log's once-per-10-s limit.
    held_lines: bool,
    /// When the first lease grant the worker watches expires (its units go back then).
    lease_due_ns: Option<u64>,
}

impl Left {
    fn of(state: &LocalState, reporting: Reporting, now_ns: u64) -> Left {
        let worker = state.worker();
        Left {
            commits: worker.commits().queued_or_sent() > 0,
            counts: reporting == Reporting::On
                && worker.unreported().iter().any(|c| *c != Counts::default()),
            // A held line is due at most LOG_EVERY_NS after its reason's last line: asking a copy
            // of the log for the lines due then finds every one held now.
            held_lines: !worker
                .failures()
                .clone()
                .due(now_ns.saturating_add(LOG_EVERY_NS), state.config())
                .is_empty(),
            lease_due_ns: worker.watch().due_ns(),
        }
    }
}

/// When the next turn is due for what `left` says, after a turn or an answer at `now_ns`
/// (`period_ns`: the timer's period; `next_report_ns`: when a report may go out next): commits
/// and held failure lines one period later (their cadence, as the wasm build's tick); counts at
/// the next report turn (never sooner than a period: no turn-after-turn while a report is in
/// flight); `None`: nothing left, no turn.
fn next_tick(left: Left, now_ns: u64, period_ns: u64, next_report_ns: u64) -> Option<u64> {
    let soon = now_ns.saturating_add(period_ns);
    let mut at = None::<u64>;
    let mut ask = |t: u64| at = Some(at.map_or(t, |a| a.min(t)));
    if left.commits || left.held_lines {
        ask(soon);
    }
    if left.counts {
        ask(next_report_ns.max(soon));
    }
    if let Some(due) = left.lease_due_ns {
        ask(due.max(soon));
    }
    at
}

impl Reports {
    /// The reports of `config`, woken through `scheduler` every `report.period_ms`.
    pub fn new(scheduler: Option<Scheduler>, config: &Config) -> Reports {
        // As the wasm build's tick: only when reports are on or a route meters cost (else its
        // held-back failure lines wait for the next failure to carry them); at most
        // COMMIT_TICK_MS apart with cost routes.
        let reports_on = config.report.cluster.is_some() || config.report.via_exchange;
        let mut period_ms = reports_on.then_some(config.report.period_ms);
        if config.meters_cost() {
            period_ms = Some(period_ms.map_or(COMMIT_TICK_MS, |p| p.min(COMMIT_TICK_MS)));
        }
        if config.leases() && period_ms.is_none() {
            // Expired lease grants' units go back on a turn (`lease::watch`).
            period_ms = Some(config.report.period_ms);
        }
        let timer = scheduler.zip(period_ms).map(|(scheduler, period_ms)| {
            // Ticks only when asked (`poke`, `next_tick`), at most one period after.
            // The scheduler is deleted on the timer's thread, after its last commit.
            Timer::start(
                "sluice-reports",
                Duration::from_millis(period_ms),
                move || scheduler.commit(0),
            )
        });
        let alarm = timer.as_ref().map(Timer::alarm);
        Reports {
            exchange_cluster: config.backend.cluster.clone(),
            authority: config.backend.authority.clone(),
            report_period_ns: config.report.period_ms.saturating_mul(1_000_000),
            next_report_ns: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            in_flight: Mutex::new(HashMap::new()),
            early: Mutex::new(HashMap::new()),
            timer: Mutex::new(timer),
            alarm,
            reporting: if reports_on {
                Reporting::On
            } else {
                Reporting::Off
            },
        }
    }

    /// A worker ran a request's flow, which may have left work for the main thread's turn
    /// (counted an event, queued a commit, held back a failure line): a turn within one period.
    /// One atomic load while a turn is already asked for. Called after that work was made
    /// visible under the worker's lock (see `timer.rs`).
    pub fn poke(&self) {
        if let Some(alarm) = &self.alarm {
            alarm.poke();
        }
    }

    /// Asks for the turn `left` needs, if any (after `left` was read under the worker's lock).
    fn ask(&self, left: Left, now_ns: u64) {
        let Some(alarm) = &self.alarm else {
            return;
        };
        let next_report = self.next_report_ns.load(Ordering::Relaxed);
        if let Some(at) = next_tick(left, now_ns, alarm.period_ns(), next_report) {
            alarm.arm_at(at);
        }
    }

    /// Stops the timer (the configuration goes away; called on the main thread).
    pub fn stop(&self) {
        drop(locked(&self.timer).take());
    }

    /// A worker starts using this configuration.
    pub fn register(&self, worker: &Arc<WorkerBound>) {
        let mut workers = locked(&self.workers);
        workers.retain(|w| w.strong_count() > 0);
        workers.push(Arc::downgrade(worker));
    }

    /// The main thread's turn: every worker's queued cost commits, and (once per
    /// `report.period_ms`) its report turn.
    pub fn tick(&self, handle: ConfigHandle, counters: &[Option<usize>]) {
        let now = now_ns();
        let report_turn = now >= self.next_report_ns.load(Ordering::Relaxed);
        if report_turn {
            self.next_report_ns
                .store(now.saturating_add(self.report_period_ns), Ordering::Relaxed);
        }
        let workers: Vec<Arc<WorkerBound>> = locked(&self.workers)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut left = Left::default();
        for worker in workers {
            let state = worker.lock();
            let mut host = MainHost {
                handle,
                counters,
                reports: self,
                sent: Vec::new(),
            };
            if report_turn {
                state.worker().tick(&mut host, state.config());
            } else {
                state.worker().settle(&mut host, state.config());
            }
            for (id, via) in std::mem::take(&mut host.sent) {
                let Ok(token) = u32::try_from(id) else {
                    continue;
                };
                let early = locked(&self.early).remove(&id);
                match early {
                    Some(answer) => {
                        let status = status_of(&answer, via);
                        state
                            .worker()
                            .on_report_response(&mut host, token, status.as_deref());
                    }
                    None => {
                        locked(&self.in_flight).insert(id, (Arc::downgrade(&worker), token, via));
                    }
                }
            }
            let this = Left::of(&state, self.reporting, now);
            left.commits |= this.commits;
            left.counts |= this.counts;
            left.held_lines |= this.held_lines;
            left.lease_due_ns = match (left.lease_due_ns, this.lease_due_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.ask(left, now);
    }

    /// A report callout answered (main thread).
    pub fn on_answer(
        &self,
        handle: ConfigHandle,
        counters: &[Option<usize>],
        callout_id: u64,
        answer: CalloutAnswer,
    ) {
        let Some((worker, token, via)) = locked(&self.in_flight).remove(&callout_id) else {
            locked(&self.early).insert(callout_id, answer);
            return;
        };
        let Some(worker) = worker.upgrade() else {
            return;
        };
        let status = status_of(&answer, via);
        let state = worker.lock();
        let mut host = MainHost {
            handle,
            counters,
            reports: self,
            sent: Vec::new(),
        };
        state
            .worker()
            .on_report_response(&mut host, token, status.as_deref());
        // A failed report or commit is sent again at a later turn.
        let now = now_ns();
        self.ask(Left::of(&state, self.reporting, now), now);
    }
}

/// The HTTP status a report was answered with (`None`: no answer).
fn status_of(answer: &CalloutAnswer, via: Via) -> Option<Vec<u8>> {
    match via {
        Via::Exchange => {
            let reply = grpc::read(answer);
            let outcome = exchange::unary_reply(reply.code, reply.message.as_deref(), &reply.bytes);
            exchange::http_status(&outcome)
        }
        Via::Http if answer.completed => answer.header(":status").map(<[u8]>::to_vec),
        Via::Http => None,
    }
}

/// The [`Host`] a worker's report turn runs against on the main thread: config-level callouts
/// and counters; no request.
struct MainHost<'a> {
    handle: ConfigHandle,
    counters: &'a [Option<usize>],
    reports: &'a Reports,
    /// Callouts started by this turn: (id, how).
    sent: Vec<(u64, Via)>,
}

impl MainHost<'_> {
    fn start(&mut self, result: Result<u64, u32>, via: Via) -> Result<u32, String> {
        let id = result.map_err(|code| format!("Envoy said {code}"))?;
        let token = u32::try_from(id).map_err(|_| "callout id out of range".to_owned())?;
        self.sent.push((id, via));
        Ok(token)
    }
}

/// Reports and commits sent as exchanges go unary from the main thread (no stream is offered
/// them, none is told of a failure); the policy is `sluice_filter::exchange::start`'s.
impl ExchangeStart for MainHost<'_> {
    fn offer_to_stream(&mut self, _call: &ExchangeCall) -> Option<Route> {
        None
    }
    fn call_unary(&mut self, message: &[u8], timeout_ms: u64) -> Result<u32, String> {
        let reports = self.reports;
        let headers = grpc::headers(CALL_PATH, &reports.authority);
        let result = self.handle.http_callout(
            &reports.exchange_cluster,
            &headers,
            &grpc::frame(message),
            timeout_ms,
        );
        self.start(result, Via::Exchange)
    }
    fn unary_not_started(&mut self, _failure: &Failure) {}
    fn count_unary(&mut self) {}
}

impl Host for MainHost<'_> {
    fn now_ns(&self) -> u64 {
        now_ns()
    }
    fn each_request_header(&self, _name: &str, _each: &mut dyn FnMut(&[u8])) {}
    fn client_address(&self) -> Option<Vec<u8>> {
        None
    }
    // The process-wide shared state, as the workers' hosts use it: the turn sweeps expired
    // lease grants out of the lease table (`sluice_filter::lease::watch`).
    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        shared::store().get(key).map(|(v, _)| v)
    }
    fn shared_set(&mut self, key: &str, value: &[u8]) {
        shared::store().set(key, value)
    }
    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        shared::store().get(key)
    }
    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        shared::store().set_if(key, value, version)
    }
    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        let headers: Vec<(&str, &str)> =
            call.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let result = self
            .handle
            .http_callout(&call.cluster, &headers, &call.body, call.timeout_ms);
        self.start(result, Via::Http)
    }
    fn dispatch_grpc(&mut self, _call: &GrpcCall) -> Result<u32, String> {
        Err("reports are not sent over RLS".to_owned())
    }
    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        exchange::start(self, call)
    }
    fn send_reply(&mut self, _status: u16, _headers: &[(&str, &str)], _body: &[u8]) {}
    fn resume(&mut self) {}
    fn set_request_header(&mut self, _name: &str, _value: &str) {}
    fn remove_request_header(&mut self, _name: &str) {}
    fn add_response_header(&mut self, _name: &str, _value: &[u8]) {}
    fn count(&mut self, counter: Counter) {
        if let Some(Some(id)) = self.counters.get(counter.index()) {
            self.handle.increment(*id);
        }
    }
    fn count_by(&mut self, counter: Counter, n: u64) {
        if let Some(Some(id)) = self.counters.get(counter.index()) {
            self.handle.increment_by(*id, n);
        }
    }
    fn warn(&self, message: &str) {
        abi::log(Level::Warn, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_turn_is_asked_for_only_when_work_is_left() {
        let now = 90_000 * MS;
        let period = 20 * MS;
        let next_report = now + 700 * MS;
        let none = Left::default();
        // Nothing left: no turn (an idle configuration's main thread sleeps).
        assert_eq!(next_tick(none, now, period, next_report), None);
        // Commits (a retry, or an answer to come) and held failure lines: one period on.
        let commits = Left {
            commits: true,
            ..none
        };
        assert_eq!(
            next_tick(commits, now, period, next_report),
            Some(now + period)
        );
        let held = Left {
            held_lines: true,
            ..none
        };
        assert_eq!(
            next_tick(held, now, period, next_report),
            Some(now + period)
        );
        // Counts: at the next report turn.
        let counts = Left {
            counts: true,
            ..none
        };
        assert_eq!(
            next_tick(counts, now, period, next_report),
            Some(next_report)
        );
        // ... never sooner than a period (a report in flight keeps counts unreported; its
        // answer asks again).
        assert_eq!(next_tick(counts, now, period, now - MS), Some(now + period));
        assert_eq!(next_tick(counts, now, period, 0), Some(now + period));
        // Several: the earliest.
        let all = Left {
            commits: true,
            counts: true,
            held_lines: true,
            lease_due_ns: Some(now + 10 * period),
        };
        assert_eq!(next_tick(all, now, period, next_report), Some(now + period));
        // A watched lease grant: when it expires, and never sooner than a period.
        let lease = Left {
            lease_due_ns: Some(now + 3 * period),
            ..none
        };
        assert_eq!(
            next_tick(lease, now, period, next_report),
            Some(now + 3 * period)
        );
        let overdue = Left {
            lease_due_ns: Some(now - MS),
            ..none
        };
        assert_eq!(
            next_tick(overdue, now, period, next_report),
            Some(now + period)
        );
    }
}
