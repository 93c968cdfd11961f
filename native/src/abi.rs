//! Envoy's dynamic-module ABI, as Envoy 1.40 speaks it (ABI `v0.2.0`): the `extern "C"`
//! declarations of the callbacks the filter calls, the event hooks Envoy calls, and thin safe
//! handles over both. This is the crate's only `unsafe` code.
//!
//! Why our own bindings: Envoy's Rust SDK is not a published crate. The names, signatures and
//! semantics below are Envoy's (`source/extensions/dynamic_modules/abi/abi.h`); each callback
//! used is checked against the running Envoy at load ([`missing_callbacks`]), so a module built
//! for another ABI is refused with a log line instead of calling an absent symbol.
//!
//! Panics: every hook runs its body under `catch_unwind`; a panic is logged and the hook answers
//! "continue" (or does nothing), never unwinding into Envoy.

use std::cell::RefCell;
use std::ffi::c_void;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::glue::{self, After, CalloutAnswer, NativeConfig, NativeFilter};

mod worker;
pub use worker::{FlowRef, LocalState, WorkerBound};

/// The ABI version this module is built for, reported from `envoy_dynamic_module_on_program_init`
/// (Envoy 1.40 logs "Dynamic module ABI version v0.2.0 matched.").
pub const ABI_VERSION: &str = "v0.2.0";
const ABI_VERSION_C: &[u8] = b"v0.2.0\0";

/// A buffer owned by Envoy (`envoy_dynamic_module_type_envoy_buffer`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    ptr: *const c_char,
    length: usize,
}

/// A buffer owned by the module (`envoy_dynamic_module_type_module_buffer`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    ptr: *const c_char,
    length: usize,
}

/// A header owned by the module (`envoy_dynamic_module_type_module_http_header`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleHeader {
    key_ptr: *const c_char,
    key_length: usize,
    value_ptr: *const c_char,
    value_length: usize,
}

/// A header owned by Envoy (`envoy_dynamic_module_type_envoy_http_header`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyHeader {
    key_ptr: *const c_char,
    key_length: usize,
    value_ptr: *const c_char,
    value_length: usize,
}

fn module_buffer(bytes: &[u8]) -> ModuleBuffer {
    ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

fn module_headers(headers: &[(&str, &str)]) -> Vec<ModuleHeader> {
    headers
        .iter()
        .map(|(k, v)| ModuleHeader {
            key_ptr: k.as_ptr().cast(),
            key_length: k.len(),
            value_ptr: v.as_ptr().cast(),
            value_length: v.len(),
        })
        .collect()
}

/// Borrows an Envoy buffer for the duration of a call (empty for a null pointer).
fn envoy_slice<'a>(ptr: *const c_char, length: usize) -> &'a [u8] {
    if ptr.is_null() || length == 0 {
        return &[];
    }
    // SAFETY: Envoy passes a pointer valid for `length` bytes during the call; callers copy the
    // bytes before returning to Envoy.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), length) }
}

/// A copy of a header map: every name and value in one buffer.
#[derive(Debug, Clone, Default)]
pub struct HeaderSnapshot {
    /// Whether pseudo-headers (`:authority`, ...) were copied too.
    pseudo: bool,
    bytes: Vec<u8>,
    /// (name start, name end, value end) in `bytes`; the value starts at the name's end.
    spans: Vec<(usize, usize, usize)>,
}

/// Bytes a snapshot may keep for reuse (a larger one is freed).
const REUSED_SNAPSHOT_BYTES: usize = 16 * 1024;

thread_local! {
    /// The worker's scratch array for `get_headers` (emptied after each use: Envoy's pointers are
    /// never kept).
    static ENVOY_HEADERS: RefCell<Vec<EnvoyHeader>> = const { RefCell::new(Vec::new()) };
    /// One finished request's snapshot buffers, reused by the worker's next request (a snapshot
    /// per request, without two allocations and frees each time).
    static SPARE_SNAPSHOT: RefCell<Option<HeaderSnapshot>> = const { RefCell::new(None) };
}

impl HeaderSnapshot {
    /// An empty snapshot, on the worker's spare buffers when it has them.
    fn reused() -> HeaderSnapshot {
        SPARE_SNAPSHOT
            .with(|spare| spare.try_borrow_mut().ok().and_then(|mut s| s.take()))
            .unwrap_or_default()
    }

    /// Gives the buffers back for the worker's next request (emptied; dropped if large).
    pub fn recycle(mut self) {
        if self.bytes.capacity() > REUSED_SNAPSHOT_BYTES {
            return;
        }
        self.bytes.clear();
        self.spans.clear();
        SPARE_SNAPSHOT.with(|spare| {
            if let Ok(mut spare) = spare.try_borrow_mut() {
                *spare = Some(self);
            }
        });
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        let name_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.spans.push((start, name_end, self.bytes.len()));
    }

    /// Whether the snapshot has the pseudo-headers (else only regular headers were copied).
    pub fn has_pseudo(&self) -> bool {
        self.pseudo
    }

    /// Calls `each` with every value of `name` (ASCII case-insensitive), in order, borrowed.
    pub fn each(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        for &(start, name_end, end) in &self.spans {
            let Some(n) = self.bytes.get(start..name_end) else {
                continue;
            };
            if n.len() == name.len() && n.eq_ignore_ascii_case(name.as_bytes()) {
                if let Some(v) = self.bytes.get(name_end..end) {
                    each(v);
                }
            }
        }
    }

    /// Every value of `name`, copied (tests).
    #[cfg(test)]
    pub fn values(&self, name: &str) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.each(name, &mut |v| out.push(v.to_vec()));
        out
    }

    /// Whether `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.spans.iter().any(|&(start, name_end, _)| {
            self.bytes
                .get(start..name_end)
                .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
        })
    }
}

