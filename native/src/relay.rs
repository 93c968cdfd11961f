//! Count reports without `on_tick`: the dynamic-module ABI gives a filter no timer, so a worker
//! looks at its report clock when a request starts (piggy-backing on traffic), and the report it
//! builds is relayed to Envoy's main thread, which sends it as a config-level HTTP callout (a
//! request's own callout would be cancelled when the request ends, usually first).
//!
//! Flow: a worker's `report::Worker::tick` runs against [`ReportHost`], whose `dispatch` /
//! `exchange` queue the call here and wake the main thread through the configuration's
//! scheduler; `on_config_scheduled` sends what is queued; each answer is kept for its worker,
//! which hands it to `report::Worker::on_report_response` at its next request.
//!
//! Delay: a worker's counts go out with its first request at least `report.period_ms` after its
//! last report, and the answer is taken in at its next request; a worker that gets no more
//! requests keeps its last counts until it does (each worker reports only what its own requests
//! counted, so a busy worker is never late by more than one period).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sluice_core::exchange::{ExchangeRequest, CALL_PATH};
use sluice_filter::config::Config;
use sluice_filter::failure::Failure;
use sluice_filter::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};

use crate::abi::{self, ConfigHandle, Level, Scheduler};
use crate::glue::{CalloutAnswer, NativeHost};
use crate::grpc;

/// Reports queued or in flight, per configuration, at most (a backend that never answers cannot
/// grow the queue: each worker has at most one report in flight).
pub const MAX_QUEUED: usize = 4096;

/// A report call waiting for the main thread.
#[derive(Debug)]
enum Outgoing {
    /// `POST /v1/report` over HTTP.
    Http(Callout),
    /// The same as a unary exchange (`protocol: grpc_stream`).
    Exchange(ExchangeCall),
}

/// Answers a worker has not taken in: (token, HTTP status of the report).
type Answers = Vec<(u32, Option<Vec<u8>>)>;

#[derive(Debug)]
struct Queued {
    worker: u64,
    token: u32,
    call: Outgoing,
}

