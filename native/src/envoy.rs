//! What the glue asks of Envoy for one request, as a trait: [`Envoy`]. The real bindings
//! implement it ([`FilterHandle`], below); `glue/fake.rs` implements it for the glue's unit
//! tests, as the filter library's `FakeHost` stands in for a proxy-wasm host. The glue is
//! generic over it (monomorphised: the hot path calls the bindings directly, no dynamic
//! dispatch).
//!
//! Per request only: the configuration's main-thread work (reports, the exchange stream) uses
//! `abi::ConfigHandle` directly.

#![forbid(unsafe_code)]

use crate::abi::{self, FilterHandle, FilterScheduler, Level, LinePart, ResponsePart};
use crate::copied::{CalloutAnswer, HeaderSnapshot, Pseudo};

/// Envoy's callbacks for one request's filter, as the glue uses them (the methods are
/// `FilterHandle`'s: see there for what each costs Envoy).
pub trait Envoy {
    /// `:path` or `:method`, borrowed to `each` (not called when Envoy has none).
    fn request_line_part(&self, part: LinePart, each: &mut dyn FnMut(&[u8]));
    /// The request headers, copied (pseudo-headers only when `pseudo` says).
    fn request_headers(&self, pseudo: Pseudo) -> HeaderSnapshot;
    /// The downstream peer (`ip:port`).
    fn source_address(&self) -> Option<Vec<u8>>;
    /// Sets (replaces) a request header.
    fn set_request_header(&self, name: &str, value: &str);
    /// Removes a request header.
    fn remove_request_header(&self, name: &str);
    /// Adds a response header.
    fn add_response_header(&self, name: &str, value: &[u8]);
    /// Every value of a response header or trailer, copied.
    fn response_values(&self, part: ResponsePart, name: &str) -> Vec<Vec<u8>>;
    /// Starts an HTTP callout: its id, or Envoy's init result's number.
    fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, u32>;
    /// Adds one to a counter the configuration defined.
    fn increment(&self, id: usize);
    /// Adds `n` to a counter the configuration defined.
    fn increment_by(&self, id: usize, n: u64);
    /// A scheduler for the request (the main thread's exchange stream answers through it).
    fn scheduler(&self) -> Option<FilterScheduler>;
    /// Callout answers Envoy gave inside this filter's own hook (see `hooks.rs`).
    fn take_early(&self) -> Vec<(u64, CalloutAnswer)>;
    /// Answers the client directly.
    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]);
    /// Resumes a request stopped in its request headers.
    fn continue_decoding(&self);
    /// One line in Envoy's log.
    fn log(&self, level: Level, message: &str);
    /// The wall clock, ns since the Unix epoch (the clock of decisions' deadlines).
    fn now_ns(&self) -> u64 {
        crate::timer::now_ns()
    }
}

impl Envoy for FilterHandle {
    #[inline]
    fn request_line_part(&self, part: LinePart, each: &mut dyn FnMut(&[u8])) {
        FilterHandle::request_line_part(self, part, each);
    }
    #[inline]
    fn request_headers(&self, pseudo: Pseudo) -> HeaderSnapshot {
        FilterHandle::request_headers(self, pseudo)
    }
    #[inline]
    fn source_address(&self) -> Option<Vec<u8>> {
        FilterHandle::source_address(self)
    }
    #[inline]
    fn set_request_header(&self, name: &str, value: &str) {
        FilterHandle::set_request_header(self, name, value);
    }
    #[inline]
    fn remove_request_header(&self, name: &str) {
        FilterHandle::remove_request_header(self, name);
    }
    #[inline]
    fn add_response_header(&self, name: &str, value: &[u8]) {
        FilterHandle::add_response_header(self, name, value);
    }
    #[inline]
    fn response_values(&self, part: ResponsePart, name: &str) -> Vec<Vec<u8>> {
        FilterHandle::response_values(self, part, name)
    }
    #[inline]
    fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        FilterHandle::http_callout(self, cluster, headers, body, timeout_ms)
    }
    #[inline]
    fn increment(&self, id: usize) {
        FilterHandle::increment(self, id);
    }
    #[inline]
    fn increment_by(&self, id: usize, n: u64) {
        FilterHandle::increment_by(self, id, n);
    }
    #[inline]
    fn scheduler(&self) -> Option<FilterScheduler> {
        FilterHandle::scheduler(self)
    }
    #[inline]
    fn take_early(&self) -> Vec<(u64, CalloutAnswer)> {
        FilterHandle::take_early(self)
    }
    #[inline]
    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        FilterHandle::send_response(self, status, headers, body);
    }
    #[inline]
    fn continue_decoding(&self) {
        FilterHandle::continue_decoding(self);
    }
    #[inline]
    fn log(&self, level: Level, message: &str) {
        abi::log(level, message);
    }
}
