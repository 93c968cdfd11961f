//! The dynamic-module host: Envoy's hooks (from `abi.rs`) in, [`Flow`] does the work, the
//! [`Host`] trait out over the ABI's callbacks. The same flow, configuration, answers, headers
//! and 429 body as the proxy-wasm build; this file is what differs per host.
//!
//! Threads: a configuration ([`NativeConfig`]) is made on Envoy's main thread and shared by every
//! worker; each worker thread keeps its own [`LocalState`] (the configuration as the flow holds
//! it, `report::Worker`'s counts, lease pockets and failure log, and its requests' flows), as the
//! wasm build keeps one per root context. The main thread reaches a worker's state only for its
//! count reports (`relay.rs`), under the worker's own lock. Every hook that ran a request's flow
//! pokes the reports' timer after it (`Reports::poke`: the flow may have left a count, a commit
//! or a held failure line for the main thread's turn; one atomic load when a turn is already
//! asked for), so that the timer sleeps while no request comes.

#![forbid(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_core::exchange::{ExchangeRequest, CALL_PATH};
use sluice_filter::config::{Config, FailureMode, Match, Protocol};
use sluice_filter::exchange::Route;
use sluice_filter::failure::{self, Failure};
use sluice_filter::flow::Next;
use sluice_filter::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};
use sluice_filter::rls_proto;
use sluice_filter::route::{self, RequestLine};

use crate::abi::{
    self, ConfigHandle, FilterHandle, FlowRef, HeaderSnapshot, Level, LocalState, WorkerBound,
};
use crate::grpc;
use crate::relay::Reports;
use crate::shared::{self, SharedStore};
use crate::stream::{self, Delivery, Mailbox, MainStream};

/// The longest callout answer read (the decision API's own body limit).
pub const MAX_ANSWER: usize = sluice_filter::flow::MAX_RESPONSE_BODY;

/// Configurations a worker thread remembers (older ones, replaced by a reload, are dropped).
const MAX_LOCALS: usize = 16;

/// A callout's answer, copied out of Envoy's buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalloutAnswer {
    /// Whether the callout completed (false: reset, or over the buffer limit).
    pub completed: bool,
    /// Response headers, `:status` included.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body (bounded by [`MAX_ANSWER`]).
    pub body: Vec<u8>,
}

impl CalloutAnswer {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_slice())
    }
}

/// One filter configuration, shared by every worker.
#[derive(Debug)]
pub struct NativeConfig {
    common: Arc<Common>,
    handle: ConfigHandle,
}

impl Drop for NativeConfig {
    fn drop(&mut self) {
        self.common.reports.stop();
        if let Some(stream) = &self.common.stream {
            stream.stop();
        }
    }
}

