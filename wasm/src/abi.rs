//! The proxy-wasm glue: Envoy's callbacks in, [`sluice_filter::flow::Flow`] does the work, hostcalls out.
//!
//! Hostcalls are used directly (not the SDK's trait helpers, which `unwrap` host errors): every
//! host error becomes "absent" or is ignored, so no request can panic the VM (with
//! `panic = "abort"` a panic would kill the VM for every request on that worker).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType, MetricType};

use sluice_filter::config::{Config, Protocol};
use sluice_filter::failure::Failure;
use sluice_filter::flow::{Flow, Next};
use sluice_filter::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};
use sluice_filter::report::Worker;
use sluice_filter::rls_proto;

mod exchange_glue;

use exchange_glue::{ExchangeLink, SharedExchanger};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> {
        Box::new(Root {
            id,
            ..Root::default()
        })
    });
}}

/// The root's tick period with `protocol: grpc_stream`: a quarter of the callout timeout (5 ms
/// at least), so a request waiting on the stream is answered as timed out at most that late.
fn exchange_tick(timeout_ms: u64) -> Duration {
    Duration::from_millis((timeout_ms / 4).clamp(5, 1_000))
}

/// The longest tick with cost routes (commits are sent on it).
const COMMIT_TICK: Duration = Duration::from_millis(sluice_filter::host::COMMIT_TICK_MS);

/// Metric ids, defined once per VM (Envoy shares the stats by name across workers).
#[derive(Debug, Default, Clone)]
struct Metrics {
    ids: Vec<Option<u32>>,
}

impl Metrics {
    fn define() -> Metrics {
        Metrics {
            ids: Counter::ALL
                .iter()
                .map(|c| hostcalls::define_metric(MetricType::Counter, c.name()).ok())
                .collect(),
        }
    }

    fn increment(&self, counter: Counter) {
        if let Some(Some(id)) = self.ids.get(counter.index()) {
            let _ = hostcalls::increment_metric(*id, 1);
        }
    }

