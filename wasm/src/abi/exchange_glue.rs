//! The root context's side of `protocol: grpc_stream`: opens the worker's exchange stream,
//! hands each answer to the request context waiting for it, and answers overdue ones as timed
//! out (the logic, tested natively, is in [`sluice_filter::exchange`]; this is the proxy-wasm glue).
//!
//! A request context is switched to with `set_effective_context` before its flow runs, so its
//! resume or reply acts on its own HTTP stream (Envoy defers both until the VM call returns, as
//! it does for every callout answer the SDK routes this way).

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::types::BufferType;
use sluice_core::exchange::{CALL_METHOD, SERVICE, STREAM_METHOD};

use super::WasmHost;
use sluice_filter::exchange::{ExchangeStart, Exchanger, Outcome, Route, StreamHost, Waiting};
use sluice_filter::failure::Failure;
use sluice_filter::flow::{Flow, MAX_RESPONSE_BODY};
use sluice_filter::host::{Counter, ExchangeCall};

/// One worker's exchanger; the waiters are the request contexts' flows (weak: a request that
/// went away is simply not answered).
pub type SharedExchanger = Rc<RefCell<Exchanger<Weak<RefCell<Flow>>>>>;

/// A request context's way to the worker's stream (set only with `protocol: grpc_stream`).
pub struct ExchangeLink {
    /// The worker's exchanger.
    pub exchanger: SharedExchanger,
    /// Envoy's id of this request's context.
    pub context_id: u32,
    /// This request's flow, to be handed the answer.
    pub flow: Weak<RefCell<Flow>>,
}

/// Hostcalls for the exchanger, made from the root context (a stream opened from a root
/// callback is registered to the root, so its messages come back to it).
struct RootStreams<'a> {
    service: &'a str,
}

impl StreamHost for RootStreams<'_> {
    fn open_stream(&mut self) -> Result<u32, String> {
        hostcalls::open_grpc_stream(self.service, SERVICE, STREAM_METHOD, Vec::new())
            .map_err(|s| format!("{s:?}"))
    }

    fn send_message(&mut self, token: u32, message: &[u8]) -> Result<(), String> {
        hostcalls::send_grpc_stream_message(token, Some(message), false)
            .map_err(|s| format!("{s:?}"))
    }
}

/// How the proxy-wasm host starts an exchange ([`sluice_filter::exchange::start`] holds the
/// policy): a request context offers it to the worker's stream (a root's report has no link and
/// goes unary); a unary `DecisionExchange/Call`'s answer comes back to the calling context's
/// `on_grpc_call_response` (see [`reply_of_call`]).
impl ExchangeStart for WasmHost {
    fn offer_to_stream(&mut self, call: &ExchangeCall) -> Option<Route> {
        let service = self.config.as_deref()?.backend.grpc_service.as_str();
        let link = self.link.as_ref()?;
        let now_ns = self.now();
        let deadline = now_ns.saturating_add(call.timeout_ms.saturating_mul(1_000_000));
        let sent = link.exchanger.borrow_mut().send(
            &mut RootStreams { service },
            &call.path,
            call.body.clone(),
            link.context_id,
            link.flow.clone(),
            deadline,
            now_ns,
        );
        if let Some((failure, orphans)) = sent.orphaned {
            // The stream is given up: the requests waiting on it fail now, then this context
            // is made effective again for its own callout.
            for w in orphans {
                deliver(w, Err(failure.clone()), self);
            }
            let _ = hostcalls::set_effective_context(link.context_id);
        }
        Some(sent.route)
    }

    fn call_unary(&mut self, message: &[u8], timeout_ms: u64) -> Result<u32, String> {
        let Some(config) = self.config.as_deref() else {
            return Err("no configuration".to_owned());
        };
        hostcalls::dispatch_grpc_call(
            &config.backend.grpc_service,
            SERVICE,
            CALL_METHOD,
            Vec::new(),
            Some(message),
            Duration::from_millis(timeout_ms),
        )
        .map_err(|status| format!("{status:?}"))
    }

    fn unary_not_started(&mut self, failure: &Failure) {
        if let Some(link) = self.link.as_ref() {
            link.exchanger
                .borrow_mut()
                .on_unary(Err(failure), self.now());
        }
    }

    fn count_unary(&mut self) {
        self.metrics.increment(Counter::ExchangeUnary);
    }
}

