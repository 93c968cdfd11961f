//! The dynamic-module host: Envoy's hooks (from `hooks.rs`) in, [`Flow`] does the work, the
//! [`Host`] trait out over Envoy's callbacks ([`Envoy`]). The same flow, configuration, answers,
//! headers and 429 body as the proxy-wasm build; this module is what differs per host.
//!
//! - `config`: the configuration ([`NativeConfig`]), each worker's state for it, and its
//!   main-thread hooks;
//! - `host`: [`NativeHost`], the flow's `Host` for one request;
//! - here: a request's hooks ([`NativeFilter`]), each returning what Envoy is to do after it
//!   ([`After`]).
//!
//! Threads: a configuration is made on Envoy's main thread and shared by every worker; each
//! worker thread keeps its own [`LocalState`] (the configuration as the flow holds it,
//! `report::Worker`'s counts, lease pockets and failure log, and its requests' flows), as the
//! wasm build keeps one per root context. The main thread reaches a worker's state only for its
//! count reports (`relay.rs`), under the worker's own lock. Every hook that ran a request's flow
//! pokes the reports' timer after it (`Reports::poke`: the flow may have left a count, a commit
//! or a held failure line for the main thread's turn; one atomic load when a turn is already
//! asked for), so that the timer sleeps while no request comes.
//!
//! [`Flow`]: sluice_filter::flow::Flow
//! [`LocalState`]: crate::abi::LocalState

#![forbid(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use sluice_filter::config::Protocol;
use sluice_filter::exchange;
use sluice_filter::failure::{self, Failure};
use sluice_filter::flow::Next;
use sluice_filter::host::Host;
use sluice_filter::route::{self, RequestLine};

use crate::abi::{FlowRef, Level, WorkerBound};
use crate::envoy::Envoy;
use crate::grpc;

mod config;
#[cfg(test)]
mod fake;
mod host;
#[cfg(test)]
mod tests;

pub use crate::copied::CalloutAnswer;
pub use config::{
    config_new, on_config_callout_done, on_config_scheduled, on_config_stream_data,
    on_config_stream_end, on_config_stream_headers, on_config_stream_turn, parse_config,
    NativeConfig,
};
pub use host::NativeHost;

use config::{local, Common};
use host::Kind;

/// The longest callout answer read (the decision API's own body limit).
pub const MAX_ANSWER: usize = sluice_filter::flow::MAX_RESPONSE_BODY;

thread_local! {
    /// The worker's request-line buffers, reused by each request (taken while one is read).
    static SPARE_LINE: Cell<RequestLine> = const {
        Cell::new(RequestLine { method: Vec::new(), path: Vec::new() })
    };
}

/// What a hook leaves for Envoy to do once the worker's lock is released and the hook's borrow
/// of the filter has ended ([`perform`]): resuming the request or answering it. Envoy may run
/// this filter's other hooks inside either call (a route Envoy answers itself, a redirect, no
/// healthy upstream: the router's local reply runs the response hooks at once), and those hooks
/// take the worker's lock, so neither may run while it is held (issue 28 0a: a worker and then
/// the main thread blocked for good).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// `continue_decoding`: the request goes on to the next filter.
    Resume,
    /// `send_response`: the filter's own answer (status, headers, body).
    Reply(u16, Vec<(String, String)>, Vec<u8>),
}

/// Where a request that could not be decided is (the filter library's, shared with the wasm
/// host's flow): later, only a request still stopped for its decision is resumed or answered,
/// through an [`After`].
pub use sluice_filter::failure::mode::When;

/// One request: its host, and (once a route matched) its worker's state and the slot of its
/// flow there. A request no route matches takes no lock and makes no flow.
#[derive(Debug)]
pub struct NativeFilter<E: Envoy> {
    host: NativeHost<E>,
    local: Option<Arc<WorkerBound>>,
    slot: Option<usize>,
}

/// `on_http_filter_new`.
pub fn filter_new<E: Envoy>(config: &NativeConfig, envoy: E) -> NativeFilter<E> {
    NativeFilter::new(&config.common, envoy)
}