/// Copies an Envoy buffer (empty for a null pointer).
fn envoy_bytes(ptr: *const c_char, length: usize) -> Vec<u8> {
    if ptr.is_null() || length == 0 {
        return Vec::new();
    }
    // SAFETY: Envoy passes a pointer valid for `length` bytes for the duration of the call.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), length) }.to_vec()
}

// `envoy_dynamic_module_type_http_header_type`.
const REQUEST_HEADER: u32 = 0;
const RESPONSE_HEADER: u32 = 2;
const RESPONSE_TRAILER: u32 = 3;
// `envoy_dynamic_module_type_log_level`.
const LOG_INFO: u32 = 2;
const LOG_WARN: u32 = 3;
const LOG_ERROR: u32 = 4;
// `envoy_dynamic_module_type_attribute_id_RequestPath` (`request.path`, the whole `:path`) and
// `_RequestMethod` (`request.method`).
const ATTRIBUTE_REQUEST_PATH: u32 = 0;
const ATTRIBUTE_REQUEST_METHOD: u32 = 4;
// `envoy_dynamic_module_type_attribute_id_SourceAddress` (`source.address`, `ip:port`).
const ATTRIBUTE_SOURCE_ADDRESS: u32 = 24;
// `envoy_dynamic_module_type_on_http_filter_*_status`.
const CONTINUE: u32 = 0;
const STOP_ITERATION: u32 = 1;
// `envoy_dynamic_module_type_on_http_filter_request_body_status_StopIterationAndWatermark`
// (Envoy's `FilterDataStatus::StopIterationAndWatermark`): the body waits in Envoy with flow
// control (reads paused past the buffer limit) instead of failing the request with 413 once it
// passes the limit, as `StopIterationAndBuffer` does.
const STOP_ITERATION_AND_WATERMARK: u32 = 2;
// `envoy_dynamic_module_type_http_callout_init_result` / `_http_callout_result`.
const CALLOUT_INIT_SUCCESS: u32 = 0;
const CALLOUT_SUCCESS: u32 = 0;

extern "C" {
    fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: *mut c_void,
        header_type: u32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_get_headers(
        filter: *mut c_void,
        header_type: u32,
        result: *mut EnvoyHeader,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_get_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_set_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_add_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_send_response(
        filter: *mut c_void,
        status: u32,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: *mut c_void);
    fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: *mut c_void,
        attribute: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: *mut c_void,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: *mut c_void,
        id: usize,
        tag_values: *mut ModuleBuffer,
        tag_values_size: usize,
        value: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: *mut c_void,
        name: ModuleBuffer,
        tag_keys: *mut ModuleBuffer,
        tag_keys_size: usize,
        id: *mut usize,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: *mut c_void,
        id: usize,
        tag_values: *mut ModuleBuffer,
        tag_values_size: usize,
        value: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: *mut c_void,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: *mut c_void,
    ) -> *mut c_void;
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: *mut c_void);
    fn envoy_dynamic_module_callback_http_filter_config_start_http_stream(
        config: *mut c_void,
        stream_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        end_stream: bool,
        timeout_ms: u64,
    ) -> u32;
    fn envoy_dynamic_module_callback_http_filter_config_stream_send_data(
        config: *mut c_void,
        stream_id: u64,
        data: ModuleBuffer,
        end_stream: bool,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_config_reset_http_stream(
        config: *mut c_void,
        stream_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_scheduler_new(filter: *mut c_void) -> *mut c_void;
    fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// Every callback the module calls: all must be exported by the Envoy that loads it.
const CALLBACKS: [&[u8]; 23] = [
    b"envoy_dynamic_module_callback_log\0",
    b"envoy_dynamic_module_callback_http_get_header\0",
    b"envoy_dynamic_module_callback_http_get_headers_size\0",
    b"envoy_dynamic_module_callback_http_get_headers\0",
    b"envoy_dynamic_module_callback_http_set_header\0",
    b"envoy_dynamic_module_callback_http_add_header\0",
    b"envoy_dynamic_module_callback_http_send_response\0",
    b"envoy_dynamic_module_callback_http_filter_continue_decoding\0",
    b"envoy_dynamic_module_callback_http_filter_get_attribute_string\0",
    b"envoy_dynamic_module_callback_http_filter_http_callout\0",
    b"envoy_dynamic_module_callback_http_filter_increment_counter\0",
    b"envoy_dynamic_module_callback_http_filter_config_define_counter\0",
    b"envoy_dynamic_module_callback_http_filter_config_increment_counter\0",
    b"envoy_dynamic_module_callback_http_filter_config_http_callout\0",
    b"envoy_dynamic_module_callback_http_filter_config_scheduler_new\0",
    b"envoy_dynamic_module_callback_http_filter_config_scheduler_commit\0",
    b"envoy_dynamic_module_callback_http_filter_config_scheduler_delete\0",
    // The exchange stream on the main thread (`stream.rs`).
    b"envoy_dynamic_module_callback_http_filter_config_start_http_stream\0",
    b"envoy_dynamic_module_callback_http_filter_config_stream_send_data\0",
    b"envoy_dynamic_module_callback_http_filter_config_reset_http_stream\0",
    b"envoy_dynamic_module_callback_http_filter_scheduler_new\0",
    b"envoy_dynamic_module_callback_http_filter_scheduler_commit\0",
    b"envoy_dynamic_module_callback_http_filter_scheduler_delete\0",
];

/// The callbacks this module needs that the process does not export (empty when the loading
/// Envoy speaks our ABI). Looked up with `dlsym(RTLD_DEFAULT, …)`.
pub fn missing_callbacks() -> Vec<String> {
    CALLBACKS
        .iter()
        .filter(|name| {
            // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT is the null handle on glibc.
            unsafe { dlsym(std::ptr::null_mut(), name.as_ptr().cast()) }.is_null()
        })
        .map(|name| String::from_utf8_lossy(&name[..name.len() - 1]).into_owned())
        .collect()
}

/// Log levels the filter uses.
#[derive(Debug, Clone, Copy)]
pub enum Level {
    /// Info.
    Info,
    /// Warning.
    Warn,
    /// Error.
    Error,
}

/// Writes one line to Envoy's log (the `dynamic_modules` logger).
pub fn log(level: Level, message: &str) {
    let level = match level {
        Level::Info => LOG_INFO,
        Level::Warn => LOG_WARN,
        Level::Error => LOG_ERROR,
    };
    // SAFETY: the buffer is valid for the call; Envoy copies it.
    unsafe { envoy_dynamic_module_callback_log(level, module_buffer(message.as_bytes())) }
}

/// Envoy's side of one filter configuration (`envoy_dynamic_module_type_http_filter_config_envoy_ptr`):
/// valid from `on_http_filter_config_new` until `on_http_filter_config_destroy` returns.
#[derive(Debug, Clone, Copy)]
pub struct ConfigHandle(*mut c_void);

// SAFETY: the pointer is only an address here; it is used only on the main thread (counters are
// defined in `config_new`, config callouts are made from `on_http_filter_config_scheduled`).
unsafe impl Send for ConfigHandle {}
// SAFETY: as above.
unsafe impl Sync for ConfigHandle {}

impl ConfigHandle {
    /// Defines a counter (during `config_new` only); its id for [`FilterHandle::increment`].
    pub fn define_counter(&self, name: &str) -> Option<usize> {
        let mut id = 0usize;
        // SAFETY: the config pointer is live during config_new; buffers valid for the call.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_config_define_counter(
                self.0,
                module_buffer(name.as_bytes()),
                std::ptr::null_mut(),
                0,
                &mut id,
            )
        };
        (result == 0).then_some(id)
    }

    /// Adds one to a counter defined by this configuration (main thread).
    pub fn increment(&self, id: usize) {
        self.increment_by(id, 1);
    }

    /// Adds `n` to a counter defined by this configuration (main thread).
    pub fn increment_by(&self, id: usize, n: u64) {
        // SAFETY: the config pointer is live; no tags.
        unsafe {
            envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                n,
            );
        }
    }

    /// A config-level HTTP callout (main thread only): its id, or the init result's number.
    pub fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        let mut headers = module_headers(headers);
        let mut id = 0u64;
        // SAFETY: the config pointer is live (the scheduler that called us belongs to it).
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_config_http_callout(
                self.0,
                &mut id,
                module_buffer(cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(body),
                timeout_ms,
            )
        };
        if result == CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// A scheduler posting events to the main thread (`on_http_filter_config_scheduled`).
    pub fn scheduler(&self) -> Option<Scheduler> {
        // SAFETY: the config pointer is live during config_new.
        let ptr = unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) };
        (!ptr.is_null()).then_some(Scheduler(ptr))
    }
}

