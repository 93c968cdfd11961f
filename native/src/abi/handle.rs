//! The handles: Envoy's objects as the module holds them (a request's filter, a configuration,
//! their schedulers), each call a safe method over one `extern "C"` callback of `ffi.rs`.
//!
//! A handle is made only by the exported hooks (`hooks.rs`), through an `unsafe` constructor
//! whose contract is the pointer's lifetime in Envoy: a [`FilterHandle`] lives in its request's
//! filter (dropped in `on_http_filter_destroy`, before Envoy frees its side), a [`ConfigHandle`]
//! in its configuration (dropped in `on_http_filter_config_destroy`). Nothing Envoy lends
//! (a header's bytes, a buffer) outlives the call that lent it: readers hand bytes to a closure
//! or copy them.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;

use super::ffi::{self, EnvoyBuffer, EnvoyHeader};
use crate::copied::{CalloutAnswer, HeaderSnapshot, Pseudo};

thread_local! {
    /// The worker's scratch array for `get_headers` (emptied after each use: Envoy's pointers are
    /// never kept).
    static ENVOY_HEADERS: RefCell<Vec<EnvoyHeader>> = const { RefCell::new(Vec::new()) };
    /// The Envoy filter whose hook is running on this thread (null: none).
    static ACTIVE: Cell<*mut c_void> = const { Cell::new(std::ptr::null_mut()) };
    /// Callout answers Envoy gave while that hook was still running (a callout that fails at
    /// once may be answered inside `http_callout`): handed over when the hook's work allows.
    static EARLY: RefCell<Vec<(u64, CalloutAnswer)>> = const { RefCell::new(Vec::new()) };
}

/// Starts a callout through `call` (the filter's or the configuration's `http_callout`), handed
/// Envoy's views of `cluster`, `headers` and `body` (valid during `call`) and the id to fill: the
/// id, or Envoy's init result's number.
#[inline]
fn start_callout(
    cluster: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    call: impl FnOnce(
        &mut u64,
        ffi::ModuleBuffer,
        *mut ffi::ModuleHeader,
        usize,
        ffi::ModuleBuffer,
    ) -> u32,
) -> Result<u64, u32> {
    let mut headers = ffi::module_headers(headers);
    let mut id = 0u64;
    let result = call(
        &mut id,
        ffi::module_buffer(cluster.as_bytes()),
        headers.as_mut_ptr(),
        headers.len(),
        ffi::module_buffer(body),
    );
    if result == ffi::CALLOUT_INIT_SUCCESS {
        Ok(id)
    } else {
        Err(result)
    }
}

/// Which part of the request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinePart {
    /// `:path` (Envoy's `request.path`).
    Path,
    /// `:method` (Envoy's `request.method`).
    Method,
}

/// Which part of the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponsePart {
    /// The response headers.
    Headers,
    /// The response trailers.
    Trailers,
}

/// Envoy's side of one filter configuration (`envoy_dynamic_module_type_http_filter_config_envoy_ptr`):
/// valid from `on_http_filter_config_new` until `on_http_filter_config_destroy` returns.
#[derive(Debug, Clone, Copy)]
pub struct ConfigHandle(*mut c_void);

// SAFETY: the pointer is only an address here; it is used only on the main thread (counters are
// defined in `config_new`, config callouts and streams are made from the configuration's
// scheduled and callout hooks).
unsafe impl Send for ConfigHandle {}
// SAFETY: as above.
unsafe impl Sync for ConfigHandle {}

impl ConfigHandle {
    /// The handle of the configuration Envoy passed to `on_http_filter_config_new`.
    ///
    /// # Safety
    ///
    /// `config_envoy` is Envoy's pointer for a configuration being made, and the handle (and its
    /// copies) is used only on the main thread while that configuration lives (until its
    /// `on_http_filter_config_destroy`).
    pub unsafe fn from_envoy(config_envoy: *mut c_void) -> ConfigHandle {
        ConfigHandle(config_envoy)
    }

