//! [`NativeHost`]: the filter library's [`Host`] for one request, over [`Envoy`]'s callbacks
//! (the real bindings, or the unit tests' fake). The flow asks it to call out, answer, resume,
//! count and log; what must wait until the worker's lock is released (resume, reply) is left
//! in `after` for the hook (see [`After`]).

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::sync::Arc;

use sluice_core::exchange::CALL_PATH;
use sluice_filter::exchange::{self, ExchangeStart, Route};
use sluice_filter::failure::Failure;
use sluice_filter::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};
use sluice_filter::rls_proto;

use super::config::Common;
use super::After;
use crate::abi::{Level, LinePart, ResponsePart};
use crate::copied::{HeaderSnapshot, Pseudo};
use crate::envoy::Envoy;
use crate::grpc;
use crate::shared::{self, SharedStore};
use crate::stream::Mailbox;

/// What a callout was for, to read its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The decision API over HTTP.
    Http,
    /// RLS `ShouldRateLimit` (gRPC unary).
    Rls,
    /// `DecisionExchange/Call` (gRPC unary).
    Exchange,
}

/// [`Host`] over Envoy's callbacks, for one request.
#[derive(Debug)]
pub struct NativeHost<E: Envoy> {
    pub(super) envoy: E,
    pub(super) common: Arc<Common>,
    store: &'static SharedStore,
    /// The other request headers, read at once when the first is asked for and kept while the
    /// filter does not change them.
    headers: RefCell<Option<HeaderSnapshot>>,
    /// Callouts started, by token, awaiting their answers.
    pub(super) callouts: Vec<(u32, Kind)>,
    /// Inside `on_request_headers`: a resume then is a "continue" return instead.
    pub(super) in_headers: bool,
    /// Where the main thread's exchange stream hands this request its answers (made at its
    /// first exchange on the stream).
    pub(super) mailbox: Option<Arc<Mailbox>>,
    pub(super) resumed_in_headers: bool,
    /// The request is stopped for its decision (neither resumed nor answered yet): its body and
    /// trailers are held.
    pub(super) paused: bool,
    /// What the flow asked of Envoy during this hook, done by the hook after it (see [`After`]).
    pub(super) after: Option<After>,
}

impl<E: Envoy> NativeHost<E> {
    /// A request's host, before its first hook.
    pub(super) fn new(envoy: E, common: Arc<Common>) -> NativeHost<E> {
        NativeHost {
            envoy,
            common,
            store: shared::store(),
            headers: RefCell::new(None),
            callouts: Vec::new(),
            in_headers: false,
            resumed_in_headers: false,
            paused: false,
            mailbox: None,
            after: None,
        }
    }

    /// Sends the exchange on the main thread's stream when the configuration has one (`None`:
    /// it has not, or no scheduler could be made for this request: a unary call then).
    fn exchange_on_stream(&mut self, call: &ExchangeCall) -> Option<Route> {
        let common = Arc::clone(&self.common);
        let stream = common.stream.as_ref()?;
        if self.mailbox.is_none() {
            self.mailbox = Some(Mailbox::new(self.envoy.scheduler()?));
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
            .envoy
            .http_callout(cluster, headers, body, timeout_ms)
            .map_err(init_result)?;
        let token = u32::try_from(id).map_err(|_| "callout id out of range".to_owned())?;
        self.callouts.push((token, kind));
        Ok(token)
    }
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

impl<E: Envoy> Drop for NativeHost<E> {
    fn drop(&mut self) {
        self.forget_headers();
    }
}

/// How an exchange starts is the filter library's policy (`exchange::start`); what is native
/// is where it goes: the main thread's stream, else a unary `DecisionExchange/Call` over the
/// request's HTTP callout (gRPC framed by hand).
impl<E: Envoy> ExchangeStart for NativeHost<E> {
    fn offer_to_stream(&mut self, call: &ExchangeCall) -> Option<Route> {
        // Without the main thread's stream (`filter_name` ending in `/unary`, or no scheduler for
        // this request) the exchange goes unary and is counted as one (`exchange_unary`), as a
        // stream that declined it.
        Some(self.exchange_on_stream(call).unwrap_or(Route::Unary))
    }

    fn call_unary(&mut self, message: &[u8], timeout_ms: u64) -> Result<u32, String> {
        let common = Arc::clone(&self.common);
        let headers = grpc::headers(CALL_PATH, &common.config.backend.authority);
        let body = grpc::frame(message);
        self.start(
            Kind::Exchange,
            &common.config.backend.cluster,
            &headers,
            &body,
            timeout_ms,
        )
    }

    fn unary_not_started(&mut self, failure: &Failure) {
        if let Some(stream) = &self.common.stream {
            stream.on_unary(Err(failure), self.now_ns());
        }
    }

    fn count_unary(&mut self) {
        self.count(Counter::ExchangeUnary);
    }
}

impl<E: Envoy> Host for NativeHost<E> {
    fn now_ns(&self) -> u64 {
        self.envoy.now_ns()
    }

    fn each_request_header(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        match name {
            // Envoy's `request.path` / `request.method` attributes: no lookup by name.
            ":path" => self.envoy.request_line_part(LinePart::Path, each),
            ":method" => self.envoy.request_line_part(LinePart::Method, each),
            _ => {
                // Pseudo-headers are copied only once one is asked for (seldom: a key source
                // naming `:authority`, say).
                let pseudo = if name.starts_with(':') {
                    Pseudo::Included
                } else {
                    Pseudo::Skipped
                };
                let mut headers = self.headers.borrow_mut();
                if pseudo == Pseudo::Included && headers.as_ref().is_some_and(|h| !h.has_pseudo()) {
                    if let Some(old) = headers.take() {
                        old.recycle();
                    }
                }
                headers
                    .get_or_insert_with(|| self.envoy.request_headers(pseudo))
                    .each(name, each);
            }
        }
    }

    fn client_address(&self) -> Option<Vec<u8>> {
        self.envoy.source_address()
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
        exchange::start(self, call)
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
        self.envoy.set_request_header(name, value);
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
        self.envoy.remove_request_header(name);
    }

    fn add_response_header(&mut self, name: &str, value: &[u8]) {
        self.envoy.add_response_header(name, value);
    }

    fn count(&mut self, counter: Counter) {
        if let Some(Some(id)) = self.common.counters.get(counter.index()) {
            self.envoy.increment(*id);
        }
    }

    fn count_by(&mut self, counter: Counter, n: u64) {
        if let Some(Some(id)) = self.common.counters.get(counter.index()) {
            self.envoy.increment_by(*id, n);
        }
    }

    fn warn(&self, message: &str) {
        self.envoy.log(Level::Warn, message);
    }

    fn response_header(&self, name: &str) -> Vec<Vec<u8>> {
        self.envoy.response_values(ResponsePart::Headers, name)
    }

    fn response_trailer(&self, name: &str) -> Vec<Vec<u8>> {
        self.envoy.response_values(ResponsePart::Trailers, name)
    }
}
