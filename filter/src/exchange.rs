//! The exchange client: one long-lived gRPC stream per worker to the backend's
//! `sluice.v1.DecisionExchange/Stream` (`protocol: grpc_stream`), carrying the decision API's
//! requests as messages ([`sluice_core::exchange`]).
//!
//! Why: an HTTP (or unary gRPC) callout makes Envoy open, route and tear down an upstream stream
//! per request; a message on a stream that is already open costs Envoy one DATA frame each way.
//!
//! How it fits proxy-wasm: a stream belongs to the root context that opened it (one per worker),
//! so answers arrive at the root; [`Exchanger`] remembers which request context waits for which
//! message id, and the root hands each answer to that context (`wasm/src/abi/exchange_glue.rs`
//! switches to it with `set_effective_context`; the native host keeps the stream on Envoy's main
//! thread, `native/src/stream.rs`). Envoy has no per-message timeout on a stream, so the root's
//! tick answers overdue requests as timed out ([`Exchanger::expired`]), at most a tick late.
//!
//! While no stream is open (before the first tick, after the backend closed it, or when
//! [`MAX_WAITING`] requests are in flight) [`Exchanger::send`] routes the request as one unary
//! call (`DecisionExchange/Call`) instead. A stream that closes fails every request waiting on it
//! at once, classified by the close's gRPC status (their failure mode applies then, not at their
//! deadline); so does a send that fails, for the requests waiting on that stream.
//!
//! # Backoff
//!
//! A backend that keeps failing must not be hammered: a closed stream is reopened after
//! [`REOPEN_FIRST_NS`], doubling per stream that failed without working, up to
//! [`REOPEN_MAX_NS`]; a stream that worked (delivered an answer, or lived
//! [`WORKED_AFTER_NS`]) or a unary call that was answered resets it. While the stream is down
//! for a reason that will not fix itself per request (`failure::Reason::persists`: the cluster
//! is missing, unreachable, or speaks another protocol) a request does not make a unary call: it
//! fails at once with that reason ([`Route::Fail`]), except one unary probe per backoff interval.
//! A probe that is answered clears the reason and brings the reopen forward to the next tick, so
//! decisions return to the stream promptly when the backend comes back.

use std::collections::HashMap;

use prost::Message;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest};

use crate::config::Protocol;
use crate::failure::{grpc, Failure};

mod start;

pub use start::{start, unary_message, ExchangeStart};

/// Requests one worker may have waiting on its stream; past it, requests go as unary calls.
pub const MAX_WAITING: usize = 4096;

/// The pause before the first reopen after a stream failed (closed or could not open).
pub const REOPEN_FIRST_NS: u64 = 100_000_000;

/// The longest pause between two attempts to open the stream (and between two unary probes).
pub const REOPEN_MAX_NS: u64 = 5_000_000_000;

/// A stream open this long before it closed counts as having worked (its close resets the
/// backoff), even if it answered nothing (an idle worker).
pub const WORKED_AFTER_NS: u64 = 10_000_000_000;

/// An exchange's outcome (a reply on the stream, or a unary call's): the reply's HTTP status
/// and body, or the failure. The flow ([`crate::flow::Flow::on_exchange_answer`]) and the
/// count reports and commits ([`crate::report::Worker::on_exchange_report`]) take it as it is,
/// so no host renders the status for them.
pub type Outcome = Result<(u32, Vec<u8>), Failure>;

/// A unary exchange's outcome (`DecisionExchange/Call`): the reply's HTTP status and body, or
/// the failure, from the call's gRPC status (and grpc-message) or a reply that does not decode.
pub fn unary_reply(grpc_status: u32, grpc_message: Option<&str>, bytes: &[u8]) -> Outcome {
    if grpc_status != grpc::OK {
        return Err(Failure::of_grpc(
            Protocol::GrpcStream,
            grpc_status,
            grpc_message,
        ));
    }
    ExchangeReply::decode(bytes)
        .map(|r| (r.status, r.body))
        .map_err(|_| Failure::bad_response("a unary exchange reply that does not decode"))
}

/// An exchange's HTTP status as an HTTP callout's `:status` (the decision API's answers, the
/// reports' and the commits' are read from it); `None` when the call failed (no answer).
pub fn http_status(outcome: &Outcome) -> Option<Vec<u8>> {
    outcome
        .as_ref()
        .ok()
        .map(|(status, _)| status.to_string().into_bytes())
}

/// What the exchanger needs from the host: open a stream, send on it.
pub trait StreamHost {
    /// Opens the stream (`DecisionExchange/Stream`); its token, or why it could not open.
    fn open_stream(&mut self) -> Result<u32, String>;
    /// Sends one message on the open stream `token`.
    fn send_message(&mut self, token: u32, message: &[u8]) -> Result<(), String>;
}