    /// Defines a counter (during `config_new` only); its id for [`FilterHandle::increment`].
    pub fn define_counter(&self, name: &str) -> Option<usize> {
        let mut id = 0usize;
        // SAFETY: the config pointer is live (`from_envoy`); the name buffer is valid for the
        // call (Envoy copies it); no tags; `id` is ours.
        let result = unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_config_define_counter(
                self.0,
                ffi::module_buffer(name.as_bytes()),
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

    /// Adds `n` to a counter defined by this configuration (main thread). Envoy 1.38 has no
    /// configuration-level counters: there the v0.1.0 build drops these counts.
    pub fn increment_by(&self, id: usize, n: u64) {
        // SAFETY: the config pointer is live (`from_envoy`); no tags.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_config_increment_counter(
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
        start_callout(
            cluster,
            headers,
            body,
            |id, cluster, headers, size, body| {
                // SAFETY: the config pointer is live (`from_envoy`); the buffers and the header
                // array are valid for the call and Envoy copies them; `id` is ours.
                unsafe {
                    ffi::envoy_dynamic_module_callback_http_filter_config_http_callout(
                        self.0, id, cluster, headers, size, body, timeout_ms,
                    )
                }
            },
        )
    }

    /// A scheduler posting events to the main thread (`on_http_filter_config_scheduled`).
    pub fn scheduler(&self) -> Option<Scheduler> {
        // SAFETY: the config pointer is live (`from_envoy`).
        let ptr =
            unsafe { ffi::envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) };
        (!ptr.is_null()).then_some(Scheduler(ptr))
    }

    /// Starts an HTTP stream to `cluster` (headers sent, the stream left open; `timeout_ms` 0: no
    /// timeout); its id, or the init result's number. Its events come to the configuration's
    /// `http_stream_*` hooks. Main thread only, as every config-level callout (Envoy's async
    /// client there belongs to the main thread's dispatcher).
    pub fn start_http_stream(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        let mut headers = ffi::module_headers(headers);
        let mut id = 0u64;
        // SAFETY: the config pointer is live (`from_envoy`; called from its own scheduled hook);
        // Envoy copies the cluster and headers during the call; `id` is ours.
        let result = unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_config_start_http_stream(
                self.0,
                &mut id,
                ffi::module_buffer(cluster.as_bytes()),
                headers.as_mut_ptr(),
                headers.len(),
                ffi::module_buffer(&[]),
                false,
                timeout_ms,
            )
        };
        if result == ffi::CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// Sends `data` on stream `id`; false when Envoy no longer has that stream.
    pub fn stream_send_data(&self, id: u64, data: &[u8]) -> bool {
        // SAFETY: the config pointer is live (`from_envoy`); Envoy copies the data during the
        // call; an unknown id is answered false.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_config_stream_send_data(
                self.0,
                id,
                ffi::module_buffer(data),
                false,
            )
        }
    }

    /// Resets stream `id` (nothing when Envoy no longer has it).
    pub fn reset_http_stream(&self, id: u64) {
        // SAFETY: the config pointer is live (`from_envoy`); an unknown id does nothing.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_config_reset_http_stream(self.0, id)
        }
    }
}

/// A config scheduler: `commit` may be called from any thread and runs
/// `on_http_filter_config_scheduled` on Envoy's main thread.
#[derive(Debug)]
pub struct Scheduler(*mut c_void);

// SAFETY: Envoy's scheduler posts to the main dispatcher, which is thread-safe; it is deleted
// once, on drop, by whichever thread owns it then.
unsafe impl Send for Scheduler {}
// SAFETY: as above; `commit` changes nothing in the scheduler.
unsafe impl Sync for Scheduler {}

impl Scheduler {
    /// Asks for `on_http_filter_config_scheduled(event_id)` on the main thread.
    pub fn commit(&self, event_id: u64) {
        // SAFETY: made by `scheduler_new` and not yet deleted (that is `drop`, once).
        unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, event_id)
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: made by `scheduler_new`, deleted here once.
        unsafe { ffi::envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
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
        // SAFETY: made by `scheduler_new` and not yet deleted (that is `drop`, once); valid past
        // its filter (see the type's doc).
        unsafe { ffi::envoy_dynamic_module_callback_http_filter_scheduler_commit(self.0, event_id) }
    }
}