impl<E: Envoy> NativeFilter<E> {
    fn new(common: &Arc<Common>, envoy: E) -> NativeFilter<E> {
        NativeFilter {
            host: NativeHost::new(envoy, Arc::clone(common)),
            local: None,
            slot: None,
        }
    }
}

/// `on_http_filter_destroy`: the request is over, as the wasm build's context delete. The flow's
/// end hook runs first (a cost reservation still unsettled is kept and counted in
/// `sluice.cost_unsettled`; Envoy's side of the filter is still alive during this hook), then the
/// flow is dropped (callouts still in flight are cancelled by Envoy).
pub fn filter_destroy<E: Envoy>(filter: NativeFilter<E>) {
    let NativeFilter {
        mut host,
        local,
        slot,
    } = filter;
    let (Some(local), Some(slot)) = (local, slot) else {
        return;
    };
    local.lock().end_flow(slot, Some(&mut host));
    host.common.reports.poke();
}

/// `on_request_headers`: `true` stops the request (a callout, or a reply to send: the
/// [`After`], done by the caller once this returns). A request no route matches is let through
/// here, before any lock or flow (the flow would find the same).
pub fn on_request_headers<E: Envoy>(f: &mut NativeFilter<E>) -> (bool, Option<After>) {
    #[cfg(feature = "fault-injection")]
    crate::fault::at_request(&f.host.envoy);
    // The request line is read once, for this route check and the flow, into the worker's
    // reused buffers.
    let mut line = SPARE_LINE.take();
    line.read_into(&f.host);
    let stop = request_line(f, &line);
    SPARE_LINE.set(line);
    match stop {
        Some(stop) => (stop, f.host.after.take()),
        None => undecided(f, "on_request_headers", When::InRequestHeaders),
    }
}

/// Runs the flow's request-headers step: whether to stop, `None` when the request's flow is lost
/// (then nothing decided it: the caller applies the failure mode).
fn request_line<E: Envoy>(f: &mut NativeFilter<E>, line: &RequestLine) -> Option<bool> {
    let common = Arc::clone(&f.host.common);
    if !common.catch_all && route::find_at(&common.config.routes, line, &f.host).is_none() {
        return Some(false);
    }
    let local = Arc::clone(f.local.get_or_insert_with(|| local(&common)));
    let mut state = local.lock();
    let slot = *f.slot.get_or_insert_with(|| state.start_flow());
    let mut flow = state.flow(slot)?;
    let host = &mut f.host;
    host.in_headers = true;
    host.resumed_in_headers = false;
    let next = flow.on_request_line(host, line);
    deliver_early(&mut flow, host);
    drop(state);
    common.reports.poke();
    host.in_headers = false;
    let stop = match next {
        Next::Pause => !host.resumed_in_headers,
        Next::Continue => false,
    };
    host.paused = stop;
    Some(stop)
}

/// A request this build could not decide: a panic caught in its hook `hook`, or its flow lost.
/// Unless it was already answered or resumed, the configured failure mode applies, as for a
/// backend failure (`sluice.failures_internal`, a warn line at most once per 10 s per worker,
/// `x-sluice-failure: internal`): `deny` answers `failure_status`, never "continue" (issue 28
/// item 2). In the request-headers hook the `bool` says whether to stop there.
/// The request's flow is dropped (its state is whatever the failure left); later hooks skip it.
pub fn undecided<E: Envoy>(
    f: &mut NativeFilter<E>,
    hook: &str,
    when: When,
) -> (bool, Option<After>) {
    let sync = when == When::InRequestHeaders;
    if !sync && !f.host.paused {
        return (false, None);
    }
    let failure = Failure::internal(hook);
    let common = Arc::clone(&f.host.common);
    let now = f.host.now_ns();
    let local = Arc::clone(f.local.get_or_insert_with(|| local(&common)));
    let mut state = local.lock();
    if let Some(slot) = f.slot.take() {
        state.end_flow(slot, None);
    }
    let line = state
        .worker()
        .failures()
        .request(&failure, now, &common.config);
    drop(state);
    if let Some(line) = line {
        f.host.envoy.log(Level::Warn, &line);
    }
    let host = &mut f.host;
    host.after = None;
    host.in_headers = sync;
    host.resumed_in_headers = false;
    host.count(failure.reason.counter());
    let next = failure::mode::apply(&common.config, host, "", &failure, when);
    host.in_headers = false;
    host.paused = false;
    let stop = matches!(next, Next::Pause) && !host.resumed_in_headers;
    common.reports.poke();
    (stop, host.after.take())
}