/// A config scheduler: `commit` may be called from any thread and runs
/// `on_http_filter_config_scheduled` on Envoy's main thread.
#[derive(Debug)]
pub struct Scheduler(*mut c_void);

// SAFETY: Envoy's scheduler posts to the main dispatcher, which is thread-safe.
unsafe impl Send for Scheduler {}
// SAFETY: as above.
unsafe impl Sync for Scheduler {}

impl Scheduler {
    /// Asks for `on_http_filter_config_scheduled(event_id)` on the main thread.
    pub fn commit(&self, event_id: u64) {
        // SAFETY: the scheduler lives until dropped (with its configuration).
        unsafe {
            envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, event_id)
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: created by scheduler_new, deleted once.
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
    }
}

/// The main thread's exchange stream (`stream.rs`): a config-level HTTP stream, its data, its
/// reset. Main thread only, as every config-level callout (Envoy's async client there belongs to
/// the main thread's dispatcher).
impl ConfigHandle {
    /// Starts an HTTP stream to `cluster` (headers sent, the stream left open; `timeout_ms` 0: no
    /// timeout); its id, or the init result's number. Its events come to the configuration's
    /// `http_stream_*` hooks.
    pub fn start_http_stream(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        let mut headers = module_headers(headers);
        let mut id = 0u64;
        // SAFETY: the config pointer is live (called from its own scheduled hook); Envoy copies
        // the headers during the call.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_config_start_http_stream(
                self.0,
                &mut id,
                module_buffer(cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(&[]),
                false,
                timeout_ms,
            )
        };
        if result == CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// Sends `data` on stream `id`; false when Envoy no longer has that stream.
    pub fn stream_send_data(&self, id: u64, data: &[u8]) -> bool {
        // SAFETY: the config pointer is live; Envoy copies the data during the call.
        unsafe {
            envoy_dynamic_module_callback_http_filter_config_stream_send_data(
                self.0,
                id,
                module_buffer(data),
                false,
            )
        }
    }

    /// Resets stream `id` (nothing when Envoy no longer has it).
    pub fn reset_http_stream(&self, id: u64) {
        // SAFETY: the config pointer is live.
        unsafe { envoy_dynamic_module_callback_http_filter_config_reset_http_stream(self.0, id) }
    }
}

/// A request's scheduler (`envoy_dynamic_module_callback_http_filter_scheduler_new`): `commit`
/// from any thread runs `on_http_filter_scheduled` on the request's worker. Envoy's scheduler
/// holds a weak pointer to its filter and the worker's dispatcher: a commit after the filter is
/// gone posts an event that does nothing (Envoy checks the filter, then its module side, before
/// calling the hook), so the scheduler may outlive its request; it is deleted once, on drop.
#[derive(Debug)]
pub struct FilterScheduler(*mut c_void);