/// What every request reads from its configuration (one `Arc` clone per request).
#[derive(Debug)]
struct Common {
    id: u64,
    config: Config,
    /// A route matches every request (its `match` is empty): the route check before the flow
    /// would find one every time, so it is skipped.
    catch_all: bool,
    counters: Vec<Option<usize>>,
    reports: Reports,
    /// `grpc_stream` over the main thread's exchange stream (`stream.rs`); `None`: unary calls.
    stream: Option<MainStream>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `on_http_filter_config_new`: parses the JSON configuration (the wasm filter's, unchanged);
/// `None` refuses it after logging the field at fault.
pub fn config_new(handle: ConfigHandle, name: &[u8], json: &[u8]) -> Option<NativeConfig> {
    let config = match parse_config(json) {
        Ok(config) => config,
        Err(line) => {
            abi::log(Level::Error, &line);
            return None;
        }
    };
    if config.failure_mode == FailureMode::Deny {
        FAIL_CLOSED_STATUS.store(u32::from(config.failure_status), Ordering::Relaxed);
    }
    let counters: Vec<Option<usize>> = Counter::ALL
        .iter()
        .map(|c| handle.define_counter(c.name()))
        .collect();
    let reports = Reports::new(handle.scheduler(), &config);
    let stream = if stream::wanted(name, &config) {
        handle
            .scheduler()
            .map(|scheduler| MainStream::new(scheduler, &config))
    } else {
        None
    };
    abi::log(
        Level::Info,
        &format!(
            "sluice: native filter '{}' configured (ABI {}): {} routes, protocol {:?}{}",
            String::from_utf8_lossy(name),
            abi::ABI_VERSION,
            config.routes.len(),
            config.backend.protocol,
            if stream.is_some() {
                " (the main thread's exchange stream)"
            } else {
                ""
            }
        ),
    );
    Some(NativeConfig {
        common: Arc::new(Common {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            catch_all: config.routes.iter().any(|r| r.matcher == Match::default()),
            config,
            counters,
            reports,
            stream,
        }),
        handle,
    })
}

/// The `filter_config` string as a configuration, or the line Envoy's log gets for a refusal
/// (the wasm build's words: `sluice: bad plugin configuration: <field>: <reason>`).
pub fn parse_config(json: &[u8]) -> Result<Config, String> {
    Config::from_json(json).map_err(|e| format!("sluice: bad plugin configuration: {e}"))
}

/// A worker's state, shared with the main thread for its reports.
pub type SharedLocal = Arc<WorkerBound>;

thread_local! {
    static LOCALS: RefCell<Vec<(u64, SharedLocal)>> = const { RefCell::new(Vec::new()) };
    /// The worker's request-line buffers, reused by each request (taken while one is read).
    static SPARE_LINE: Cell<RequestLine> = const {
        Cell::new(RequestLine { method: Vec::new(), path: Vec::new() })
    };
}

fn local(common: &Common) -> SharedLocal {
    LOCALS.with(|locals| {
        let mut locals = locals.borrow_mut();
        if let Some((_, l)) = locals.iter().find(|(id, _)| *id == common.id) {
            return Arc::clone(l);
        }
        if locals.len() >= MAX_LOCALS {
            locals.remove(0);
        }
        let l = Arc::new(WorkerBound::new(LocalState::new(&common.config)));
        common.reports.register(&l);
        locals.push((common.id, Arc::clone(&l)));
        l
    })
}

/// What a callout was for, to read its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The decision API over HTTP.
    Http,
    /// RLS `ShouldRateLimit` (gRPC unary).
    Rls,
    /// `DecisionExchange/Call` (gRPC unary).
    Exchange,
}

/// What a hook leaves for Envoy to do once the worker's lock is released and the hook's borrow
/// of the filter has ended: resuming the request or answering it. Envoy may run this filter's
/// other hooks inside either call (a route Envoy answers itself, a redirect, no healthy
/// upstream: the router's local reply runs the response hooks at once), and those hooks take
/// the worker's lock, so neither may run while it is held (issue 28 0a: a worker and then the
/// main thread blocked for good).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// `continue_decoding`: the request goes on to the next filter.
    Resume,
    /// `send_response`: the filter's own answer (status, headers, body).
    Reply(u16, Vec<(String, String)>, Vec<u8>),
}

/// [`Host`] over the ABI's callbacks, for one request.
#[derive(Debug)]
pub struct NativeHost {
    filter: FilterHandle,
    common: Arc<Common>,
    store: &'static SharedStore,
    /// The other request headers, read at once when the first is asked for and kept while the
    /// filter does not change them.
    headers: RefCell<Option<HeaderSnapshot>>,
    /// Callouts started, by token, awaiting their answers.
    callouts: Vec<(u32, Kind)>,
    /// Inside `on_request_headers`: a resume then is a "continue" return instead.
    in_headers: bool,
    /// Where the main thread's exchange stream hands this request its answers (made at its
    /// first exchange on the stream).
    mailbox: Option<Arc<Mailbox>>,
    resumed_in_headers: bool,
    /// The request is stopped for its decision (neither resumed nor answered yet): its body and
    /// trailers are held.
    paused: bool,
    /// What the flow asked of Envoy during this hook, done by `abi.rs` after it (see [`After`]).
    after: Option<After>,
}

/// One request: its host, and (once a route matched) its worker's state and the slot of its
/// flow there. A request no route matches takes no lock and makes no flow.
#[derive(Debug)]
pub struct NativeFilter {
    host: NativeHost,
    local: Option<SharedLocal>,
    slot: Option<usize>,
}

/// `on_http_filter_new`.
pub fn filter_new(config: &NativeConfig, filter: FilterHandle) -> NativeFilter {
    NativeFilter {
        host: NativeHost {
            filter,
            common: Arc::clone(&config.common),
            store: shared::store(),
            headers: RefCell::new(None),
            callouts: Vec::new(),
            in_headers: false,
            resumed_in_headers: false,
            paused: false,
            mailbox: None,
            after: None,
        },
        local: None,
        slot: None,
    }
}