    fn increment_by(&self, counter: Counter, n: u64) {
        if let Some(Some(id)) = self.ids.get(counter.index()) {
            let _ = hostcalls::increment_metric(*id, i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

/// The root context (one per worker thread and plugin): parses the configuration once, makes
/// one [`Http`] per request, and on its tick sends the worker's counts to the backend and (with
/// `protocol: grpc_stream`) keeps the worker's exchange stream open and its deadlines.
#[derive(Default)]
struct Root {
    /// Envoy's id of this root context.
    id: u32,
    config: Option<Rc<Config>>,
    metrics: Rc<Metrics>,
    worker: Rc<Worker>,
    exchanger: SharedExchanger,
    /// When the next count report is due (the tick may run faster than reports).
    next_report_ns: u64,
}

impl Root {
    fn host(&self) -> WasmHost {
        WasmHost::unlinked(&self.metrics, self.config.clone())
    }

    /// The exchange stream failed (could not open, or closed): counted in the worker's failure
    /// log, which says so at once the first time, then at most once per 10 s per reason.
    fn note_stream(&self, failure: Option<Failure>) {
        let (Some(failure), Some(config)) = (failure, self.config.as_deref()) else {
            return;
        };
        let now = self.host().now();
        let line = self.worker.failures().stream(&failure, now, config);
        if let Some(line) = line {
            log(LogLevel::Warn, &line);
        }
    }

    /// The exchange's gRPC service, when the protocol is `grpc_stream`.
    fn exchange_service(&self) -> Option<&str> {
        let config = self.config.as_deref()?;
        (config.backend.protocol == Protocol::GrpcStream)
            .then_some(config.backend.grpc_service.as_str())
    }
}

impl Context for Root {
    /// The only callouts a root context makes are count reports.
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        _body_size: usize,
        _trailers: usize,
    ) {
        let status = hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten();
        let mut host = self.host();
        self.worker
            .on_report_response(&mut host, token, status.as_deref());
    }

    /// A count report sent as a unary exchange (`protocol: grpc_stream`).
    fn on_grpc_call_response(&mut self, token: u32, status_code: u32, response_size: usize) {
        let outcome = exchange_glue::reply_of_call(status_code, response_size);
        let mut host = self.host();
        // A report that got through shows the backend is there (it ends the stream's down
        // state, like a probe).
        self.exchanger
            .borrow_mut()
            .on_unary(outcome.as_ref().map(|_| ()), host.now());
        self.worker.on_exchange_report(&mut host, token, &outcome);
    }

    fn on_grpc_stream_message(&mut self, token: u32, message_size: usize) {
        let host = self.host();
        exchange_glue::on_message(&self.exchanger, token, message_size, &host, self.id);
    }

    fn on_grpc_stream_close(&mut self, token: u32, status_code: u32) {
        let host = self.host();
        let failure = exchange_glue::on_close(&self.exchanger, token, status_code, &host, self.id);
        self.note_stream(failure);
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes = match hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX) {
            Ok(Some(bytes)) => bytes,
            _ => {
                log(
                    LogLevel::Error,
                    "sluice: bad plugin configuration: (root): empty; a JSON object is required",
                );
                return false;
            }
        };
        match Config::from_json(&bytes) {
            Ok(config) => {
                self.metrics = Rc::new(Metrics::define());
                self.worker = Rc::new(Worker::new(&config));
                let reports = config.report.cluster.is_some() || config.report.via_exchange;
                let mut period = if config.backend.protocol == Protocol::GrpcStream {
                    Some(exchange_tick(config.backend.timeout_ms))
                } else {
                    reports.then(|| Duration::from_millis(config.report.period_ms))
                };
                if config.meters_cost() {
                    // Cost commits go out on the tick: at most this long after a response.
                    period = Some(period.map_or(COMMIT_TICK, |p| p.min(COMMIT_TICK)));
                }
                if config.leases() && period.is_none() {
                    // Expired grants' units go back on the tick (`lease::watch`).
                    period = Some(Duration::from_millis(config.report.period_ms));
                }
                if let Some(period) = period {
                    if hostcalls::set_tick_period(period).is_err() {
                        log(
                            LogLevel::Warn,
                            "sluice: no tick: counts are not reported and exchange deadlines not kept",
                        );
                    }
                }
                self.config = Some(Rc::new(config));
                true
            }
            Err(e) => {
                log(
                    LogLevel::Error,
                    &format!("sluice: bad plugin configuration: {e}"),
                );
                false
            }
        }
    }

    fn on_tick(&mut self) {
        let Some(config) = self.config.clone() else {
            return;
        };
        let mut host = self.host();
        if let Some(service) = self.exchange_service() {
            let refused = exchange_glue::tick(&self.exchanger, service, &host, self.id);
            self.note_stream(refused);
        }
        // Cost commits and lease returns go out on every tick (at most COMMIT_TICK after their
        // response with cost routes), after the sweep of expired grants.
        self.worker.settle(&mut host, &config);
        let now = host.now();
        if now >= self.next_report_ns {
            self.next_report_ns = now.saturating_add(config.report.period_ms * 1_000_000);
            self.worker.tick(&mut host, &config);
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let flow = self.config.as_ref().map(|c| {
            Rc::new(RefCell::new(Flow::with_worker(
                Rc::clone(c),
                Rc::clone(&self.worker),
            )))
        });
        let mut host = self.host();
        if let (Some(flow), Some(_)) = (&flow, self.exchange_service()) {
            host.link = Some(ExchangeLink {
                exchanger: Rc::clone(&self.exchanger),
                context_id,
                flow: Rc::downgrade(flow),
            });
        }
        Some(Box::new(Http { flow, host }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// One request. `flow` is `None` only if the configuration was refused (then Envoy does not run
/// the plugin at all; passing through is the safe answer anyway). It is shared (weakly) with
/// the root's exchanger, which hands it answers that arrive on the worker's stream.
struct Http {
    flow: Option<Rc<RefCell<Flow>>>,
    host: WasmHost,
}

/// A request's flow, unless it is in use (it never is when Envoy calls a request context; a
/// busy flow is skipped rather than panicking the VM).
fn flow_of(flow: &Option<Rc<RefCell<Flow>>>) -> Option<std::cell::RefMut<'_, Flow>> {
    flow.as_ref()?.try_borrow_mut().ok()
}

impl Context for Http {
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let Some(mut flow) = flow_of(&self.flow) else {
            return;
        };
        let status = hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten();
        let body = exchange_glue::read_buffer(BufferType::HttpCallResponseBody, body_size);
        flow.on_callout_response(&mut self.host, token, status.as_deref(), &body);
    }

    fn on_grpc_call_response(&mut self, token: u32, status_code: u32, response_size: usize) {
        self.grpc_response(token, status_code, response_size);
    }
}

impl Http {
    fn grpc_response(&mut self, token: u32, status_code: u32, response_size: usize) {
        let Some(mut flow) = flow_of(&self.flow) else {
            return;
        };
        if flow.protocol() == Protocol::GrpcStream {
            // A unary exchange (the stream was down): answered like an HTTP callout.
            let outcome = exchange_glue::reply_of_call(status_code, response_size);
            exchange_glue::note_unary(self.host.link.as_ref(), &outcome, self.host.now());
            flow.on_exchange_answer(&mut self.host, token, outcome);
            return;
        }
        if status_code != 0 {
            let message = exchange_glue::grpc_message();
            let failure = Failure::of_grpc(Protocol::Grpc, status_code, message.as_deref());
            flow.on_failure(&mut self.host, token, failure);
            return;
        }
        let message = exchange_glue::read_buffer(BufferType::GrpcReceiveBuffer, response_size);
        flow.on_grpc_response(&mut self.host, token, status_code, &message);
    }
}

/// Every callback implemented here (and in `Context for Http`, `Context for Root`, `RootContext`)
/// must stay out of `exports::UNUSED_CALLBACKS`: the build removes those exports.
impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        match flow_of(&self.flow).map(|mut f| f.on_request_headers(&mut self.host)) {
            Some(Next::Pause) => Action::Pause,
            Some(Next::Continue) | None => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if let Some(mut flow) = flow_of(&self.flow) {
            flow.on_response_headers(&mut self.host);
        }
        Action::Continue
    }

    /// Exported for cost routes whose actual cost is a trailer. Envoy calls it only for a
    /// response that has trailers, so a response without any costs nothing more.
    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        if let Some(mut flow) = flow_of(&self.flow) {
            flow.on_response_trailers(&mut self.host);
        }
        Action::Continue
    }
}

/// The request's context goes away (`proxy_on_delete`, exported anyway): a cost reservation
/// still unsettled is counted (`Flow::on_end`). No callback per request is added for it.
impl Drop for Http {
    fn drop(&mut self) {
        if let Some(mut flow) = flow_of(&self.flow) {
            flow.on_end(&mut self.host);
        }
    }
}

/// A request's header pairs, as proxy-wasm returns them.
type HeaderPairs = Vec<(String, Vec<u8>)>;

/// [`Host`] over proxy-wasm hostcalls.
struct WasmHost {
    metrics: Rc<Metrics>,
    /// The request's header pairs (pseudo-headers included), fetched on first use and kept in
    /// step with the filter's own changes to them.
    request_headers: RefCell<Option<HeaderPairs>>,
    /// The plugin configuration (for the exchange's gRPC service).
    config: Option<Rc<Config>>,
    /// A request context's way to the worker's exchange stream (`protocol: grpc_stream`).
    link: Option<ExchangeLink>,
}

impl WasmHost {
    /// Host wall clock in nanoseconds (0 if the host will not say).
    fn now(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// A host for handing a request its answer from the root (no headers read yet, no link).
    fn for_request(&self) -> WasmHost {
        WasmHost::unlinked(&self.metrics, self.config.clone())
    }

    /// A host with no request headers read and no link to the worker's exchange stream.
    fn unlinked(metrics: &Rc<Metrics>, config: Option<Rc<Config>>) -> WasmHost {
        WasmHost {
            metrics: Rc::clone(metrics),
            request_headers: RefCell::new(None),
            config,
            link: None,
        }
    }
}

fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}

impl Host for WasmHost {
    fn now_ns(&self) -> u64 {
        self.now()
    }

    fn each_request_header(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        // Every header, pseudo-headers (`:method`, `:path`) included, comes from the whole map,
        // fetched once per request and kept: each hostcall that returns bytes costs Envoy a call
        // back into the VM's allocator, so one map read is cheaper than even two single-value
        // reads (callgrind: ~19k fewer Envoy instructions per allowed request; benches/envoy/results/callgrind.md).
        let mut cache = self.request_headers.borrow_mut();
        if cache.is_none() {
            // Kept only when read: after a failed read, removals still go to the host.
            *cache = hostcalls::get_map_bytes(MapType::HttpRequestHeaders).ok();
        }
        for (_, v) in cache
            .iter()
            .flatten()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            each(v);
        }
    }

    fn client_address(&self) -> Option<Vec<u8>> {
        hostcalls::get_property(vec!["source", "address"])
            .ok()
            .flatten()
    }

    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        hostcalls::get_shared_data(key)
            .ok()
            .and_then(|(value, _cas)| value)
    }

    fn shared_set(&mut self, key: &str, value: &[u8]) {
        let _ = hostcalls::set_shared_data(key, Some(value), None);
    }

    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        match hostcalls::get_shared_data(key) {
            Ok((Some(value), Some(cas))) => Some((value, cas)),
            _ => None,
        }
    }

    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        match hostcalls::set_shared_data(key, Some(value), Some(version)) {
            Ok(()) => Ok(()),
            Err(proxy_wasm::types::Status::CasMismatch) => Err(CasError::Conflict),
            Err(_) => Err(CasError::Failed),
        }
    }

    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        let headers: Vec<(&str, &str)> =
            call.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        hostcalls::dispatch_http_call(
            &call.cluster,
            headers,
            Some(&call.body),
            Vec::new(),
            Duration::from_millis(call.timeout_ms),
        )
        .map_err(|status| format!("{status:?}"))
    }

    fn dispatch_grpc(&mut self, call: &GrpcCall) -> Result<u32, String> {
        hostcalls::dispatch_grpc_call(
            &call.service,
            rls_proto::SERVICE,
            rls_proto::METHOD,
            Vec::new(),
            Some(&call.message),
            Duration::from_millis(call.timeout_ms),
        )
        .map_err(|status| format!("{status:?}"))
    }

    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        sluice_filter::exchange::start(self, call)
    }

    fn send_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let _ = hostcalls::send_http_response(u32::from(status), headers.to_vec(), Some(body));
    }

    fn resume(&mut self) {
        let _ = hostcalls::resume_http_request();
    }

    fn set_request_header(&mut self, name: &str, value: &str) {
        // Keep the cached map true to the request, for a later removal's presence check.
        if let Some(pairs) = self.request_headers.get_mut().as_mut() {
            pairs.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            pairs.push((name.to_owned(), value.as_bytes().to_vec()));
        }
        let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, Some(value));
    }

    fn remove_request_header(&mut self, name: &str) {
        // Skipped when the request's headers, already read, do not have it (the usual case: a
        // client seldom sends `x-sluice-*`): removing an absent header changes nothing.
        if let Some(pairs) = self.request_headers.get_mut().as_mut() {
            let before = pairs.len();
            pairs.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            if pairs.len() == before {
                return;
            }
        }
        let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, None);
    }

    fn add_response_header(&mut self, name: &str, value: &[u8]) {
        let _ = hostcalls::add_map_value_bytes(MapType::HttpResponseHeaders, name, value);
    }

    fn count(&mut self, counter: Counter) {
        self.metrics.increment(counter);
    }

    fn count_by(&mut self, counter: Counter, n: u64) {
        self.metrics.increment_by(counter, n);
    }

    fn warn(&self, message: &str) {
        log(LogLevel::Warn, message);
    }

    fn response_header(&self, name: &str) -> Vec<Vec<u8>> {
        map_values(MapType::HttpResponseHeaders, name)
    }

    fn response_trailer(&self, name: &str) -> Vec<Vec<u8>> {
        map_values(MapType::HttpResponseTrailers, name)
    }
}

/// Every value of a header or trailer map, in order: the whole map in one hostcall, made only by
/// cost routes. Not `get_map_value`: Envoy hands that the first of several lines, so an upstream
/// that sent the usage twice would have its first line committed, where docs/cost-budgets.md
/// (and the native build) keep the reservation for a repeated usage.
fn map_values(map: MapType, name: &str) -> Vec<Vec<u8>> {
    hostcalls::get_map_bytes(map)
        .ok()
        .into_iter()
        .flatten()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .collect()
}