// SAFETY: Envoy's scheduler only posts to the worker's dispatcher (thread-safe) and holds a
// `weak_ptr` (atomic counts); it is deleted once, by whichever thread drops the last owner.
unsafe impl Send for FilterScheduler {}
// SAFETY: as above; `commit` takes no lock of ours and changes nothing in the scheduler.
unsafe impl Sync for FilterScheduler {}

impl FilterScheduler {
    /// Asks for `on_http_filter_scheduled(event_id)` on the request's worker.
    pub fn commit(&self, event_id: u64) {
        // SAFETY: live until dropped.
        unsafe { envoy_dynamic_module_callback_http_filter_scheduler_commit(self.0, event_id) }
    }
}

impl Drop for FilterScheduler {
    fn drop(&mut self) {
        // SAFETY: made by scheduler_new, deleted once.
        unsafe { envoy_dynamic_module_callback_http_filter_scheduler_delete(self.0) }
    }
}

impl FilterHandle {
    /// A scheduler for this request (call on its worker, during one of its hooks).
    pub fn scheduler(&self) -> Option<FilterScheduler> {
        // SAFETY: live filter pointer, on its worker thread.
        let ptr = unsafe { envoy_dynamic_module_callback_http_filter_scheduler_new(self.0) };
        (!ptr.is_null()).then_some(FilterScheduler(ptr))
    }
}

/// Copies Envoy's header array (empty for a null pointer).
fn envoy_headers(headers: *const EnvoyHeader, size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    if headers.is_null() {
        return Vec::new();
    }
    // SAFETY: Envoy passes `size` headers valid for the call.
    let headers = unsafe { std::slice::from_raw_parts(headers, size) };
    headers
        .iter()
        .map(|h| {
            (
                envoy_bytes(h.key_ptr, h.key_length),
                envoy_bytes(h.value_ptr, h.value_length),
            )
        })
        .collect()
}

/// Copies Envoy's chunks into one buffer (empty for a null pointer).
fn envoy_chunks(chunks: *const EnvoyBuffer, size: usize) -> Vec<u8> {
    if chunks.is_null() {
        return Vec::new();
    }
    // SAFETY: Envoy passes `size` chunks valid for the call.
    let chunks = unsafe { std::slice::from_raw_parts(chunks, size) };
    let mut out = Vec::with_capacity(chunks.iter().map(|c| c.length).sum());
    for c in chunks {
        out.extend_from_slice(envoy_slice(c.ptr, c.length));
    }
    out
}

/// Envoy's side of one request's filter (`envoy_dynamic_module_type_http_filter_envoy_ptr`): valid
/// until `on_http_filter_destroy`; used only on the worker thread that runs the request.
#[derive(Debug, Clone, Copy)]
pub struct FilterHandle(*mut c_void);