/// A request context waiting for its answer: who to hand it to, and by when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<W> {
    /// The message id (the request's callout token).
    pub id: u32,
    /// The stream it was sent on (Envoy's token): a close of that stream fails it.
    pub stream: u32,
    /// Envoy's id of the request context (for `set_effective_context`).
    pub context_id: u32,
    /// Whoever takes the answer (the request's flow, in the wasm host).
    pub waiter: W,
    /// Past this time the request is answered as timed out.
    pub deadline_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    /// No stream; the next attempt to open one is not before this time.
    Closed { retry_at_ns: u64 },
    /// Open (Envoy's token), since `opened_ns`; `worked` once an answer arrived on it.
    Open {
        token: u32,
        opened_ns: u64,
        worked: bool,
    },
}

/// Where [`Exchanger::send`] sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// On the stream, with this message id (the request's callout token).
    Stream(u32),
    /// Nowhere: the caller makes the exchange as one unary call (no stream, the waiting table
    /// is full, or this is the backoff interval's probe).
    Unary,
    /// Nowhere: the stream is down for this reason, which will not fix itself per request; the
    /// failure mode applies at once.
    Fail(Failure),
}

/// What [`Exchanger::send`] did.
#[derive(Debug)]
pub struct Sent<W> {
    /// Where the request went.
    pub route: Route,
    /// When the send failed: the stream is given up, and every request waiting on it fails now,
    /// with this failure.
    pub orphaned: Option<(Failure, Vec<Waiting<W>>)>,
}

/// A stream closed: the failure (from its gRPC status) and the requests waiting on it.
#[derive(Debug)]
pub struct Closed<W> {
    /// Why, classified from the close's gRPC status and message.
    pub failure: Failure,
    /// The requests that waited on that stream, to be failed now (id order).
    pub waiting: Vec<Waiting<W>>,
    /// Whether it was the worker's current stream (a close of an older one only fails its own
    /// requests).
    pub current: bool,
}

/// One worker's stream and the requests waiting on it.
#[derive(Debug)]
pub struct Exchanger<W> {
    stream: Stream,
    next_id: u32,
    waiting: HashMap<u32, Waiting<W>>,
    /// The pause before the next reopen (and between unary probes while down).
    backoff_ns: u64,
    /// Why the stream is down, when that will not fix itself per request.
    down: Option<Failure>,
    /// While down: no unary probe before this time.
    next_probe_ns: u64,
}

impl<W> Default for Exchanger<W> {
    fn default() -> Self {
        Exchanger {
            stream: Stream::Closed { retry_at_ns: 0 },
            next_id: 1,
            waiting: HashMap::new(),
            backoff_ns: REOPEN_FIRST_NS,
            down: None,
            next_probe_ns: 0,
        }
    }
}

impl<W> Exchanger<W> {
    /// The open stream's token, if any.
    pub fn token(&self) -> Option<u32> {
        match self.stream {
            Stream::Open { token, .. } => Some(token),
            Stream::Closed { .. } => None,
        }
    }

    /// Requests waiting for an answer.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Why the stream is down, when requests fail at once (see [`Route::Fail`]).
    pub fn down(&self) -> Option<&Failure> {
        self.down.as_ref()
    }

    /// The pause the next failure would wait before reopening.
    pub fn backoff_ns(&self) -> u64 {
        self.backoff_ns
    }

    /// The stream failed at `now_ns` (closed, could not open, or a send failed): reopen after
    /// the backoff, which then doubles (up to [`REOPEN_MAX_NS`]).
    fn failed(&mut self, now_ns: u64, failure: &Failure) {
        self.stream = Stream::Closed {
            retry_at_ns: now_ns.saturating_add(self.backoff_ns),
        };
        self.backoff_ns = self.backoff_ns.saturating_mul(2).min(REOPEN_MAX_NS);
        self.down = failure.reason.persists().then(|| failure.clone());
    }

    /// The backend answered: it is there, and it speaks the protocol.
    fn worked(&mut self) {
        self.backoff_ns = REOPEN_FIRST_NS;
        self.down = None;
        self.next_probe_ns = 0;
    }

    /// Opens the stream if none is open and its backoff has passed (the root calls this on
    /// every tick). `Some` when it could not open (no such cluster): it is retried after the
    /// backoff, and requests fail at once meanwhile (but for the probes).
    pub fn ensure_open(&mut self, host: &mut dyn StreamHost, now_ns: u64) -> Option<Failure> {
        let Stream::Closed { retry_at_ns } = self.stream else {
            return None;
        };
        if now_ns < retry_at_ns {
            return None;
        }
        match host.open_stream() {
            Ok(token) => {
                self.stream = Stream::Open {
                    token,
                    opened_ns: now_ns,
                    worked: false,
                };
                None
            }
            Err(e) => {
                let failure = Failure::not_started(&e);
                self.failed(now_ns, &failure);
                Some(failure)
            }
        }
    }