/// The `failure_status` of a configuration that fails closed (`failure_mode: deny`), 0 while
/// none does: what a request gets when Envoy has no filter of ours for it to ask (a hook with a
/// null filter), whose configuration is then unknown: the module fails closed if any does.
static FAIL_CLOSED_STATUS: AtomicU32 = AtomicU32::new(0);

/// A request with no filter of ours (Envoy could not make one, or a panic left none to ask):
/// denied with a `deny` configuration's `failure_status` when any configuration fails closed,
/// else passed on; logged (through `envoy`) either way (no stat: Envoy gives no configuration to
/// count it on).
pub fn undecided_without_filter<E: Envoy>(
    envoy: &E,
    hook: &str,
    when: When,
) -> (bool, Option<After>) {
    let failure = Failure::internal(hook);
    let status = u16::try_from(FAIL_CLOSED_STATUS.load(Ordering::Relaxed)).unwrap_or(0);
    envoy.log(
        Level::Error,
        &format!(
            "sluice: {} with no filter state; {}",
            failure.seen,
            if status == 0 { "passed on" } else { "denied" }
        ),
    );
    if status == 0 {
        return (false, (when == When::Later).then_some(After::Resume));
    }
    let body = sluice_filter::reply::problem(
        status,
        "Rate Limiter Unavailable",
        "the rate limiter could not decide (internal); failing closed",
        "",
        None,
    );
    let headers = vec![
        (
            "content-type".to_owned(),
            "application/problem+json".to_owned(),
        ),
        (
            sluice_filter::reply::FAILURE_HEADER.to_owned(),
            failure.header.clone(),
        ),
    ];
    (true, Some(After::Reply(status, headers, body)))
}

/// Does what a hook left for Envoy ([`After`]): called by the hook after its borrow of the
/// filter ended and the worker's lock was released, since Envoy may run this filter's other
/// hooks inside these calls.
pub fn perform<E: Envoy>(envoy: &E, after: Option<After>) {
    match after {
        None => {}
        Some(After::Resume) => envoy.continue_decoding(),
        Some(After::Reply(status, headers, body)) => {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            envoy.send_response(status, &headers, &body);
        }
    }
}

/// Whether the request waits for its decision (its body and trailers are held meanwhile).
pub fn decision_pending<E: Envoy>(f: &NativeFilter<E>) -> bool {
    f.host.paused
}

/// `on_response_headers`: the rate-limit headers.
pub fn on_response_headers<E: Envoy>(f: &mut NativeFilter<E>) -> Option<After> {
    let (Some(local), Some(slot)) = (&f.local, f.slot) else {
        return None;
    };
    let mut state = local.lock();
    if let Some(mut flow) = state.flow(slot) {
        flow.on_response_headers(&mut f.host);
    }
    drop(state);
    f.host.common.reports.poke();
    f.host.after.take()
}

/// `on_response_trailers`: a cost route whose actual cost is a trailer settles.
pub fn on_response_trailers<E: Envoy>(f: &mut NativeFilter<E>) -> Option<After> {
    let (Some(local), Some(slot)) = (&f.local, f.slot) else {
        return None;
    };
    let mut state = local.lock();
    if let Some(mut flow) = state.flow(slot) {
        flow.on_response_trailers(&mut f.host);
    }
    drop(state);
    f.host.common.reports.poke();
    f.host.after.take()
}