impl FilterHandle {
    /// `:path` or `:method` of the request, read as Envoy's `request.path` / `request.method`
    /// attributes: Envoy hands out its inline header with no lookup by name (a `get_header` by
    /// name costs Envoy ~1.4k instructions, callgrind).
    ///
    /// `each` gets the value borrowed from Envoy's header map (valid during this hook: it is not
    /// kept), not at all when Envoy has none.
    pub fn request_line_part(&self, method: bool, each: &mut dyn FnMut(&[u8])) {
        let id = if method {
            ATTRIBUTE_REQUEST_METHOD
        } else {
            ATTRIBUTE_REQUEST_PATH
        };
        let mut value = EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0,
        };
        // SAFETY: live filter pointer; out-pointer is ours.
        let found = unsafe {
            envoy_dynamic_module_callback_http_filter_get_attribute_string(self.0, id, &mut value)
        };
        if found {
            each(envoy_slice(value.ptr, value.length));
        }
    }

    /// The request headers, copied into one [`HeaderSnapshot`]: two callbacks (~0.8k
    /// instructions in Envoy for a dozen headers, callgrind) where one lookup of a regular header
    /// by name costs Envoy ~3.4k. Pseudo-headers only with `pseudo` (the host reads `:path` and
    /// `:method` as attributes; copying the others for every request cost ~0.1k each).
    pub fn request_headers(&self, pseudo: bool) -> HeaderSnapshot {
        let mut snapshot = HeaderSnapshot::reused();
        snapshot.pseudo = pseudo;
        // SAFETY: live filter pointer.
        let n =
            unsafe { envoy_dynamic_module_callback_http_get_headers_size(self.0, REQUEST_HEADER) };
        if n == 0 {
            return snapshot;
        }
        let empty = EnvoyHeader {
            key_ptr: std::ptr::null(),
            key_length: 0,
            value_ptr: std::ptr::null(),
            value_length: 0,
        };
        ENVOY_HEADERS.with(|scratch| {
            let Ok(mut headers) = scratch.try_borrow_mut() else {
                return;
            };
            headers.clear();
            headers.resize(n, empty);
            // SAFETY: `headers` has room for the `n` headers Envoy just counted; Envoy fills
            // pointers into its header map, valid until the map changes (they are copied out at
            // once, before this call returns).
            let ok = unsafe {
                envoy_dynamic_module_callback_http_get_headers(
                    self.0,
                    REQUEST_HEADER,
                    headers.as_mut_ptr(),
                )
            };
            if !ok {
                return;
            }
            let total = headers
                .iter()
                .map(|h| h.key_length.saturating_add(h.value_length))
                .fold(0usize, usize::saturating_add);
            snapshot.bytes.reserve(total);
            snapshot.spans.reserve(n);
            for h in headers.iter() {
                let name = envoy_slice(h.key_ptr, h.key_length);
                if !pseudo && name.first() == Some(&b':') {
                    continue;
                }
                snapshot.push(name, envoy_slice(h.value_ptr, h.value_length));
            }
            // Only pointers into a map that may change: none is kept past this call.
            headers.clear();
        });
        snapshot
    }

    /// Sets (replaces) a request header.
    pub fn set_request_header(&self, name: &str, value: &str) {
        // SAFETY: live filter pointer; Envoy copies the buffers.
        unsafe {
            envoy_dynamic_module_callback_http_set_header(
                self.0,
                REQUEST_HEADER,
                module_buffer(name.as_bytes()),
                module_buffer(value.as_bytes()),
            );
        }
    }

    /// Removes a request header (a null value removes it).
    pub fn remove_request_header(&self, name: &str) {
        // SAFETY: live filter pointer; a null value buffer means removal.
        unsafe {
            envoy_dynamic_module_callback_http_set_header(
                self.0,
                REQUEST_HEADER,
                module_buffer(name.as_bytes()),
                ModuleBuffer {
                    ptr: std::ptr::null(),
                    length: 0,
                },
            );
        }
    }

    /// Every value of a response header (`trailers`: of a response trailer), in order, copied:
    /// one `get_header` for the first value and the count, one more per further value. Read only
    /// by cost routes, while the response headers (trailers) are being processed.
    pub fn response_values(&self, trailers: bool, name: &str) -> Vec<Vec<u8>> {
        let kind = if trailers {
            RESPONSE_TRAILER
        } else {
            RESPONSE_HEADER
        };
        let mut values = Vec::new();
        let mut count = 0usize;
        let mut index = 0usize;
        loop {
            let mut value = EnvoyBuffer {
                ptr: std::ptr::null(),
                length: 0,
            };
            let size: *mut usize = if index == 0 {
                &mut count
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: live filter pointer; the key buffer is valid for the call; out-pointers are
            // ours. The value points into Envoy's map and is copied before the next call.
            let found = unsafe {
                envoy_dynamic_module_callback_http_get_header(
                    self.0,
                    kind,
                    module_buffer(name.as_bytes()),
                    &mut value,
                    index,
                    size,
                )
            };
            if !found {
                return values;
            }
            values.push(envoy_bytes(value.ptr, value.length));
            index += 1;
            if index >= count {
                return values;
            }
        }
    }

    /// Adds a response header (during `on_response_headers`).
    pub fn add_response_header(&self, name: &str, value: &[u8]) {
        // SAFETY: live filter pointer; Envoy copies the buffers.
        unsafe {
            envoy_dynamic_module_callback_http_add_header(
                self.0,
                RESPONSE_HEADER,
                module_buffer(name.as_bytes()),
                module_buffer(value),
            );
        }
    }

    /// Answers the client directly.
    pub fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let mut headers = module_headers(headers);
        let details = b"sluice";
        // SAFETY: live filter pointer; Envoy copies headers and body.
        unsafe {
            envoy_dynamic_module_callback_http_send_response(
                self.0,
                u32::from(status),
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(body),
                module_buffer(details),
            )
        }
    }

    /// Resumes a request stopped in `on_request_headers`.
    pub fn continue_decoding(&self) {
        // SAFETY: live filter pointer.
        unsafe { envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    /// The downstream peer (`ip:port`).
    pub fn source_address(&self) -> Option<Vec<u8>> {
        let mut value = EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0,
        };
        // SAFETY: live filter pointer; out-pointer is ours.
        let found = unsafe {
            envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.0,
                ATTRIBUTE_SOURCE_ADDRESS,
                &mut value,
            )
        };
        found.then(|| envoy_bytes(value.ptr, value.length))
    }

    /// Starts an HTTP callout; its answer comes to `on_http_filter_http_callout_done`. `Err` is
    /// the init result's number (1 missing headers, 2 cluster not found, 4 cannot create).
    pub fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        let mut headers = module_headers(headers);
        let mut id = 0u64;
        // SAFETY: live filter pointer; Envoy copies headers and body.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_http_callout(
                self.0,
                &mut id,
                module_buffer(cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                module_buffer(body),
                timeout_ms,
            )
        };
        if result == CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// Adds one to a counter defined by the configuration.
    pub fn increment(&self, id: usize) {
        // SAFETY: live filter pointer; no tags.
        unsafe {
            envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                1,
            );
        }
    }

    /// Adds `n` to a counter defined by the configuration (units lost: the rare paths only, so
    /// the hit's [`FilterHandle::increment`] stays as it was).
    pub fn increment_by(&self, id: usize, n: u64) {
        // SAFETY: live filter pointer; no tags.
        unsafe {
            envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                n,
            );
        }
    }
}

/// Reads a callout's answer: its headers and body chunks, copied (the body bounded by `limit`).
fn callout_answer(
    result: u32,
    headers: *const EnvoyHeader,
    headers_size: usize,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
    limit: usize,
) -> CalloutAnswer {
    let mut answer = CalloutAnswer {
        completed: result == CALLOUT_SUCCESS,
        ..CalloutAnswer::default()
    };
    if !headers.is_null() {
        // SAFETY: Envoy passes `headers_size` headers valid for the call.
        let headers = unsafe { std::slice::from_raw_parts(headers, headers_size) };
        for h in headers {
            let name = envoy_bytes(h.key_ptr, h.key_length);
            answer
                .headers
                .push((name, envoy_bytes(h.value_ptr, h.value_length)));
        }
    }
    if !chunks.is_null() {
        // SAFETY: Envoy passes `chunks_size` chunks valid for the call.
        let chunks = unsafe { std::slice::from_raw_parts(chunks, chunks_size) };
        for c in chunks {
            let room = limit.saturating_sub(answer.body.len());
            answer
                .body
                .extend_from_slice(&envoy_bytes(c.ptr, c.length.min(room)));
        }
    }
    answer
}