/// The main thread's side of one configuration's reports.
#[derive(Debug)]
pub struct Relay {
    scheduler: Option<Scheduler>,
    cluster: String,
    authority: String,
    queued: Mutex<Vec<Queued>>,
    /// Callout id -> (worker, token, was an exchange).
    in_flight: Mutex<HashMap<u64, (u64, u32, bool)>>,
    /// Worker -> answers not yet taken in: (token, HTTP status of the report).
    answers: Mutex<HashMap<u64, Answers>>,
    next_token: AtomicU32,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Relay {
    /// A relay waking the main thread with `scheduler`.
    pub fn new(scheduler: Option<Scheduler>, config: &Config) -> Relay {
        Relay {
            scheduler,
            cluster: config
                .report
                .cluster
                .clone()
                .unwrap_or_else(|| config.backend.cluster.clone()),
            authority: config.backend.authority.clone(),
            queued: Mutex::new(Vec::new()),
            in_flight: Mutex::new(HashMap::new()),
            answers: Mutex::new(HashMap::new()),
            next_token: AtomicU32::new(1),
        }
    }

    fn queue(&self, worker: u64, call: Outgoing) -> Result<u32, String> {
        let Some(scheduler) = self.scheduler.as_ref() else {
            return Err("no scheduler".to_owned());
        };
        let token = self.next_token.fetch_add(1, Ordering::Relaxed).max(1);
        {
            let mut queued = locked(&self.queued);
            if queued.len() + locked(&self.in_flight).len() >= MAX_QUEUED {
                return Err("too many reports queued".to_owned());
            }
            queued.push(Queued {
                worker,
                token,
                call,
            });
        }
        scheduler.commit(0);
        Ok(token)
    }

    /// The main thread: send every queued report.
    pub fn send_queued(&self, config: ConfigHandle) {
        let queued = std::mem::take(&mut *locked(&self.queued));
        for q in queued {
            let (sent, exchange) = match &q.call {
                Outgoing::Http(c) => {
                    let headers: Vec<(&str, &str)> =
                        c.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                    (
                        config.http_callout(&c.cluster, &headers, &c.body, c.timeout_ms),
                        false,
                    )
                }
                Outgoing::Exchange(e) => {
                    let message = prost::Message::encode_to_vec(&ExchangeRequest {
                        id: 0,
                        path: e.path.clone(),
                        body: e.body.clone(),
                    });
                    let headers = grpc::headers(CALL_PATH, &self.authority);
                    (
                        config.http_callout(
                            &self.cluster,
                            &headers,
                            &grpc::frame(&message),
                            e.timeout_ms,
                        ),
                        true,
                    )
                }
            };
            match sent {
                Ok(id) => {
                    locked(&self.in_flight).insert(id, (q.worker, q.token, exchange));
                }
                Err(code) => {
                    abi::log(
                        Level::Warn,
                        &format!("sluice: a count report could not start (Envoy said {code})"),
                    );
                    self.answer(q.worker, q.token, None);
                }
            }
        }
    }

    /// The main thread: a report callout answered.
    pub fn on_answer(&self, callout_id: u64, answer: &CalloutAnswer) {
        let Some((worker, token, exchange)) = locked(&self.in_flight).remove(&callout_id) else {
            return;
        };
        let status = if exchange {
            let reply = grpc::read(answer);
            sluice_filter::exchange::unary_reply(reply.code, reply.message.as_deref(), &reply.bytes)
                .ok()
                .map(|(status, _)| status.to_string().into_bytes())
        } else if answer.completed {
            answer.header(":status").map(<[u8]>::to_vec)
        } else {
            None
        };
        self.answer(worker, token, status);
    }

    fn answer(&self, worker: u64, token: u32, status: Option<Vec<u8>>) {
        locked(&self.answers)
            .entry(worker)
            .or_default()
            .push((token, status));
    }

    /// A worker takes in the answers to its reports.
    pub fn take_answers(&self, worker: u64) -> Answers {
        let mut answers = locked(&self.answers);
        if answers.is_empty() {
            return Vec::new();
        }
        answers.remove(&worker).unwrap_or_default()
    }
}

/// The [`Host`] a worker's report tick runs against: calls are queued for the main thread;
/// everything else is the request's host.
pub struct ReportHost<'a> {
    /// The request whose start gave the worker its turn.
    pub request: &'a mut NativeHost,
    /// The configuration's relay.
    pub relay: Arc<Relay>,
    /// This worker's id in the relay.
    pub worker: u64,
    /// Reports queued by this turn.
    pub queued: u32,
}

impl Host for ReportHost<'_> {
    fn now_ns(&self) -> u64 {
        self.request.now_ns()
    }
    fn request_header(&self, name: &str) -> Vec<Vec<u8>> {
        self.request.request_header(name)
    }
    fn client_address(&self) -> Option<Vec<u8>> {
        self.request.client_address()
    }
    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        self.request.shared_get(key)
    }
    fn shared_set(&mut self, key: &str, value: &[u8]) {
        self.request.shared_set(key, value)
    }
    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.request.shared_get_versioned(key)
    }
    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        self.request.shared_set_if(key, value, version)
    }
    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        let token = self
            .relay
            .queue(self.worker, Outgoing::Http(call.clone()))?;
        self.queued += 1;
        Ok(token)
    }
    fn dispatch_grpc(&mut self, _call: &GrpcCall) -> Result<u32, String> {
        Err("reports are not sent over RLS".to_owned())
    }
    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        let token = self
            .relay
            .queue(self.worker, Outgoing::Exchange(call.clone()))
            .map_err(|e| Failure::not_started(&e))?;
        self.queued += 1;
        Ok(token)
    }
    fn send_reply(&mut self, _status: u16, _headers: &[(&str, &str)], _body: &[u8]) {}
    fn resume(&mut self) {}
    fn set_request_header(&mut self, _name: &str, _value: &str) {}
    fn remove_request_header(&mut self, _name: &str) {}
    fn add_response_header(&mut self, _name: &str, _value: &str) {}
    fn count(&mut self, counter: Counter) {
        self.request.count(counter)
    }
    fn warn(&self, message: &str) {
        self.request.warn(message)
    }
}