/// A decision callout answered: what Envoy is to do with the request, once this returns.
pub fn on_callout_done<E: Envoy>(
    f: &mut NativeFilter<E>,
    callout_id: u64,
    answer: CalloutAnswer,
) -> Option<After> {
    #[cfg(feature = "fault-injection")]
    crate::fault::at_answer(&f.host.envoy);
    if f.local.is_none() || f.slot.is_none() {
        return undecided(f, "http_callout_done", When::Later).1;
    }
    let (Some(local), Some(slot)) = (&f.local, f.slot) else {
        return None;
    };
    let mut state = local.lock();
    let Some(mut flow) = state.flow(slot) else {
        drop(state);
        return undecided(f, "http_callout_done", When::Later).1;
    };
    deliver(&mut flow, &mut f.host, callout_id, answer);
    deliver_early(&mut flow, &mut f.host);
    drop(state);
    f.host.common.reports.poke();
    f.host.after.take()
}

/// Answers Envoy gave inside their own `http_callout` (see `Envoy::take_early`).
fn deliver_early<E: Envoy>(flow: &mut FlowRef<'_>, host: &mut NativeHost<E>) {
    loop {
        let early = host.envoy.take_early();
        if early.is_empty() {
            return;
        }
        for (id, answer) in early {
            deliver(flow, host, id, answer);
        }
    }
}

fn deliver<E: Envoy>(
    flow: &mut FlowRef<'_>,
    host: &mut NativeHost<E>,
    callout_id: u64,
    answer: CalloutAnswer,
) {
    let Ok(token) = u32::try_from(callout_id) else {
        return;
    };
    let Some(i) = host.callouts.iter().position(|(t, _)| *t == token) else {
        return;
    };
    let (_, kind) = host.callouts.swap_remove(i);
    match kind {
        Kind::Http => {
            let status = if answer.completed {
                answer.header(":status").map(<[u8]>::to_vec)
            } else {
                None
            };
            flow.on_callout_response(host, token, status.as_deref(), &answer.body);
        }
        Kind::Rls => {
            let reply = grpc::read(&answer);
            if reply.code == 0 {
                flow.on_grpc_response(host, token, 0, &reply.bytes);
            } else {
                let failure =
                    Failure::of_grpc(Protocol::Grpc, reply.code, reply.message.as_deref());
                flow.on_failure(host, token, failure);
            }
        }
        Kind::Exchange => {
            let reply = grpc::read(&answer);
            let outcome = exchange::unary_reply(reply.code, reply.message.as_deref(), &reply.bytes);
            if let Some(stream) = &host.common.stream {
                stream.on_unary(outcome.as_ref().map(|_| ()), host.now_ns());
            }
            flow.on_exchange_answer(host, token, outcome);
        }
    }
}

/// `on_http_filter_scheduled`: answers the main thread's exchange stream handed to this request;
/// what Envoy is to do with the request, once this returns.
pub fn on_scheduled<E: Envoy>(f: &mut NativeFilter<E>, _event_id: u64) -> Option<After> {
    let mailbox = f.host.mailbox.clone()?;
    let deliveries = mailbox.take();
    if deliveries.is_empty() {
        return None;
    }
    #[cfg(feature = "fault-injection")]
    crate::fault::at_answer(&f.host.envoy);
    if f.local.is_none() || f.slot.is_none() {
        return undecided(f, "http_filter_scheduled", When::Later).1;
    }
    let (Some(local), Some(slot)) = (&f.local, f.slot) else {
        return None;
    };
    let mut state = local.lock();
    let Some(mut flow) = state.flow(slot) else {
        drop(state);
        return undecided(f, "http_filter_scheduled", When::Later).1;
    };
    let host = &mut f.host;
    for (token, outcome) in deliveries {
        flow.on_exchange_answer(host, token, outcome);
    }
    deliver_early(&mut flow, host);
    drop(state);
    f.host.common.reports.poke();
    f.host.after.take()
}