thread_local! {
    /// The Envoy filter whose hook is running on this thread (null: none).
    static ACTIVE: std::cell::Cell<*mut c_void> = const { std::cell::Cell::new(std::ptr::null_mut()) };
    /// Callout answers Envoy gave while that hook was still running (a callout that fails at
    /// once may be answered inside `http_callout`): handed over when the hook's work allows.
    static EARLY: std::cell::RefCell<Vec<(u64, CalloutAnswer)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `body` as the hook of `filter_envoy` (see `ACTIVE`), restoring the previous one after.
fn as_active<T>(filter_envoy: *mut c_void, body: impl FnOnce() -> T) -> T {
    let previous = ACTIVE.with(|a| a.replace(filter_envoy));
    let out = body();
    ACTIVE.with(|a| a.set(previous));
    out
}

impl FilterHandle {
    /// Callout answers that arrived while this filter's hook was running (none, usually).
    pub fn take_early(&self) -> Vec<(u64, CalloutAnswer)> {
        if ACTIVE.with(|a| a.get()) != self.0 {
            return Vec::new();
        }
        EARLY.with(|e| std::mem::take(&mut *e.borrow_mut()))
    }
}

/// Does what a hook left for Envoy ([`After`]), after the hook's borrow of its filter ended and
/// the worker's lock was released: Envoy may run this filter's other hooks inside these calls.
fn perform(filter_envoy: *mut c_void, after: Option<After>) {
    let handle = FilterHandle(filter_envoy);
    match after {
        None => {}
        Some(After::Resume) => handle.continue_decoding(),
        Some(After::Reply(status, headers, body)) => {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            handle.send_response(status, &headers, &body);
        }
    }
}

/// Runs a hook body, `None` after a panic (logged).
fn caught<T>(hook: &str, body: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => Some(v),
        Err(_) => {
            log(
                Level::Error,
                &format!("sluice: panic in {hook} (a bug; the failure mode applies)"),
            );
            None
        }
    }
}

/// A request whose hook failed (`None`: a panic) or found no filter: the failure mode applies
/// (`glue::undecided`); `sync` in the request-headers hook. With no filter at all (Envoy could
/// not make one) the module fails closed when any configuration says `deny`.
fn undecided(filter: *mut c_void, hook: &str, sync: bool) -> (bool, Option<After>) {
    let outcome = caught(hook, || match filter_mut(filter) {
        Some(f) => glue::undecided(f, hook, sync),
        // No filter after its request headers: this module never stopped the request.
        None if !sync => (false, None),
        None => glue::undecided_without_filter(hook, sync),
    });
    outcome.unwrap_or_else(|| glue::undecided_without_filter(hook, sync))
}

/// Runs a hook body, turning a panic into a log line and `fallback`.
fn guarded<T>(hook: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            log(
                Level::Error,
                &format!("sluice: panic in {hook} (a bug; the request continues)"),
            );
            fallback
        }
    }
}

/// The module's configuration behind Envoy's config module pointer.
fn config_ref<'a>(ptr: *const c_void) -> Option<&'a NativeConfig> {
    // SAFETY: the pointer is one `config_new` returned (a leaked Box), live until config_destroy.
    unsafe { ptr.cast::<NativeConfig>().as_ref() }
}

/// The request's filter behind Envoy's filter module pointer (only its worker thread uses it).
fn filter_mut<'a>(ptr: *mut c_void) -> Option<&'a mut NativeFilter> {
    // SAFETY: the pointer is one `filter_new` returned (a leaked Box), live until filter_destroy;
    // Envoy calls a filter's hooks one at a time on one thread.
    unsafe { ptr.cast::<NativeFilter>().as_mut() }
}

// ---------------------------------------------------------------------------------------------
// Event hooks.
// ---------------------------------------------------------------------------------------------

/// Load time: refuse (null) when the process lacks a callback we call; else our ABI version.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    guarded("program_init", std::ptr::null(), || {
        let missing = missing_callbacks();
        if missing.is_empty() {
            ABI_VERSION_C.as_ptr().cast()
        } else {
            // No logging callback can be trusted here: say it on stderr, and refuse.
            eprintln!(
                "sluice: this Envoy lacks the dynamic-module callbacks {} (the module is built \
                 for ABI {ABI_VERSION}, Envoy 1.40/1.41): not loaded",
                missing.join(", ")
            );
            std::ptr::null()
        }
    })
}

/// A filter configuration: the JSON string the wasm filter gets; null refuses it.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: *mut c_void,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    guarded("http_filter_config_new", std::ptr::null(), || {
        let name = envoy_bytes(name.ptr, name.length);
        let json = envoy_bytes(config.ptr, config.length);
        match glue::config_new(ConfigHandle(config_envoy), &name, &json) {
            Some(config) => Box::into_raw(Box::new(config)).cast_const().cast(),
            None => std::ptr::null(),
        }
    })
}

/// A configuration goes away (after every filter made from it).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *mut c_void) {
    guarded("http_filter_config_destroy", (), || {
        if !config.is_null() {
            // SAFETY: `config_new` leaked this Box; Envoy destroys it once.
            drop(unsafe { Box::from_raw(config.cast::<NativeConfig>()) });
        }
    })
}

/// Per-route configuration is not supported: refused (null).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    guarded("per_route_config_new", std::ptr::null(), || {
        log(
            Level::Error,
            "sluice: per-route configuration is not supported; configure routes in the filter's JSON",
        );
        std::ptr::null()
    })
}

/// Never called (no per-route configuration is ever made).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(_c: *mut c_void) {}