/// The outcome of a unary exchange; its gRPC status and grpc-message classify a failure
/// (`exchange::unary_reply`).
pub fn reply_of_call(status_code: u32, response_size: usize) -> Outcome {
    let message = (status_code != 0).then(grpc_message).flatten();
    let bytes = if status_code == 0 {
        read_buffer(BufferType::GrpcReceiveBuffer, response_size)
    } else {
        Vec::new()
    };
    sluice_filter::exchange::unary_reply(status_code, message.as_deref(), &bytes)
}

/// Tells the worker's exchanger how a unary exchange ended (its probes end the down state).
pub fn note_unary(link: Option<&ExchangeLink>, outcome: &Outcome, now_ns: u64) {
    let Some(link) = link else {
        return;
    };
    link.exchanger
        .borrow_mut()
        .on_unary(outcome.as_ref().map(|_| ()), now_ns);
}

/// The grpc-message of the call or stream that just ended, if the host gives one.
pub fn grpc_message() -> Option<String> {
    hostcalls::get_grpc_status().ok().and_then(|(_, m)| m)
}

/// The first `size` bytes of a buffer the host just filled (a callout's body, a gRPC message),
/// bounded by [`MAX_RESPONSE_BODY`]; empty when there is none or the host will not say.
pub fn read_buffer(buffer: BufferType, size: usize) -> Vec<u8> {
    if size == 0 {
        return Vec::new();
    }
    hostcalls::get_buffer(buffer, 0, size.min(MAX_RESPONSE_BODY))
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The root's tick: open the stream if it is down (after its backoff), and answer every request
/// whose deadline passed as timed out. `Some` when the stream could not open (to be logged).
pub fn tick(
    exchanger: &SharedExchanger,
    service: &str,
    root: &WasmHost,
    root_id: u32,
) -> Option<Failure> {
    let now = root.now();
    let (refused, expired) = {
        let mut ex = exchanger.borrow_mut();
        let was_open = ex.token().is_some();
        let refused = ex.ensure_open(&mut RootStreams { service }, now);
        if !was_open && ex.token().is_some() {
            root.metrics.increment(Counter::ExchangeStreamsOpened);
        }
        (refused, ex.expired(now))
    };
    deliver_all(expired, &Failure::timed_out(), root, root_id);
    refused
}

/// A message on stream `token`: hand it to the request that waits for it.
pub fn on_message(
    exchanger: &SharedExchanger,
    token: u32,
    size: usize,
    root: &WasmHost,
    root_id: u32,
) {
    let bytes = read_buffer(BufferType::GrpcReceiveBuffer, size);
    let answered = exchanger.borrow_mut().on_message(token, &bytes);
    if let Some((waiting, reply)) = answered {
        deliver(waiting, Ok((reply.status, reply.body)), root);
        let _ = hostcalls::set_effective_context(root_id);
    }
}

/// Stream `token` closed with gRPC `status`: every request waiting on it fails now (the failure
/// mode applies), classified by that status. `Some` when it was the worker's current stream
/// (to be logged).
pub fn on_close(
    exchanger: &SharedExchanger,
    token: u32,
    status: u32,
    root: &WasmHost,
    root_id: u32,
) -> Option<Failure> {
    let message = grpc_message();
    let closed = exchanger
        .borrow_mut()
        .on_close(token, status, message.as_deref(), root.now());
    if closed.current {
        root.metrics.increment(Counter::ExchangeStreamsClosed);
    }
    deliver_all(closed.waiting, &closed.failure, root, root_id);
    closed.current.then_some(closed.failure)
}

fn deliver_all(
    waiting: Vec<Waiting<Weak<RefCell<Flow>>>>,
    failure: &Failure,
    root: &WasmHost,
    root_id: u32,
) {
    if waiting.is_empty() {
        return;
    }
    for w in waiting {
        deliver(w, Err(failure.clone()), root);
    }
    let _ = hostcalls::set_effective_context(root_id);
}

/// Runs the waiting request's flow on its own context with its answer (or, with no answer, the
/// failure mode); a request that went away is skipped.
fn deliver(waiting: Waiting<Weak<RefCell<Flow>>>, outcome: Outcome, root: &WasmHost) {
    let Some(flow) = waiting.waiter.upgrade() else {
        return;
    };
    if hostcalls::set_effective_context(waiting.context_id).is_err() {
        return;
    }
    let Ok(mut flow) = flow.try_borrow_mut() else {
        return;
    };
    let mut host = root.for_request();
    flow.on_exchange_answer(&mut host, waiting.id, outcome);
}