impl Drop for FilterScheduler {
    fn drop(&mut self) {
        // SAFETY: made by `scheduler_new`, deleted here once.
        unsafe { ffi::envoy_dynamic_module_callback_http_filter_scheduler_delete(self.0) }
    }
}

/// Envoy's side of one request's filter (`envoy_dynamic_module_type_http_filter_envoy_ptr`): valid
/// until `on_http_filter_destroy`; used only on the worker thread that runs the request.
#[derive(Debug)]
pub struct FilterHandle(*mut c_void);

impl FilterHandle {
    /// The handle of the filter Envoy passed to one of its hooks.
    ///
    /// # Safety
    ///
    /// `filter_envoy` is Envoy's pointer for a live request's filter, and the handle is used only
    /// on that request's worker thread, while the filter lives: within the hook it was made in,
    /// or kept in the request's module-side filter (which `on_http_filter_destroy` drops, before
    /// Envoy frees its side).
    pub unsafe fn from_envoy(filter_envoy: *mut c_void) -> FilterHandle {
        FilterHandle(filter_envoy)
    }

    /// `:path` or `:method` of the request, read as Envoy's `request.path` / `request.method`
    /// attributes: Envoy hands out its inline header with no lookup by name (a `get_header` by
    /// name costs Envoy ~1.4k instructions, callgrind).
    ///
    /// `each` gets the value borrowed from Envoy's header map (valid during this hook: it is not
    /// kept), not at all when Envoy has none.
    pub fn request_line_part(&self, part: LinePart, each: &mut dyn FnMut(&[u8])) {
        let id = match part {
            LinePart::Method => ffi::ATTRIBUTE_REQUEST_METHOD,
            LinePart::Path => ffi::ATTRIBUTE_REQUEST_PATH,
        };
        let mut value = EnvoyBuffer::empty();
        // SAFETY: live filter pointer (`from_envoy`), on its worker; the out-buffer is ours and
        // Envoy points it into its header map, read (below) before this hook returns.
        let found = unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.0, id, &mut value,
            )
        };
        if found {
            each(value.bytes());
        }
    }

    /// The request headers, copied into one [`HeaderSnapshot`]: two callbacks (~0.8k
    /// instructions in Envoy for a dozen headers, callgrind) where one lookup of a regular header
    /// by name costs Envoy ~3.4k. Pseudo-headers only with [`Pseudo::Included`] (the host reads
    /// `:path` and `:method` as attributes; copying the others for every request cost ~0.1k
    /// each).
    pub fn request_headers(&self, pseudo: Pseudo) -> HeaderSnapshot {
        let mut snapshot = HeaderSnapshot::reused(pseudo);
        // SAFETY: live filter pointer (`from_envoy`), on its worker.
        let n = unsafe {
            ffi::envoy_dynamic_module_callback_http_get_headers_size(self.0, ffi::REQUEST_HEADER)
        };
        if n == 0 {
            return snapshot;
        }
        ENVOY_HEADERS.with(|scratch| {
            let Ok(mut headers) = scratch.try_borrow_mut() else {
                return;
            };
            headers.clear();
            headers.resize_with(n, EnvoyHeader::empty);
            // SAFETY: live filter pointer; `headers` has room for the `n` headers Envoy just
            // counted; Envoy fills pointers into its header map, valid until the map changes:
            // they are copied out below and the array is emptied before this call returns.
            let ok = unsafe {
                ffi::envoy_dynamic_module_callback_http_get_headers(
                    self.0,
                    ffi::REQUEST_HEADER,
                    headers.as_mut_ptr(),
                )
            };
            if !ok {
                headers.clear();
                return;
            }
            let total = headers
                .iter()
                .map(EnvoyHeader::size)
                .fold(0usize, usize::saturating_add);
            snapshot.reserve(n, total);
            for h in headers.iter() {
                let name = h.name();
                if pseudo == Pseudo::Skipped && name.first() == Some(&b':') {
                    continue;
                }
                snapshot.push(name, h.value());
            }
            // Only pointers into a map that may change: none is kept past this call.
            headers.clear();
        });
        snapshot
    }

    /// Sets (replaces) a request header.
    pub fn set_request_header(&self, name: &str, value: &str) {
        // SAFETY: live filter pointer (`from_envoy`), on its worker; Envoy copies the buffers.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_set_header(
                self.0,
                ffi::REQUEST_HEADER,
                ffi::module_buffer(name.as_bytes()),
                ffi::module_buffer(value.as_bytes()),
            );
        }
    }

    /// Removes a request header (a null value removes it).
    pub fn remove_request_header(&self, name: &str) {
        // SAFETY: live filter pointer (`from_envoy`), on its worker; a null value buffer means
        // removal; Envoy copies the name.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_set_header(
                self.0,
                ffi::REQUEST_HEADER,
                ffi::module_buffer(name.as_bytes()),
                ffi::null_buffer(),
            );
        }
    }

    /// Every value of a response header (or trailer), in order, copied: one `get_header` for the
    /// first value and the count, one more per further value. Read only by cost routes, while
    /// the response headers (trailers) are being processed.
    pub fn response_values(&self, part: ResponsePart, name: &str) -> Vec<Vec<u8>> {
        let kind = match part {
            ResponsePart::Headers => ffi::RESPONSE_HEADER,
            ResponsePart::Trailers => ffi::RESPONSE_TRAILER,
        };
        let mut values = Vec::new();
        let mut count = 0usize;
        let mut index = 0usize;
        loop {
            let mut value = EnvoyBuffer::empty();
            let size: *mut usize = if index == 0 {
                &mut count
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: live filter pointer (`from_envoy`), on its worker; the key buffer is valid
            // for the call; out-pointers are ours. The value points into Envoy's map and is
            // copied before the next call.
            let found = unsafe {
                ffi::envoy_dynamic_module_callback_http_get_header(
                    self.0,
                    kind,
                    ffi::module_buffer(name.as_bytes()),
                    &mut value,
                    index,
                    size,
                )
            };
            if !found {
                return values;
            }
            values.push(value.bytes().to_vec());
            index += 1;
            if index >= count {
                return values;
            }
        }
    }

    /// Adds a response header (during `on_response_headers`).
    pub fn add_response_header(&self, name: &str, value: &[u8]) {
        // SAFETY: live filter pointer (`from_envoy`), on its worker; Envoy copies the buffers.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_add_header(
                self.0,
                ffi::RESPONSE_HEADER,
                ffi::module_buffer(name.as_bytes()),
                ffi::module_buffer(value),
            );
        }
    }

    /// Answers the client directly.
    pub fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let mut headers = ffi::module_headers(headers);
        let details = b"sluice";
        // SAFETY: live filter pointer (`from_envoy`), on its worker; Envoy copies headers, body
        // and details during the call.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_send_response(
                self.0,
                u32::from(status),
                headers.as_mut_ptr(),
                headers.len(),
                ffi::module_buffer(body),
                ffi::module_buffer(details),
            )
        }
    }

    /// Resumes a request stopped in `on_request_headers`.
    pub fn continue_decoding(&self) {
        // SAFETY: live filter pointer (`from_envoy`), on its worker.
        unsafe { ffi::envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    /// The downstream peer (`ip:port`).
    pub fn source_address(&self) -> Option<Vec<u8>> {
        let mut value = EnvoyBuffer::empty();
        // SAFETY: live filter pointer (`from_envoy`), on its worker; the out-buffer is ours and
        // copied before this returns.
        let found = unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.0,
                ffi::ATTRIBUTE_SOURCE_ADDRESS,
                &mut value,
            )
        };
        found.then(|| value.bytes().to_vec())
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
        start_callout(
            cluster,
            headers,
            body,
            |id, cluster, headers, size, body| {
                // SAFETY: live filter pointer (`from_envoy`), on its worker; the buffers and the
                // header array are valid for the call and Envoy copies them; `id` is ours.
                unsafe {
                    ffi::envoy_dynamic_module_callback_http_filter_http_callout(
                        self.0, id, cluster, headers, size, body, timeout_ms,
                    )
                }
            },
        )
    }

    /// Adds one to a counter defined by the configuration.
    pub fn increment(&self, id: usize) {
        // SAFETY: live filter pointer (`from_envoy`), on its worker; no tags.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_increment_counter(
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
        // SAFETY: live filter pointer (`from_envoy`), on its worker; no tags.
        unsafe {
            ffi::envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                n,
            );
        }
    }

    /// A scheduler for this request (call on its worker, during one of its hooks).
    pub fn scheduler(&self) -> Option<FilterScheduler> {
        // SAFETY: live filter pointer (`from_envoy`), on its worker.
        let ptr = unsafe { ffi::envoy_dynamic_module_callback_http_filter_scheduler_new(self.0) };
        (!ptr.is_null()).then_some(FilterScheduler(ptr))
    }

    /// Callout answers that arrived while this filter's hook was running (none, usually).
    pub fn take_early(&self) -> Vec<(u64, CalloutAnswer)> {
        if !is_active(self.0) {
            return Vec::new();
        }
        EARLY.with(|e| std::mem::take(&mut *e.borrow_mut()))
    }
}