/// A request's filter.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    filter_envoy: *mut c_void,
) -> *mut c_void {
    guarded("http_filter_new", std::ptr::null_mut(), || {
        let Some(config) = config_ref(config) else {
            return std::ptr::null_mut();
        };
        let filter = glue::filter_new(config, FilterHandle(filter_envoy));
        Box::into_raw(Box::new(filter)).cast()
    })
}

/// The request's filter goes away.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *mut c_void) {
    guarded("http_filter_destroy", (), || {
        if filter.is_null() {
            return;
        }
        // SAFETY: `filter_new` leaked this Box; Envoy destroys it once.
        let filter = unsafe { Box::from_raw(filter.cast::<NativeFilter>()) };
        glue::filter_destroy(*filter);
    })
}

/// Request headers: meter, answer, or stop for a callout.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter_envoy: *mut c_void,
    filter: *mut c_void,
    _end_of_stream: bool,
) -> u32 {
    const HOOK: &str = "on_request_headers";
    let outcome = caught(HOOK, || {
        filter_mut(filter).map(|f| as_active(filter_envoy, || glue::on_request_headers(f)))
    });
    let (stop, after) = match outcome {
        Some(Some(decided)) => decided,
        // A panic, or no filter: nothing decided the request.
        Some(None) | None => undecided(filter, HOOK, true),
    };
    perform(filter_envoy, after);
    if stop {
        STOP_ITERATION
    } else {
        CONTINUE
    }
}

/// Request body: held while the decision is pending, else passed through. A "continue" here
/// would let Envoy pass the stopped headers on with the body, undecided. Held with watermarks:
/// a body larger than Envoy's buffer limit waits (the client's reads are paused) rather than
/// being refused with 413, so a decision never changes what sizes a route accepts (the wasm
/// host's `Action::Pause` is the same status).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _e: *mut c_void,
    filter: *mut c_void,
    _end_of_stream: bool,
) -> u32 {
    guarded("on_request_body", CONTINUE, || match filter_mut(filter) {
        Some(f) if glue::decision_pending(f) => STOP_ITERATION_AND_WATERMARK,
        _ => CONTINUE,
    })
}

/// Request trailers: held while the decision is pending (as the body), else passed through.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _e: *mut c_void,
    filter: *mut c_void,
) -> u32 {
    guarded("on_request_trailers", CONTINUE, || {
        match filter_mut(filter) {
            Some(f) if glue::decision_pending(f) => STOP_ITERATION,
            _ => CONTINUE,
        }
    })
}

/// Response headers: the rate-limit headers of an allowed decision.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter_envoy: *mut c_void,
    filter: *mut c_void,
    _end_of_stream: bool,
) -> u32 {
    guarded("on_response_headers", CONTINUE, || {
        let after = filter_mut(filter)
            .and_then(|f| as_active(filter_envoy, || glue::on_response_headers(f)));
        perform(filter_envoy, after);
        CONTINUE
    })
}

/// Response body: passed through.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _e: *mut c_void,
    _f: *mut c_void,
    _end_of_stream: bool,
) -> u32 {
    CONTINUE
}

/// Response trailers: a cost route whose actual cost is a trailer settles here (Envoy calls
/// this only for a response that has trailers).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    filter_envoy: *mut c_void,
    filter: *mut c_void,
) -> u32 {
    guarded("on_response_trailers", CONTINUE, || {
        let after = filter_mut(filter)
            .and_then(|f| as_active(filter_envoy, || glue::on_response_trailers(f)));
        perform(filter_envoy, after);
        CONTINUE
    })
}

/// The stream is done (nothing to do: `destroy` follows).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _e: *mut c_void,
    _f: *mut c_void,
) {
}

/// A request's scheduler fired: an exchange answer handed over from the main thread.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    filter_envoy: *mut c_void,
    filter: *mut c_void,
    event_id: u64,
) {
    const HOOK: &str = "http_filter_scheduled";
    let outcome = caught(HOOK, || {
        filter_mut(filter).and_then(|f| as_active(filter_envoy, || glue::on_scheduled(f, event_id)))
    });
    let after = match outcome {
        Some(after) => after,
        None => undecided(filter, HOOK, false).1,
    };
    guarded(HOOK, (), || perform(filter_envoy, after));
}

/// A decision callout answered (or failed).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    filter_envoy: *mut c_void,
    filter: *mut c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    headers_size: usize,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
) {
    guarded("http_callout_done", (), || {
        let answer = callout_answer(
            result,
            headers,
            headers_size,
            chunks,
            chunks_size,
            glue::MAX_ANSWER,
        );
        if ACTIVE.with(|a| a.get()) == filter_envoy {
            // Inside this filter's own hook (its `http_callout` answered at once): the hook's
            // work takes it over (`FilterHandle::take_early`); no second `&mut` to the filter.
            EARLY.with(|e| e.borrow_mut().push((callout_id, answer)));
            return;
        }
        const HOOK: &str = "http_callout_done";
        let outcome = caught(HOOK, || {
            filter_mut(filter).and_then(|f| {
                as_active(filter_envoy, || {
                    glue::on_callout_done(f, callout_id, answer)
                })
            })
        });
        let after = match outcome {
            Some(after) => after,
            None => undecided(filter, HOOK, false).1,
        };
        perform(filter_envoy, after);
    })
}

/// Streams are not used by this build.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _e: *mut c_void,
    _f: *mut c_void,
    _stream_id: u64,
    _headers: *const EnvoyHeader,
    _headers_size: usize,
    _end_stream: bool,
) {
}

/// Streams are not used by this build.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _e: *mut c_void,
    _f: *mut c_void,
    _stream_id: u64,
    _chunks: *const EnvoyBuffer,
    _chunks_size: usize,
    _end_stream: bool,
) {
}

/// Streams are not used by this build.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _e: *mut c_void,
    _f: *mut c_void,
    _stream_id: u64,
    _trailers: *const EnvoyHeader,
    _trailers_size: usize,
) {
}