    /// Sends `POST {path}` with `body` on the stream for the request context `context_id`; see
    /// [`Route`] for where it went. A failed send gives up the stream: the requests waiting on
    /// it come back in [`Sent::orphaned`], to be failed now, and this one goes unary.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        host: &mut dyn StreamHost,
        path: &str,
        body: Vec<u8>,
        context_id: u32,
        waiter: W,
        deadline_ns: u64,
        now_ns: u64,
    ) -> Sent<W> {
        let mut orphaned = None;
        if let Some(token) = self.token() {
            if self.waiting.len() >= MAX_WAITING {
                return Sent {
                    route: Route::Unary,
                    orphaned,
                };
            }
            let id = self.fresh_id();
            let message = ExchangeRequest {
                id: u64::from(id),
                path: path.to_owned(),
                body,
            }
            .encode_to_vec();
            match host.send_message(token, &message) {
                Ok(()) => {
                    let w = Waiting {
                        id,
                        stream: token,
                        context_id,
                        waiter,
                        deadline_ns,
                    };
                    self.waiting.insert(id, w);
                    return Sent {
                        route: Route::Stream(id),
                        orphaned,
                    };
                }
                Err(e) => {
                    let message = format!("sending on the exchange stream failed: {e}");
                    let failure =
                        Failure::of_grpc(Protocol::GrpcStream, grpc::UNAVAILABLE, Some(&message));
                    self.failed(now_ns, &failure);
                    // A send that failed says nothing lasting about the backend: unary calls
                    // go on until the reopen tells.
                    self.down = None;
                    orphaned = Some((failure, self.take_waiting(token)));
                }
            }
        }
        let route = match &self.down {
            Some(failure) if now_ns < self.next_probe_ns => Route::Fail(failure.clone()),
            Some(_) => {
                self.next_probe_ns = now_ns.saturating_add(self.backoff_ns);
                Route::Unary
            }
            None => Route::Unary,
        };
        Sent { route, orphaned }
    }

    /// Removes the requests waiting on stream `token`, in id order.
    fn take_waiting(&mut self, token: u32) -> Vec<Waiting<W>> {
        self.take(|w| w.stream == token)
    }

    /// Removes the waiting requests `which` picks, in id order.
    fn take(&mut self, which: impl Fn(&Waiting<W>) -> bool) -> Vec<Waiting<W>> {
        let ids: Vec<u32> = self
            .waiting
            .values()
            .filter(|w| which(w))
            .map(|w| w.id)
            .collect();
        let mut taken: Vec<Waiting<W>> = ids
            .iter()
            .filter_map(|id| self.waiting.remove(id))
            .collect();
        taken.sort_by_key(|w| w.id);
        taken
    }

    /// An id not waiting now (ids wrap; 0 is never used).
    fn fresh_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.waiting.contains_key(&id) {
                return id;
            }
        }
    }

    /// A message arrived on stream `token`: the waiting request it answers and the answer, or
    /// `None` for a message that does not decode or answers no one (already timed out). Any
    /// answer shows the stream works: the backoff is reset.
    pub fn on_message(&mut self, token: u32, bytes: &[u8]) -> Option<(Waiting<W>, ExchangeReply)> {
        let Stream::Open {
            token: open,
            ref mut worked,
            ..
        } = self.stream
        else {
            return None;
        };
        if open != token {
            return None;
        }
        let reply = ExchangeReply::decode(bytes).ok()?;
        *worked = true;
        self.worked();
        let id = u32::try_from(reply.id).ok()?;
        let waiting = self.waiting.remove(&id)?;
        Some((waiting, reply))
    }

    /// Stream `token` closed with gRPC `status` and `message` (the backend went away, does not
    /// speak the protocol, or Envoy gave up on it): every request waiting on it, to be failed
    /// now with the close's failure. The worker's current stream is reopened after the backoff.
    pub fn on_close(
        &mut self,
        token: u32,
        status: u32,
        message: Option<&str>,
        now_ns: u64,
    ) -> Closed<W> {
        let failure = Failure::of_grpc(Protocol::GrpcStream, status, message);
        let current = match self.stream {
            Stream::Open {
                token: open,
                opened_ns,
                worked,
            } if open == token => {
                if worked || now_ns.saturating_sub(opened_ns) >= WORKED_AFTER_NS {
                    self.worked();
                }
                self.failed(now_ns, &failure);
                true
            }
            _ => false,
        };
        Closed {
            waiting: self.take_waiting(token),
            failure,
            current,
        }
    }

    /// A unary exchange ended: `Ok` when the backend answered it (whatever the answer: it is
    /// there and speaks the protocol), else how it failed. An answer ends the down state and
    /// brings a pending reopen forward to now; a failure that persists keeps (or starts) it.
    pub fn on_unary(&mut self, result: Result<(), &Failure>, now_ns: u64) {
        match result {
            Ok(()) => {
                if let Stream::Closed { retry_at_ns } = &mut self.stream {
                    *retry_at_ns = (*retry_at_ns).min(now_ns);
                }
                self.worked();
            }
            Err(failure) if failure.reason.persists() && self.token().is_none() => {
                self.down = Some(failure.clone());
            }
            Err(_) => {}
        }
    }

    /// Requests whose deadline has passed at `now_ns`, removed: to be answered as timed out.
    pub fn expired(&mut self, now_ns: u64) -> Vec<Waiting<W>> {
        self.take(|w| w.deadline_ns <= now_ns)
    }
}

#[cfg(test)]
mod tests;
