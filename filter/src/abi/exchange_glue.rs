//! The root context's side of `protocol: grpc_stream`: opens the worker's exchange stream,
//! hands each answer to the request context waiting for it, and answers overdue ones as timed
//! out (the logic, tested natively, is in [`crate::exchange`]; this is the proxy-wasm glue).
//!
//! A request context is switched to with `set_effective_context` before its flow runs, so its
//! resume or reply acts on its own HTTP stream (Envoy defers both until the VM call returns, as
//! it does for every callout answer the SDK routes this way).

use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::types::BufferType;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest, CALL_METHOD, SERVICE, STREAM_METHOD};

use super::{Metrics, WasmHost};
use crate::exchange::{Exchanger, StreamHost, Waiting};
use crate::flow::{Flow, MAX_RESPONSE_BODY};
use crate::host::{Counter, ExchangeCall};

/// One worker's exchanger; the waiters are the request contexts' flows (weak: a request that
/// went away is simply not answered).
pub type SharedExchanger = Rc<RefCell<Exchanger<Weak<RefCell<Flow>>>>>;

/// The status a request waiting on the stream is answered with when its deadline passes.
const TIMED_OUT: &[u8] = b"504";
/// The status requests waiting on a stream that closed are answered with.
const STREAM_CLOSED: &[u8] = b"503";

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

    fn warn(&mut self, message: &str) {
        super::log(proxy_wasm::types::LogLevel::Warn, message);
    }
}

/// Starts one exchange: on the worker's stream when `link` is given and the stream takes it,
/// else as a unary `DecisionExchange/Call` (whose answer comes back to the calling context's
/// `on_grpc_call_response`, see [`reply_of_call`]). A unary call from a request context is
/// counted (`sluice.exchange_unary`): many of them mean the stream is down.
pub fn start(
    service: &str,
    link: Option<&ExchangeLink>,
    now_ns: u64,
    call: &ExchangeCall,
    metrics: &Metrics,
) -> Result<u32, String> {
    if let Some(link) = link {
        let deadline = now_ns.saturating_add(call.timeout_ms.saturating_mul(1_000_000));
        let sent = link.exchanger.borrow_mut().send(
            &mut RootStreams { service },
            &call.path,
            call.body.clone(),
            link.context_id,
            link.flow.clone(),
            deadline,
        );
        if let Some(id) = sent {
            return Ok(id);
        }
        metrics.increment(Counter::ExchangeUnary);
    }
    let message = prost::Message::encode_to_vec(&ExchangeRequest {
        id: 0,
        path: call.path.clone(),
        body: call.body.clone(),
    });
    hostcalls::dispatch_grpc_call(
        service,
        SERVICE,
        CALL_METHOD,
        Vec::new(),
        Some(&message),
        Duration::from_millis(call.timeout_ms),
    )
    .map_err(|status| format!("{status:?}"))
}

/// The answer of a unary exchange as an HTTP callout's status and body: a gRPC failure is a
/// 504 when it timed out (DEADLINE_EXCEEDED) and a 503 otherwise, as Envoy reports a callout.
pub fn reply_of_call(status_code: u32, response_size: usize) -> (Vec<u8>, Vec<u8>) {
    const DEADLINE_EXCEEDED: u32 = 4;
    if status_code != 0 {
        let status = if status_code == DEADLINE_EXCEEDED {
            TIMED_OUT
        } else {
            STREAM_CLOSED
        };
        return (status.to_vec(), Vec::new());
    }
    let bytes = read_buffer(response_size);
    match prost::Message::decode(bytes.as_slice()) {
        Ok(ExchangeReply { status, body, .. }) => (status.to_string().into_bytes(), body),
        // Not an exchange reply: classified as a bad response.
        Err(_) => (b"502".to_vec(), Vec::new()),
    }
}

/// The gRPC message just received (bounded like a callout's body).
fn read_buffer(size: usize) -> Vec<u8> {
    if size == 0 {
        return Vec::new();
    }
    hostcalls::get_buffer(
        BufferType::GrpcReceiveBuffer,
        0,
        size.min(MAX_RESPONSE_BODY),
    )
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// The root's tick: open the stream if it is down (after its pause), and answer every request
/// whose deadline passed as timed out.
pub fn tick(exchanger: &SharedExchanger, service: &str, root: &WasmHost, root_id: u32) {
    let now = root.now();
    let expired = {
        let mut ex = exchanger.borrow_mut();
        let was_open = ex.token().is_some();
        ex.ensure_open(&mut RootStreams { service }, now);
        if !was_open && ex.token().is_some() {
            root.metrics.increment(Counter::ExchangeStreamsOpened);
        }
        ex.expired(now)
    };
    deliver_all(expired, TIMED_OUT, &[], root, root_id);
}

/// A message on stream `token`: hand it to the request that waits for it.
pub fn on_message(
    exchanger: &SharedExchanger,
    token: u32,
    size: usize,
    root: &WasmHost,
    root_id: u32,
) {
    let bytes = read_buffer(size);
    let answered = exchanger.borrow_mut().on_message(token, &bytes);
    if let Some((waiting, reply)) = answered {
        let status = reply.status.to_string();
        deliver(waiting, status.as_bytes(), &reply.body, root);
        let _ = hostcalls::set_effective_context(root_id);
    }
}

/// Stream `token` closed: every request waiting on it fails now (the failure mode applies).
pub fn on_close(exchanger: &SharedExchanger, token: u32, root: &WasmHost, root_id: u32) {
    let failed = {
        let mut ex = exchanger.borrow_mut();
        let ours = ex.token() == Some(token);
        let failed = ex.on_close(token, root.now());
        if ours {
            root.metrics.increment(Counter::ExchangeStreamsClosed);
        }
        failed
    };
    deliver_all(failed, STREAM_CLOSED, &[], root, root_id);
}

fn deliver_all(
    waiting: Vec<Waiting<Weak<RefCell<Flow>>>>,
    status: &[u8],
    body: &[u8],
    root: &WasmHost,
    root_id: u32,
) {
    if waiting.is_empty() {
        return;
    }
    for w in waiting {
        deliver(w, status, body, root);
    }
    let _ = hostcalls::set_effective_context(root_id);
}

/// Runs the waiting request's flow on its own context; a request that went away is skipped.
fn deliver(waiting: Waiting<Weak<RefCell<Flow>>>, status: &[u8], body: &[u8], root: &WasmHost) {
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
    flow.on_callout_response(&mut host, waiting.id, Some(status), body);
}
