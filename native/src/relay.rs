//! Count reports without `on_tick`: the dynamic-module ABI gives a worker no timer, so the
//! configuration's timer thread wakes Envoy's main thread (the configuration's scheduler) every
//! `report.period_ms`, and the main thread runs each worker's report turn (`report::Worker::tick`)
//! under that worker's lock ([`WorkerBound`]), sending the report as a config-level HTTP callout
//! (a request's own callout would be cancelled when its request ends). The answer comes back on
//! the main thread and is handed to the worker the same way.
//!
//! Delay: as the wasm build's tick: a count goes out within one `report.period_ms` (plus the
//! main thread's scheduling), idle workers included.
//!
//! Cost commits (`sluice_filter::cost`) ride the same turn: a configuration with cost routes
//! ticks every [`COMMIT_TICK_MS`] (whether or not reports are on, as the wasm root's tick), and
//! each turn sends every worker's queued commits; the report part runs once per
//! `report.period_ms` of those turns. A commit's answer comes back like a report's and is handed
//! to its worker's commit queue (`Worker::on_report_response`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_core::exchange::{ExchangeRequest, CALL_PATH};
use sluice_filter::config::Config;
use sluice_filter::failure::Failure;
use sluice_filter::host::{
    Callout, CasError, Counter, ExchangeCall, GrpcCall, Host, COMMIT_TICK_MS,
};

use crate::abi::{self, ConfigHandle, Level, Scheduler, WorkerBound};
use crate::glue::{CalloutAnswer, LocalState, SharedLocal};
use crate::grpc;
use crate::timer::Timer;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A report in flight: its worker, its token, whether it went as an exchange.
type InFlight = (Weak<WorkerBound<LocalState>>, u32, bool);

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
    workers: Mutex<Vec<Weak<WorkerBound<LocalState>>>>,
    in_flight: Mutex<HashMap<u64, InFlight>>,
    /// Answers that came inside their own `http_callout` (before their id was known).
    early: Mutex<HashMap<u64, CalloutAnswer>>,
    timer: Mutex<Option<Timer>>,
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
        let timer = scheduler.zip(period_ms).map(|(scheduler, period_ms)| {
            // The scheduler is deleted on the timer's thread, after its last commit.
            Timer::start(
                "sluice-reports",
                Duration::from_millis(period_ms),
                move || scheduler.commit(0),
            )
        });
        Reports {
            exchange_cluster: config.backend.cluster.clone(),
            authority: config.backend.authority.clone(),
            report_period_ns: config.report.period_ms.saturating_mul(1_000_000),
            next_report_ns: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            in_flight: Mutex::new(HashMap::new()),
            early: Mutex::new(HashMap::new()),
            timer: Mutex::new(timer),
        }
    }

    /// Stops the timer (the configuration goes away; called on the main thread).
    pub fn stop(&self) {
        drop(locked(&self.timer).take());
    }

    /// A worker starts using this configuration.
    pub fn register(&self, worker: &SharedLocal) {
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
        let workers: Vec<SharedLocal> = locked(&self.workers)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for worker in workers {
            let state = worker.lock();
            let mut host = MainHost {
                handle,
                counters,
                reports: self,
                sent: Vec::new(),
            };
            if report_turn {
                state.worker.tick(&mut host, &state.config);
            } else {
                state.worker.commits().send(&mut host, &state.config);
            }
            for (id, exchange) in std::mem::take(&mut host.sent) {
                let Ok(token) = u32::try_from(id) else {
                    continue;
                };
                let early = locked(&self.early).remove(&id);
                match early {
                    Some(answer) => {
                        let status = status_of(&answer, exchange);
                        state
                            .worker
                            .on_report_response(&mut host, token, status.as_deref());
                    }
                    None => {
                        locked(&self.in_flight)
                            .insert(id, (Arc::downgrade(&worker), token, exchange));
                    }
                }
            }
        }
    }

    /// A report callout answered (main thread).
    pub fn on_answer(
        &self,
        handle: ConfigHandle,
        counters: &[Option<usize>],
        callout_id: u64,
        answer: CalloutAnswer,
    ) {
        let Some((worker, token, exchange)) = locked(&self.in_flight).remove(&callout_id) else {
            locked(&self.early).insert(callout_id, answer);
            return;
        };
        let Some(worker) = worker.upgrade() else {
            return;
        };
        let status = status_of(&answer, exchange);
        let state = worker.lock();
        let mut host = MainHost {
            handle,
            counters,
            reports: self,
            sent: Vec::new(),
        };
        state
            .worker
            .on_report_response(&mut host, token, status.as_deref());
    }
}

/// The HTTP status a report was answered with (`None`: no answer).
fn status_of(answer: &CalloutAnswer, exchange: bool) -> Option<Vec<u8>> {
    if exchange {
        let reply = grpc::read(answer);
        sluice_filter::exchange::unary_reply(reply.code, reply.message.as_deref(), &reply.bytes)
            .ok()
            .map(|(status, _)| status.to_string().into_bytes())
    } else if answer.completed {
        answer.header(":status").map(<[u8]>::to_vec)
    } else {
        None
    }
}

/// The [`Host`] a worker's report turn runs against on the main thread: config-level callouts
/// and counters; no request.
struct MainHost<'a> {
    handle: ConfigHandle,
    counters: &'a [Option<usize>],
    reports: &'a Reports,
    /// Callouts started by this turn: (id, sent as an exchange).
    sent: Vec<(u64, bool)>,
}

impl MainHost<'_> {
    fn start(&mut self, result: Result<u64, u32>, exchange: bool) -> Result<u32, String> {
        let id = result.map_err(|code| format!("Envoy said {code}"))?;
        let token = u32::try_from(id).map_err(|_| "callout id out of range".to_owned())?;
        self.sent.push((id, exchange));
        Ok(token)
    }
}

/// The wall clock, ns since the Unix epoch (0 before it).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Host for MainHost<'_> {
    fn now_ns(&self) -> u64 {
        now_ns()
    }
    fn each_request_header(&self, _name: &str, _each: &mut dyn FnMut(&[u8])) {}
    fn client_address(&self) -> Option<Vec<u8>> {
        None
    }
    fn shared_get(&self, _key: &str) -> Option<Vec<u8>> {
        None
    }
    fn shared_set(&mut self, _key: &str, _value: &[u8]) {}
    fn shared_get_versioned(&self, _key: &str) -> Option<(Vec<u8>, u32)> {
        None
    }
    fn shared_set_if(&mut self, _key: &str, _value: &[u8], _version: u32) -> Result<(), CasError> {
        Err(CasError::Failed)
    }
    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        let headers: Vec<(&str, &str)> =
            call.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let result = self
            .handle
            .http_callout(&call.cluster, &headers, &call.body, call.timeout_ms);
        self.start(result, false)
    }
    fn dispatch_grpc(&mut self, _call: &GrpcCall) -> Result<u32, String> {
        Err("reports are not sent over RLS".to_owned())
    }
    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        let message = prost::Message::encode_to_vec(&ExchangeRequest {
            id: 0,
            path: call.path.clone(),
            body: call.body.clone(),
        });
        let headers = grpc::headers(CALL_PATH, &self.reports.authority);
        let result = self.handle.http_callout(
            &self.reports.exchange_cluster,
            &headers,
            &grpc::frame(&message),
            call.timeout_ms,
        );
        self.start(result, true)
            .map_err(|e| Failure::not_started(&e))
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