/// `on_http_filter_destroy`: the request is over, as the wasm build's context delete. The flow's
/// end hook runs first (a cost reservation still unsettled is kept and counted in
/// `sluice.cost_unsettled`; Envoy's side of the filter is still alive during this hook), then the
/// flow is dropped (callouts still in flight are cancelled by Envoy).
pub fn filter_destroy(filter: NativeFilter) {
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
pub fn on_request_headers(f: &mut NativeFilter) -> (bool, Option<After>) {
    #[cfg(feature = "fault-injection")]
    crate::fault::at_request(&f.host.filter);
    // The request line is read once, for this route check and the flow, into the worker's
    // reused buffers.
    let mut line = SPARE_LINE.take();
    line.read_into(&f.host);
    let stop = request_line(f, &line);
    SPARE_LINE.set(line);
    match stop {
        Some(stop) => (stop, f.host.after.take()),
        None => undecided(f, "on_request_headers", true),
    }
}

/// Runs the flow's request-headers step: whether to stop, `None` when the request's flow is lost
/// (then nothing decided it: the caller applies the failure mode).
fn request_line(f: &mut NativeFilter, line: &RequestLine) -> Option<bool> {
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
/// item 2). `sync`: inside the request-headers hook (the `bool` says whether to stop there).
/// The request's flow is dropped (its state is whatever the failure left); later hooks skip it.
pub fn undecided(f: &mut NativeFilter, hook: &str, sync: bool) -> (bool, Option<After>) {
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
        abi::log(Level::Warn, &line);
    }
    let host = &mut f.host;
    host.after = None;
    host.in_headers = sync;
    host.resumed_in_headers = false;
    host.count(failure.reason.counter());
    let next = failure::mode::apply(&common.config, host, "", &failure, sync);
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
/// else passed on; logged either way (no stat: Envoy gives no configuration to count it on).
pub fn undecided_without_filter(hook: &str, sync: bool) -> (bool, Option<After>) {
    let failure = Failure::internal(hook);
    let status = u16::try_from(FAIL_CLOSED_STATUS.load(Ordering::Relaxed)).unwrap_or(0);
    abi::log(
        Level::Error,
        &format!(
            "sluice: {} with no filter state; {}",
            failure.seen,
            if status == 0 { "passed on" } else { "denied" }
        ),
    );
    if status == 0 {
        return (false, (!sync).then_some(After::Resume));
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

/// Whether the request waits for its decision (its body and trailers are held meanwhile).
pub fn decision_pending(f: &NativeFilter) -> bool {
    f.host.paused
}

/// `on_response_headers`: the rate-limit headers.
pub fn on_response_headers(f: &mut NativeFilter) -> Option<After> {
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
pub fn on_response_trailers(f: &mut NativeFilter) -> Option<After> {
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
pub fn on_callout_done(
    f: &mut NativeFilter,
    callout_id: u64,
    answer: CalloutAnswer,
) -> Option<After> {
    #[cfg(feature = "fault-injection")]
    crate::fault::at_answer(&f.host.filter);
    if f.local.is_none() || f.slot.is_none() {
        return undecided(f, "http_callout_done", false).1;
    }
    let (Some(local), Some(slot)) = (&f.local, f.slot) else {
        return None;
    };
    let mut state = local.lock();
    let Some(mut flow) = state.flow(slot) else {
        drop(state);
        return undecided(f, "http_callout_done", false).1;
    };
    deliver(&mut flow, &mut f.host, callout_id, answer);
    deliver_early(&mut flow, &mut f.host);
    drop(state);
    f.host.common.reports.poke();
    f.host.after.take()
}

/// Answers Envoy gave inside their own `http_callout` (see `abi::FilterHandle::take_early`).
fn deliver_early(flow: &mut FlowRef<'_>, host: &mut NativeHost) {
    loop {
        let early = host.filter.take_early();
        if early.is_empty() {
            return;
        }
        for (id, answer) in early {
            deliver(flow, host, id, answer);
        }
    }
}

fn deliver(flow: &mut FlowRef<'_>, host: &mut NativeHost, callout_id: u64, answer: CalloutAnswer) {
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
            let result = sluice_filter::exchange::unary_reply(
                reply.code,
                reply.message.as_deref(),
                &reply.bytes,
            );
            if let Some(stream) = &host.common.stream {
                stream.on_unary(result.as_ref().map(|_| ()), host.now_ns());
            }
            match result {
                Ok((status, body)) => {
                    let status = status.to_string();
                    flow.on_callout_response(host, token, Some(status.as_bytes()), &body);
                }
                Err(failure) => flow.on_failure(host, token, failure),
            }
        }
    }
}

/// `on_http_filter_scheduled`: answers the main thread's exchange stream handed to this request;
/// what Envoy is to do with the request, once this returns.
pub fn on_scheduled(f: &mut NativeFilter, _event_id: u64) -> Option<After> {
    let mailbox = f.host.mailbox.clone()?;
    let deliveries = mailbox.take();
    if deliveries.is_empty() {
        return None;
    }
    #[cfg(feature = "fault-injection")]
    crate::fault::at_answer(&f.host.filter);
    if f.local.is_none() || f.slot.is_none() {
        return undecided(f, "http_filter_scheduled", false).1;
    }
    let (Some(local), Some(slot)) = (&f.local, f.slot) else {
        return None;
    };
    let mut state = local.lock();
    let Some(mut flow) = state.flow(slot) else {
        drop(state);
        return undecided(f, "http_filter_scheduled", false).1;
    };
    let host = &mut f.host;
    for (token, delivery) in deliveries {
        match delivery {
            Delivery::Answer(status, body) => {
                let status = status.to_string();
                flow.on_callout_response(host, token, Some(status.as_bytes()), &body);
            }
            Delivery::Failed(failure) => flow.on_failure(host, token, failure),
        }
    }
    deliver_early(&mut flow, host);
    drop(state);
    f.host.common.reports.poke();
    f.host.after.take()
}

/// The exchange stream's turn on the main thread.
pub fn on_config_stream_turn(config: &NativeConfig) {
    if let Some(stream) = &config.common.stream {
        stream.turn(config.handle, &config.common.counters);
    }
}

/// The exchange stream's response headers or trailers (main thread).
pub fn on_config_stream_headers(config: &NativeConfig, id: u64, headers: &[(Vec<u8>, Vec<u8>)]) {
    if let Some(stream) = &config.common.stream {
        stream.on_headers(id, headers);
    }
}

/// Data on the exchange stream (main thread).
pub fn on_config_stream_data(config: &NativeConfig, id: u64, bytes: &[u8]) {
    if let Some(stream) = &config.common.stream {
        stream.on_data(config.handle, &config.common.counters, id, bytes);
    }
}

/// The exchange stream ended: completed, or reset with Envoy's reason (main thread).
pub fn on_config_stream_end(config: &NativeConfig, id: u64, reset: Option<u32>) {
    if let Some(stream) = &config.common.stream {
        stream.on_end(config.handle, &config.common.counters, id, reset);
    }
}

/// The main thread's turn (the report timer): every worker's report.
pub fn on_config_scheduled(config: &NativeConfig) {
    config
        .common
        .reports
        .tick(config.handle, &config.common.counters);
}

/// A report callout answered (main thread).
pub fn on_config_callout_done(config: &NativeConfig, callout_id: u64, answer: CalloutAnswer) {
    config
        .common
        .reports
        .on_answer(config.handle, &config.common.counters, callout_id, answer);
}

/// The name of a callout init result (`envoy_dynamic_module_type_http_callout_init_result`).
fn init_result(code: u32) -> String {
    match code {
        1 => "MissingRequiredHeaders".to_owned(),
        2 => "ClusterNotFound".to_owned(),
        3 => "DuplicateCalloutId".to_owned(),
        4 => "CannotCreateRequest".to_owned(),
        n => format!("init result {n}"),
    }
}

impl Drop for NativeHost {
    fn drop(&mut self) {
        self.forget_headers();
    }
}

impl NativeHost {
    /// Sends the exchange on the main thread's stream when the configuration has one (`None`:
    /// it has not, or no scheduler could be made for this request: a unary call then).
    fn exchange_on_stream(&mut self, call: &ExchangeCall) -> Option<Route> {
        let common = Arc::clone(&self.common);
        let stream = common.stream.as_ref()?;
        if self.mailbox.is_none() {
            self.mailbox = Some(Mailbox::new(self.filter.scheduler()?));
        }
        let mailbox = self.mailbox.as_ref()?;
        let now = self.now_ns();
        let deadline = now.saturating_add(call.timeout_ms.saturating_mul(1_000_000));
        Some(stream.send(&call.path, call.body.clone(), mailbox, deadline, now))
    }

    /// Drops the header snapshot (the filter changed the headers, or the request is done),
    /// giving its buffers to the worker's next snapshot.
    fn forget_headers(&mut self) {
        if let Some(snapshot) = self.headers.get_mut().take() {
            snapshot.recycle();
        }
    }

    fn start(
        &mut self,
        kind: Kind,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u32, String> {
        let id = self
            .filter
            .http_callout(cluster, headers, body, timeout_ms)
            .map_err(init_result)?;
        let token = u32::try_from(id).map_err(|_| "callout id out of range".to_owned())?;
        self.callouts.push((token, kind));
        Ok(token)
    }
}

impl Host for NativeHost {
    fn now_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn each_request_header(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        match name {
            // Envoy's `request.path` / `request.method` attributes: no lookup by name.
            ":path" => self.filter.request_line_part(false, each),
            ":method" => self.filter.request_line_part(true, each),
            _ => {
                // Pseudo-headers are copied only once one is asked for (seldom: a key source
                // naming `:authority`, say).
                let pseudo = name.starts_with(':');
                let mut headers = self.headers.borrow_mut();
                if pseudo && headers.as_ref().is_some_and(|h| !h.has_pseudo()) {
                    if let Some(old) = headers.take() {
                        old.recycle();
                    }
                }
                headers
                    .get_or_insert_with(|| self.filter.request_headers(pseudo))
                    .each(name, each);
            }
        }
    }

    fn client_address(&self) -> Option<Vec<u8>> {
        self.filter.source_address()
    }

    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        self.store.get(key).map(|(v, _)| v)
    }

    fn shared_set(&mut self, key: &str, value: &[u8]) {
        self.store.set(key, value)
    }

    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.store.get(key)
    }

    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        self.store.set_if(key, value, version)
    }

    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        let headers: Vec<(&str, &str)> =
            call.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        self.start(
            Kind::Http,
            &call.cluster,
            &headers,
            &call.body,
            call.timeout_ms,
        )
    }

    fn dispatch_grpc(&mut self, call: &GrpcCall) -> Result<u32, String> {
        let path = format!("/{}/{}", rls_proto::SERVICE, rls_proto::METHOD);
        let common = Arc::clone(&self.common);
        let headers = grpc::headers(&path, &common.config.backend.authority);
        let body = grpc::frame(&call.message);
        self.start(
            Kind::Rls,
            &common.config.backend.cluster,
            &headers,
            &body,
            call.timeout_ms,
        )
    }

    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        if let Some(route) = self.exchange_on_stream(call) {
            match route {
                Route::Stream(id) => return Ok(id),
                Route::Fail(failure) => return Err(failure),
                Route::Unary => {}
            }
        }
        let message = prost::Message::encode_to_vec(&ExchangeRequest {
            id: 0,
            path: call.path.clone(),
            body: call.body.clone(),
        });
        let common = Arc::clone(&self.common);
        let headers = grpc::headers(CALL_PATH, &common.config.backend.authority);
        let body = grpc::frame(&message);
        self.count(Counter::ExchangeUnary);
        self.start(
            Kind::Exchange,
            &common.config.backend.cluster,
            &headers,
            &body,
            call.timeout_ms,
        )
        .map_err(|e| {
            let failure = Failure::not_started(&e);
            if let Some(stream) = &common.stream {
                stream.on_unary(Err(&failure), self.now_ns());
            }
            failure
        })
    }

    fn send_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        self.paused = false;
        let headers = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        self.after = Some(After::Reply(status, headers, body.to_vec()));
    }

    fn resume(&mut self) {
        self.paused = false;
        if self.in_headers {
            self.resumed_in_headers = true;
        } else {
            self.after = Some(After::Resume);
        }
    }

    fn set_request_header(&mut self, name: &str, value: &str) {
        self.forget_headers();
        self.filter.set_request_header(name, value);
    }

    fn remove_request_header(&mut self, name: &str) {
        // Skipped when the headers, already read, do not have it (the usual case: a client
        // seldom sends `x-sluice-*`): removing an absent header changes nothing.
        if let Some(headers) = self.headers.get_mut() {
            if (headers.has_pseudo() || !name.starts_with(':')) && !headers.has(name) {
                return;
            }
        }
        self.forget_headers();
        self.filter.remove_request_header(name);
    }

    fn add_response_header(&mut self, name: &str, value: &[u8]) {
        self.filter.add_response_header(name, value);
    }

    fn count(&mut self, counter: Counter) {
        if let Some(Some(id)) = self.common.counters.get(counter.index()) {
            self.filter.increment(*id);
        }
    }

    fn count_by(&mut self, counter: Counter, n: u64) {
        if let Some(Some(id)) = self.common.counters.get(counter.index()) {
            self.filter.increment_by(*id, n);
        }
    }

    fn warn(&self, message: &str) {
        abi::log(Level::Warn, message);
    }

    fn response_header(&self, name: &str) -> Vec<Vec<u8>> {
        self.filter.response_values(false, name)
    }

    fn response_trailer(&self, name: &str) -> Vec<Vec<u8>> {
        self.filter.response_values(true, name)
    }
}