/// Streams are not used by this build.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _e: *mut c_void,
    _f: *mut c_void,
    _stream_id: u64,
) {
}

/// Streams are not used by this build.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _e: *mut c_void,
    _f: *mut c_void,
    _stream_id: u64,
    _reason: u32,
) {
}

/// Watermarks: nothing buffered, nothing to do.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _e: *mut c_void,
    _f: *mut c_void,
) {
}

/// Watermarks: nothing buffered, nothing to do.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _e: *mut c_void,
    _f: *mut c_void,
) {
}

/// A local reply (ours or Envoy's): continue with it.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_local_reply(
    _e: *mut c_void,
    _f: *mut c_void,
    _response_code: u32,
    _details: EnvoyBuffer,
    _reset_imminent: bool,
) -> u32 {
    CONTINUE
}

/// A report callout (made from the main thread) answered.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _config_envoy: *mut c_void,
    config: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    headers_size: usize,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
) {
    guarded("config_http_callout_done", (), || {
        let Some(config) = config_ref(config) else {
            return;
        };
        let answer = callout_answer(
            result,
            headers,
            headers_size,
            chunks,
            chunks_size,
            glue::MAX_ANSWER,
        );
        glue::on_config_callout_done(config, callout_id, answer);
    })
}

/// The exchange stream's response headers (main thread).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_headers(
    _e: *mut c_void,
    config: *const c_void,
    stream_id: u64,
    headers: *const EnvoyHeader,
    headers_size: usize,
    _end_stream: bool,
) {
    guarded("config_http_stream_headers", (), || {
        if let Some(config) = config_ref(config) {
            let headers = envoy_headers(headers, headers_size);
            glue::on_config_stream_headers(config, stream_id, &headers);
        }
    })
}

/// Data on the exchange stream: reply frames (main thread).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_data(
    _e: *mut c_void,
    config: *const c_void,
    stream_id: u64,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
    _end_stream: bool,
) {
    guarded("config_http_stream_data", (), || {
        if let Some(config) = config_ref(config) {
            let bytes = envoy_chunks(chunks, chunks_size);
            glue::on_config_stream_data(config, stream_id, &bytes);
        }
    })
}

/// The exchange stream's trailers: its gRPC status (main thread).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_trailers(
    _e: *mut c_void,
    config: *const c_void,
    stream_id: u64,
    trailers: *const EnvoyHeader,
    trailers_size: usize,
) {
    guarded("config_http_stream_trailers", (), || {
        if let Some(config) = config_ref(config) {
            let trailers = envoy_headers(trailers, trailers_size);
            glue::on_config_stream_headers(config, stream_id, &trailers);
        }
    })
}

/// The exchange stream ended (main thread).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_complete(
    _e: *mut c_void,
    config: *const c_void,
    stream_id: u64,
) {
    guarded("config_http_stream_complete", (), || {
        if let Some(config) = config_ref(config) {
            glue::on_config_stream_end(config, stream_id, None);
        }
    })
}

/// The exchange stream was reset (main thread).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_stream_reset(
    _e: *mut c_void,
    config: *const c_void,
    stream_id: u64,
    reason: u32,
) {
    guarded("config_http_stream_reset", (), || {
        if let Some(config) = config_ref(config) {
            glue::on_config_stream_end(config, stream_id, Some(reason));
        }
    })
}

/// The main thread's turn: send the reports the workers queued (event 0), or the exchange
/// stream's turn (`stream::STREAM_EVENT`).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _config_envoy: *mut c_void,
    config: *const c_void,
    event_id: u64,
) {
    guarded("config_scheduled", (), || {
        if let Some(config) = config_ref(config) {
            if event_id == crate::stream::STREAM_EVENT {
                glue::on_config_stream_turn(config);
            } else {
                glue::on_config_scheduled(config);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside Envoy no callback exists: the load-time check names every one (in Envoy 1.40
    /// none is missing, which the e2e tests show by loading the module at all).
    #[test]
    fn the_load_check_names_every_missing_callback() {
        let missing = missing_callbacks();
        assert_eq!(missing.len(), CALLBACKS.len());
        assert!(missing.contains(&"envoy_dynamic_module_callback_http_send_response".to_owned()));
        assert!(missing
            .iter()
            .all(|m| m.starts_with("envoy_dynamic_module_callback_")));
    }

    #[test]
    fn a_header_snapshot_finds_values_by_name() {
        let mut s = HeaderSnapshot::default();
        assert!(!s.has_pseudo());
        s.push(b"x-user", b"alice");
        s.push(b"X-Multi", b"1");
        s.push(b"x-multi", b"2");
        s.push(b"x-empty", b"");
        assert_eq!(s.values("x-user"), vec![b"alice".to_vec()]);
        assert_eq!(s.values("x-multi"), vec![b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(s.values("x-empty"), vec![Vec::<u8>::new()]);
        assert!(s.values("x-use").is_empty());
        assert!(s.has("X-USER") && !s.has("x-sluice-shadow"));
    }

    #[test]
    fn a_recycled_snapshot_comes_back_empty_and_a_large_one_is_dropped() {
        let mut s = HeaderSnapshot::default();
        s.push(b"x-user", b"alice");
        let room = s.bytes.capacity();
        s.recycle();
        let again = HeaderSnapshot::reused();
        assert!(again.values("x-user").is_empty() && !again.has("x-user"));
        assert_eq!(again.bytes.capacity(), room);
        let mut big = HeaderSnapshot::default();
        big.push(b"x-big", &vec![b'a'; REUSED_SNAPSHOT_BYTES + 1]);
        big.recycle();
        assert_eq!(HeaderSnapshot::reused().bytes.capacity(), 0);
    }
}