/// Runs `body` as the hook of `filter_envoy` (see `ACTIVE`), restoring the previous one after,
/// on every exit: a panic caught above (`hooks.rs`) must not leave the marker set, or a later
/// filter Envoy allocates at the same address would have its callout answers parked in `EARLY`
/// as if its own hook were running, and never delivered (its request waits for the route
/// timeout).
pub fn as_active<T>(filter_envoy: *mut c_void, body: impl FnOnce() -> T) -> T {
    let _restore = Restore(ACTIVE.with(|a| a.replace(filter_envoy)));
    body()
}

/// Puts the previous active filter back when dropped (a normal return or an unwind).
struct Restore(*mut c_void);

impl Drop for Restore {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(self.0));
        if std::thread::panicking() {
            // The hook that would have taken them over died: answers it parked are its own,
            // stale, and must not be handed to the next filter's `take_early`.
            EARLY.with(|e| e.borrow_mut().clear());
        }
    }
}

/// Whether a hook of `filter_envoy` is running on this thread.
pub fn is_active(filter_envoy: *mut c_void) -> bool {
    ACTIVE.with(Cell::get) == filter_envoy
}

/// Keeps an answer that came inside its filter's own hook, for [`FilterHandle::take_early`].
pub fn keep_early(callout_id: u64, answer: CalloutAnswer) {
    EARLY.with(|e| e.borrow_mut().push((callout_id, answer)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn ptr(n: usize) -> *mut c_void {
        n as *mut c_void
    }

    #[test]
    fn the_marker_is_restored_after_a_normal_return() {
        let inside = as_active(ptr(0x10), || is_active(ptr(0x10)));
        assert!(inside);
        assert!(!is_active(ptr(0x10)));
        assert!(is_active(std::ptr::null_mut()));
    }

    #[test]
    fn the_marker_is_restored_after_a_panic_and_parked_answers_are_dropped() {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            as_active(ptr(0x20), || {
                keep_early(7, CalloutAnswer::default());
                panic!("a hook's bug");
            })
        }));
        assert!(caught.is_err());
        // A later filter at the same address is not taken for the running hook ...
        assert!(!is_active(ptr(0x20)));
        assert!(is_active(std::ptr::null_mut()));
        // ... and gets none of the dead hook's answers.
        let later = as_active(ptr(0x20), || EARLY.with(|e| e.borrow().len()));
        assert_eq!(later, 0);
    }

    #[test]
    fn a_nested_hook_restores_the_outer_one() {
        as_active(ptr(0x30), || {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                as_active(ptr(0x40), || panic!("inner"));
            }));
            assert!(is_active(ptr(0x30)));
        });
        assert!(is_active(std::ptr::null_mut()));
    }
}
