//! The dynamic-module host: Envoy's hooks (from `abi.rs`) in, [`Flow`] does the work, the
//! [`Host`] trait out over the ABI's callbacks. The same flow, configuration, answers, headers
//! and 429 body as the proxy-wasm build; this file is what differs per host.
//!
//! Threads: a configuration ([`NativeConfig`]) is made on Envoy's main thread and shared by every
//! worker; each worker thread keeps its own [`Local`] (the configuration as the flow holds it,
//! and the report counts, lease pockets and failure log of `report::Worker`), as the wasm build
//! keeps one per root context. A request's [`NativeFilter`] lives on one worker.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_core::exchange::{ExchangeRequest, CALL_PATH};
use sluice_filter::config::{Config, Protocol};
use sluice_filter::failure::Failure;
use sluice_filter::flow::{Flow, Next};
use sluice_filter::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};
use sluice_filter::report::Worker;
use sluice_filter::rls_proto;

use crate::abi::{self, ConfigHandle, FilterHandle, Level};
use crate::grpc;
use crate::relay::{Relay, ReportHost};
use crate::shared::{self, SharedStore};

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
    id: u64,
    config: Config,
    counters: Arc<Vec<Option<usize>>>,
    relay: Arc<Relay>,
    handle: ConfigHandle,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `on_http_filter_config_new`: parses the JSON configuration (the wasm filter's, unchanged);
/// `None` refuses it after logging the field at fault.
pub fn config_new(handle: ConfigHandle, name: &[u8], json: &[u8]) -> Option<NativeConfig> {
    let config = match Config::from_json(json) {
        Ok(config) => config,
        Err(e) => {
            abi::log(
                Level::Error,
                &format!("sluice: bad plugin configuration: {e}"),
            );
            return None;
        }
    };
    let counters = Counter::ALL
        .iter()
        .map(|c| handle.define_counter(c.name()))
        .collect();
    let relay = Relay::new(handle.scheduler(), &config);
    abi::log(
        Level::Info,
        &format!(
            "sluice: native filter '{}' configured (ABI {}): {} routes, protocol {:?}",
            String::from_utf8_lossy(name),
            abi::ABI_VERSION,
            config.routes.len(),
            config.backend.protocol
        ),
    );
    Some(NativeConfig {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        config,
        counters: Arc::new(counters),
        relay: Arc::new(relay),
        handle,
    })
}

/// One worker's state for one configuration.
#[derive(Debug)]
struct Local {
    config_id: u64,
    config: Rc<Config>,
    worker: Rc<Worker>,
    /// This worker's id in the report relay.
    worker_id: u64,
    next_report_ns: Cell<u64>,
    /// Reports queued or in flight whose answers this worker has not taken in.
    awaiting: Cell<u32>,
}

thread_local! {
    static LOCALS: RefCell<Vec<Rc<Local>>> = const { RefCell::new(Vec::new()) };
}

fn local(config: &NativeConfig) -> Rc<Local> {
    LOCALS.with(|locals| {
        let mut locals = locals.borrow_mut();
        if let Some(l) = locals.iter().find(|l| l.config_id == config.id) {
            return Rc::clone(l);
        }
        if locals.len() >= MAX_LOCALS {
            locals.remove(0);
        }
        let l = Rc::new(Local {
            config_id: config.id,
            config: Rc::new(config.config.clone()),
            worker: Rc::new(Worker::new(&config.config)),
            worker_id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            next_report_ns: Cell::new(0),
            awaiting: Cell::new(0),
        });
        locals.push(Rc::clone(&l));
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

/// [`Host`] over the ABI's callbacks, for one request.
#[derive(Debug)]
pub struct NativeHost {
    filter: FilterHandle,
    counters: Arc<Vec<Option<usize>>>,
    store: &'static SharedStore,
    cluster: String,
    authority: String,
    /// Callouts started, by token, awaiting their answers.
    callouts: Vec<(u32, Kind)>,
    /// Inside `on_request_headers`: a resume then is a "continue" return instead.
    in_headers: bool,
    resumed_in_headers: bool,
}

/// One request.
#[derive(Debug)]
pub struct NativeFilter {
    flow: Flow,
    host: NativeHost,
    local: Rc<Local>,
    relay: Arc<Relay>,
}

/// `on_http_filter_new`.
pub fn filter_new(config: &NativeConfig, filter: FilterHandle) -> NativeFilter {
    let local = local(config);
    let flow = Flow::with_worker(Rc::clone(&local.config), Rc::clone(&local.worker));
    NativeFilter {
        flow,
        host: NativeHost {
            filter,
            counters: Arc::clone(&config.counters),
            store: shared::store(),
            cluster: config.config.backend.cluster.clone(),
            authority: config.config.backend.authority.clone(),
            callouts: Vec::new(),
            in_headers: false,
            resumed_in_headers: false,
        },
        local,
        relay: Arc::clone(&config.relay),
    }
}

/// `on_http_filter_destroy`: a request that went away leaves nothing behind (callouts still in
/// flight are cancelled by Envoy).
pub fn filter_destroy(_filter: NativeFilter) {}

/// The worker's report turn, taken at the start of a request (see `relay.rs`).
fn reports(f: &mut NativeFilter) {
    let local = &f.local;
    if local.awaiting.get() > 0 {
        for (token, status) in f.relay.take_answers(local.worker_id) {
            local.awaiting.set(local.awaiting.get().saturating_sub(1));
            local
                .worker
                .on_report_response(&mut f.host, token, status.as_deref());
        }
    }
    let now = f.host.now_ns();
    if now < local.next_report_ns.get() {
        return;
    }
    let period_ns = local.config.report.period_ms.saturating_mul(1_000_000);
    local.next_report_ns.set(now.saturating_add(period_ns));
    let mut host = ReportHost {
        request: &mut f.host,
        relay: Arc::clone(&f.relay),
        worker: local.worker_id,
        queued: 0,
    };
    local.worker.tick(&mut host, &local.config);
    let queued = host.queued;
    local
        .awaiting
        .set(local.awaiting.get().saturating_add(queued));
}

/// `on_request_headers`: `true` stops the request (a callout, or a reply sent).
pub fn on_request_headers(f: &mut NativeFilter) -> bool {
    reports(f);
    f.host.in_headers = true;
    f.host.resumed_in_headers = false;
    let next = f.flow.on_request_headers(&mut f.host);
    f.host.in_headers = false;
    match next {
        Next::Pause => !f.host.resumed_in_headers,
        Next::Continue => false,
    }
}

/// `on_response_headers`: the rate-limit headers.
pub fn on_response_headers(f: &mut NativeFilter) {
    f.flow.on_response_headers(&mut f.host);
}

/// A decision callout answered.
pub fn on_callout_done(f: &mut NativeFilter, callout_id: u64, answer: CalloutAnswer) {
    let Ok(token) = u32::try_from(callout_id) else {
        return;
    };
    let Some(i) = f.host.callouts.iter().position(|(t, _)| *t == token) else {
        return;
    };
    let (_, kind) = f.host.callouts.swap_remove(i);
    match kind {
        Kind::Http => {
            let status = if answer.completed {
                answer.header(":status").map(<[u8]>::to_vec)
            } else {
                None
            };
            f.flow
                .on_callout_response(&mut f.host, token, status.as_deref(), &answer.body);
        }
        Kind::Rls => {
            let reply = grpc::read(&answer);
            if reply.code == 0 {
                f.flow.on_grpc_response(&mut f.host, token, 0, &reply.bytes);
            } else {
                let failure =
                    Failure::of_grpc(Protocol::Grpc, reply.code, reply.message.as_deref());
                f.flow.on_failure(&mut f.host, token, failure);
            }
        }
        Kind::Exchange => {
            let reply = grpc::read(&answer);
            match sluice_filter::exchange::unary_reply(
                reply.code,
                reply.message.as_deref(),
                &reply.bytes,
            ) {
                Ok((status, body)) => {
                    let status = status.to_string();
                    f.flow
                        .on_callout_response(&mut f.host, token, Some(status.as_bytes()), &body);
                }
                Err(failure) => f.flow.on_failure(&mut f.host, token, failure),
            }
        }
    }
}

/// The main thread's turn (woken by a worker's report).
pub fn on_config_scheduled(config: &NativeConfig) {
    config.relay.send_queued(config.handle);
}

/// A report callout answered (main thread).
pub fn on_config_callout_done(config: &NativeConfig, callout_id: u64, answer: CalloutAnswer) {
    config.relay.on_answer(callout_id, &answer);
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

impl NativeHost {
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

    fn request_header(&self, name: &str) -> Vec<Vec<u8>> {
        self.filter.request_header(name)
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
        let cluster = self.cluster.clone();
        let authority = self.authority.clone();
        let headers = grpc::headers(&path, &authority);
        let body = grpc::frame(&call.message);
        self.start(Kind::Rls, &cluster, &headers, &body, call.timeout_ms)
    }

    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        let message = prost::Message::encode_to_vec(&ExchangeRequest {
            id: 0,
            path: call.path.clone(),
            body: call.body.clone(),
        });
        let cluster = self.cluster.clone();
        let authority = self.authority.clone();
        let headers = grpc::headers(CALL_PATH, &authority);
        let body = grpc::frame(&message);
        self.count(Counter::ExchangeUnary);
        self.start(Kind::Exchange, &cluster, &headers, &body, call.timeout_ms)
            .map_err(|e| Failure::not_started(&e))
    }

    fn send_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        self.filter.send_response(status, headers, body);
    }

    fn resume(&mut self) {
        if self.in_headers {
            self.resumed_in_headers = true;
        } else {
            self.filter.continue_decoding();
        }
    }

    fn set_request_header(&mut self, name: &str, value: &str) {
        self.filter.set_request_header(name, value);
    }

    fn remove_request_header(&mut self, name: &str) {
        self.filter.remove_request_header(name);
    }

    fn add_response_header(&mut self, name: &str, value: &str) {
        self.filter.add_response_header(name, value);
    }

    fn count(&mut self, counter: Counter) {
        if let Some(Some(id)) = self.counters.get(counter.index()) {
            self.filter.increment(*id);
        }
    }

    fn warn(&self, message: &str) {
        abi::log(Level::Warn, message);
    }
}
