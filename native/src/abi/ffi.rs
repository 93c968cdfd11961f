//! The ground floor: Envoy's dynamic-module ABI as Envoy 1.40 speaks it (ABI `v0.2.0`): the
//! `repr(C)` types, the constants, the `extern "C"` declarations of the callbacks the module
//! calls (checked against the loading process by [`missing_callbacks`]), the log callback, and
//! the readers that copy Envoy's buffers. The names, signatures and semantics are Envoy's
//! (`source/extensions/dynamic_modules/abi/abi.h`); Envoy's Rust SDK is not a published crate.
//!
//! Imports nothing of the crate but [`crate::copied`] (plain data): the handles (`handle.rs`)
//! sit on this, the glue on them, the exported hooks (`hooks.rs`) on top.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::sync::OnceLock;

use crate::copied::CalloutAnswer;

/// The ABI version this module is built for, reported from `envoy_dynamic_module_on_program_init`
/// (Envoy 1.40 logs "Dynamic module ABI version v0.2.0 matched."). Chosen at build time: the
/// default is Envoy 1.40's `v0.2.0`; the feature `abi-v0_1_0` builds for Envoy 1.38 and 1.39,
/// which both report `v0.1.0` (docs/envoy-versions.md).
#[cfg(not(feature = "abi-v0_1_0"))]
pub const ABI_VERSION: &str = "v0.2.0";
/// See the other build's [`ABI_VERSION`].
#[cfg(feature = "abi-v0_1_0")]
pub const ABI_VERSION: &str = "v0.1.0";
/// [`ABI_VERSION`], NUL-terminated, as `on_program_init` returns it.
#[cfg(not(feature = "abi-v0_1_0"))]
pub const ABI_VERSION_C: &[u8] = b"v0.2.0\0";
/// See the other build's [`ABI_VERSION_C`].
#[cfg(feature = "abi-v0_1_0")]
pub const ABI_VERSION_C: &[u8] = b"v0.1.0\0";
/// The Envoy minors whose dynamic-module ABI this build speaks, for the log lines that refuse a
/// load.
#[cfg(not(feature = "abi-v0_1_0"))]
pub const ENVOY_MINORS: &str = "Envoy 1.40/1.41";
/// See the other build's [`ENVOY_MINORS`].
#[cfg(feature = "abi-v0_1_0")]
pub const ENVOY_MINORS: &str = "Envoy 1.38/1.39";

/// A buffer owned by Envoy (`envoy_dynamic_module_type_envoy_buffer`), valid during the call
/// that handed it over (a hook's argument) or filled it (a callback's out-parameter). Neither
/// `Copy` nor `Clone`, and never stored: [`EnvoyBuffer::bytes`] borrows from it, so the borrow
/// ends before that call does.
#[repr(C)]
pub struct EnvoyBuffer {
    ptr: *const c_char,
    length: usize,
}

impl EnvoyBuffer {
    /// An empty buffer for Envoy to fill (an out-parameter).
    pub fn empty() -> Self {
        EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0,
        }
    }

    /// The bytes, borrowed for no longer than the buffer (empty for a null pointer).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: Envoy filled or handed over this buffer for the current call (its fields are
        // private: nothing else makes one but `empty`, null); the slice lives as long as `self`.
        unsafe { raw_slice(self, self.ptr, self.length) }
    }

    /// The bytes copied, at most `limit` of them.
    pub fn to_vec_up_to(&self, limit: usize) -> Vec<u8> {
        // SAFETY: as `bytes`; at most `length` bytes are read.
        unsafe { raw_slice(self, self.ptr, self.length.min(limit)) }.to_vec()
    }

    /// Its length (what Envoy says it holds).
    pub fn len(&self) -> usize {
        self.length
    }
}

/// A header owned by Envoy (`envoy_dynamic_module_type_envoy_http_header`): as
/// [`EnvoyBuffer`], valid during the call that handed it over or filled it, never stored past it.
#[repr(C)]
pub struct EnvoyHeader {
    key_ptr: *const c_char,
    key_length: usize,
    value_ptr: *const c_char,
    value_length: usize,
}

impl EnvoyHeader {
    /// An empty header for Envoy to fill (an out-array's slot).
    pub fn empty() -> Self {
        EnvoyHeader {
            key_ptr: std::ptr::null(),
            key_length: 0,
            value_ptr: std::ptr::null(),
            value_length: 0,
        }
    }

    /// The name, borrowed for no longer than the header.
    pub fn name(&self) -> &[u8] {
        // SAFETY: as `EnvoyBuffer::bytes`: Envoy's header for the current call.
        unsafe { raw_slice(self, self.key_ptr, self.key_length) }
    }

    /// The value, borrowed for no longer than the header.
    pub fn value(&self) -> &[u8] {
        // SAFETY: as `EnvoyBuffer::bytes`: Envoy's header for the current call.
        unsafe { raw_slice(self, self.value_ptr, self.value_length) }
    }

    /// Name and value lengths together.
    pub fn size(&self) -> usize {
        self.key_length.saturating_add(self.value_length)
    }
}

/// `ptr..ptr + length` as a slice borrowed for as long as `_owner` (the Envoy value holding the
/// pointer); empty for a null pointer.
///
/// # Safety
///
/// A non-null `ptr` is valid for `length` bytes for as long as `_owner` is borrowed: it comes
/// from an `EnvoyBuffer`/`EnvoyHeader` that Envoy filled or handed over for the current call,
/// which is not `Copy`, not `Clone` and never stored past that call.
unsafe fn raw_slice<T>(_owner: &T, ptr: *const c_char, length: usize) -> &[u8] {
    if ptr.is_null() || length == 0 {
        return &[];
    }
    // SAFETY: the caller's contract above.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), length) }
}

/// A buffer owned by the module (`envoy_dynamic_module_type_module_buffer`): Envoy copies it
/// during the call it is passed to.
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

/// `bytes` as a module buffer (valid while `bytes` is).
pub fn module_buffer(bytes: &[u8]) -> ModuleBuffer {
    ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

/// A null module buffer (for `set_header`: removes the header).
pub fn null_buffer() -> ModuleBuffer {
    ModuleBuffer {
        ptr: std::ptr::null(),
        length: 0,
    }
}

/// `headers` as module headers (valid while `headers` is).
pub fn module_headers(headers: &[(&str, &str)]) -> Vec<ModuleHeader> {
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

// `envoy_dynamic_module_type_http_header_type`.
pub const REQUEST_HEADER: u32 = 0;
pub const RESPONSE_HEADER: u32 = 2;
pub const RESPONSE_TRAILER: u32 = 3;
// `envoy_dynamic_module_type_log_level`.
const LOG_INFO: u32 = 2;
const LOG_WARN: u32 = 3;
const LOG_ERROR: u32 = 4;
// `envoy_dynamic_module_type_attribute_id_RequestPath` (`request.path`, the whole `:path`) and
// `_RequestMethod` (`request.method`).
pub const ATTRIBUTE_REQUEST_PATH: u32 = 0;
pub const ATTRIBUTE_REQUEST_METHOD: u32 = 4;
// `envoy_dynamic_module_type_attribute_id_SourceAddress` (`source.address`, `ip:port`).
pub const ATTRIBUTE_SOURCE_ADDRESS: u32 = 24;
// `envoy_dynamic_module_type_on_http_filter_*_status`.
pub const CONTINUE: u32 = 0;
pub const STOP_ITERATION: u32 = 1;
// `envoy_dynamic_module_type_on_http_filter_request_body_status_StopIterationAndWatermark`
// (Envoy's `FilterDataStatus::StopIterationAndWatermark`): the body waits in Envoy with flow
// control (reads paused past the buffer limit) instead of failing the request with 413 once it
// passes the limit, as `StopIterationAndBuffer` does.
pub const STOP_ITERATION_AND_WATERMARK: u32 = 2;
// `envoy_dynamic_module_type_http_callout_init_result` / `_http_callout_result`.
pub const CALLOUT_INIT_SUCCESS: u32 = 0;
const CALLOUT_SUCCESS: u32 = 0;

/// Declares Envoy's callbacks the module calls, each as an `unsafe fn` of the same name and
/// signature that calls through a table resolved by `dlsym` at load ([`resolve_callbacks`]), not
/// as `extern` symbols bound by the dynamic loader. Bound by the loader, a callback the loading
/// Envoy lacks fails `dlopen` with "undefined symbol" before the module can say which ABI it
/// speaks (Rust calls external functions through the GOT, bound at load whatever `-z lazy`
/// says); resolved here, `on_program_init` names the ABI mismatch and refuses the module
/// (issue 33: Envoy 1.36 to 1.38 lack some of 1.40's callbacks).
macro_rules! callbacks {
    ($(
        $(#[$meta:meta])*
        pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        /// Envoy's callbacks, resolved once.
        struct Callbacks {
            $($(#[$meta])* $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?,)*
        }

        /// Every callback's symbol, NUL-terminated.
        const CALLBACK_NAMES: &[&str] = &[$($(#[$meta])* concat!(stringify!($name), "\0"),)*];

        impl Callbacks {
            fn resolve() -> Result<Callbacks, Vec<String>> {
                let missing = missing_callbacks();
                if !missing.is_empty() {
                    return Err(missing);
                }
                Ok(Callbacks {
                    $($(#[$meta])* $name: {
                        let address = lookup(concat!(stringify!($name), "\0"));
                        // SAFETY: `address` is not null (checked above) and is Envoy's
                        // function of this name, whose C signature the ABI header gives as
                        // declared here.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) $(-> $ret)?>(address)
                        }
                    },)*
                })
            }
        }

        $(
            $(#[$meta])*
            #[allow(clippy::too_many_arguments)]
            /// Envoy's callback of this name (`abi.h`), through the resolved table.
            ///
            /// # Safety
            ///
            /// As Envoy's ABI states for this callback; called only after
            /// [`resolve_callbacks`] succeeded (Envoy runs no hook of a module whose
            /// `on_program_init` refused).
            pub unsafe fn $name($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the caller's contract above.
                unsafe { (table().$name)($($arg),*) }
            }
        )*
    };
}

/// Envoy's configuration-level counter increment (main thread), which Envoy 1.39 exports and 1.38
/// does not (both report ABI v0.1.0): the v0.1.0 build calls it where it exists and drops the
/// count where it does not (docs/envoy-versions.md).
#[cfg(feature = "abi-v0_1_0")]
type ConfigIncrementCounter =
    unsafe extern "C" fn(*mut c_void, usize, *mut ModuleBuffer, usize, u64) -> u32;

#[cfg(feature = "abi-v0_1_0")]
static CONFIG_INCREMENT_COUNTER: OnceLock<Option<ConfigIncrementCounter>> = OnceLock::new();

/// Envoy's `envoy_dynamic_module_callback_http_filter_config_increment_counter` where the loading
/// Envoy has it (1.39), else nothing (1.38: the count is dropped; returns 0).
///
/// # Safety
///
/// As Envoy's ABI states for this callback.
#[cfg(feature = "abi-v0_1_0")]
pub unsafe fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
    config: *mut c_void,
    id: usize,
    tag_values: *mut ModuleBuffer,
    tag_values_size: usize,
    value: u64,
) -> u32 {
    let callback = CONFIG_INCREMENT_COUNTER.get_or_init(|| {
        let address =
            lookup("envoy_dynamic_module_callback_http_filter_config_increment_counter\0");
        // SAFETY: a non-null address is Envoy's function of this name, whose C signature the
        // ABI header gives as `ConfigIncrementCounter`.
        (!address.is_null())
            .then(|| unsafe { std::mem::transmute::<*mut c_void, ConfigIncrementCounter>(address) })
    });
    match callback {
        // SAFETY: the caller's contract above.
        Some(callback) => unsafe { callback(config, id, tag_values, tag_values_size, value) },
        None => 0,
    }
}

/// The table [`resolve_callbacks`] filled.
static TABLE: OnceLock<Callbacks> = OnceLock::new();

fn table() -> &'static Callbacks {
    match TABLE.get() {
        Some(table) => table,
        // Unreachable in Envoy: no hook runs unless `on_program_init` resolved the table. Not a
        // panic (which would unwind into Envoy): the process stops, as a missing symbol would.
        None => std::process::abort(),
    }
}

callbacks! {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: *mut c_void,
        header_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: *mut c_void,
        header_type: u32,
        result: *mut EnvoyHeader,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_add_header(
        filter: *mut c_void,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: *mut c_void,
        status: u32,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: *mut c_void);
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: *mut c_void,
        attribute: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: *mut c_void,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: *mut c_void,
        id: usize,
        tag_values: *mut ModuleBuffer,
        tag_values_size: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: *mut c_void,
        name: ModuleBuffer,
        tag_keys: *mut ModuleBuffer,
        tag_keys_size: usize,
        id: *mut usize,
    ) -> u32;
    // Not exported by Envoy 1.38 (ABI v0.1.0): the v0.1.0 build looks it up on its own, as
    // optional (`config_increment_counter` below).
    #[cfg(not(feature = "abi-v0_1_0"))]
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: *mut c_void,
        id: usize,
        tag_values: *mut ModuleBuffer,
        tag_values_size: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: *mut c_void,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: *mut c_void,
    ) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(
        scheduler: *mut c_void,
    );
    pub fn envoy_dynamic_module_callback_http_filter_config_start_http_stream(
        config: *mut c_void,
        stream_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        end_stream: bool,
        timeout_ms: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_stream_send_data(
        config: *mut c_void,
        stream_id: u64,
        data: ModuleBuffer,
        end_stream: bool,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_config_reset_http_stream(
        config: *mut c_void,
        stream_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(
        filter: *mut c_void,
    ) -> *mut c_void;
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// The address of `name` (NUL-terminated) in the process (`RTLD_DEFAULT`), or null.
fn lookup(name: &str) -> *mut c_void {
    // SAFETY: `name` is a NUL-terminated static string (the macro appends the NUL); RTLD_DEFAULT
    // is the null handle on glibc; dlsym only looks the name up.
    unsafe { dlsym(std::ptr::null_mut(), name.as_ptr().cast()) }
}

/// Callbacks the module does not call whose presence marks an Envoy of this build's ABI: Envoy
/// 1.39 (ABI v0.1.0) exports every callback the v0.2.0 build calls and only warns on the ABI
/// string, so without a marker the module built for 1.40 would load on the Envoy before it, which
/// Envoy's ABI policy does not cover (an older module on the next Envoy is covered: the v0.1.0
/// build loads on 1.40 with Envoy's "deprecated" warning). `http_get_timing_info` is one of the
/// 16 HTTP callbacks 1.40 added (probed: `nm -D`, docs/envoy-versions.md).
#[cfg(not(feature = "abi-v0_1_0"))]
const ABI_MARKERS: &[&str] = &["envoy_dynamic_module_callback_http_get_timing_info\0"];
/// See the other build's [`ABI_MARKERS`]: every Envoy with all of this build's callbacks (1.38 on)
/// speaks v0.1.0 or a newer ABI that covers it.
#[cfg(feature = "abi-v0_1_0")]
const ABI_MARKERS: &[&str] = &[];

/// The callbacks this module needs (or whose presence marks its ABI: [`ABI_MARKERS`]) that the
/// process does not export (empty when the loading Envoy speaks our ABI).
pub fn missing_callbacks() -> Vec<String> {
    CALLBACK_NAMES
        .iter()
        .chain(ABI_MARKERS)
        .filter(|name| lookup(name).is_null())
        .map(|name| name.trim_end_matches('\0').to_owned())
        .collect()
}

/// Resolves every callback, once, at load (`envoy_dynamic_module_on_program_init`): `Err` names
/// the missing ones, and the module must then refuse to load.
pub fn resolve_callbacks() -> Result<(), Vec<String>> {
    if TABLE.get().is_some() {
        return Ok(());
    }
    let table = Callbacks::resolve()?;
    let _ = TABLE.set(table);
    Ok(())
}

/// Log levels the filter uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    // SAFETY: the log callback takes no Envoy object; the buffer is valid for the call and Envoy
    // copies it.
    unsafe { envoy_dynamic_module_callback_log(level, module_buffer(message.as_bytes())) }
}

/// `size` Envoy headers (or chunks) at `ptr` as a slice for `read` (nothing for a null
/// pointer); the slice does not outlive `read` (its lifetime is the closure argument's).
///
/// # Safety
///
/// A non-null `ptr` points to `size` values Envoy handed to the running hook, valid until it
/// returns (this is called during that hook).
unsafe fn with_array<T, R>(ptr: *const T, size: usize, read: impl FnOnce(&[T]) -> R) -> R {
    if ptr.is_null() || size == 0 {
        return read(&[]);
    }
    // SAFETY: the caller's contract above.
    read(unsafe { std::slice::from_raw_parts(ptr, size) })
}

/// Copies Envoy's header array (a hook's argument).
///
/// # Safety
///
/// As [`with_array`]: `headers` and `size` are what Envoy handed to the running hook.
pub unsafe fn envoy_headers(headers: *const EnvoyHeader, size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    // SAFETY: the caller's contract above.
    unsafe {
        with_array(headers, size, |headers| {
            headers
                .iter()
                .map(|h| (h.name().to_vec(), h.value().to_vec()))
                .collect()
        })
    }
}

/// Copies Envoy's chunks (a hook's argument) into one buffer.
///
/// # Safety
///
/// As [`with_array`]: `chunks` and `size` are what Envoy handed to the running hook.
pub unsafe fn envoy_chunks(chunks: *const EnvoyBuffer, size: usize) -> Vec<u8> {
    // SAFETY: the caller's contract above.
    unsafe {
        with_array(chunks, size, |chunks| {
            let mut out = Vec::with_capacity(chunks.iter().map(EnvoyBuffer::len).sum());
            for c in chunks {
                out.extend_from_slice(c.bytes());
            }
            out
        })
    }
}

/// Reads a callout's answer (a hook's arguments): its headers and body chunks, copied (the body
/// bounded by `limit`).
///
/// # Safety
///
/// As [`with_array`]: both arrays and their sizes are what Envoy handed to the running hook.
pub unsafe fn callout_answer(
    result: u32,
    headers: *const EnvoyHeader,
    headers_size: usize,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
    limit: usize,
) -> CalloutAnswer {
    let mut answer = CalloutAnswer {
        completed: result == CALLOUT_SUCCESS,
        // SAFETY: the caller's contract above.
        headers: unsafe { envoy_headers(headers, headers_size) },
        body: Vec::new(),
    };
    // SAFETY: the caller's contract above.
    unsafe {
        with_array(chunks, chunks_size, |chunks| {
            for c in chunks {
                let room = limit.saturating_sub(answer.body.len());
                answer.body.extend_from_slice(&c.to_vec_up_to(room));
            }
        });
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside Envoy no callback exists: the load-time check names every one (in Envoy 1.40
    /// none is missing, which the e2e tests show by loading the module at all).
    #[test]
    fn the_load_check_names_every_missing_callback() {
        let missing = missing_callbacks();
        assert_eq!(missing.len(), CALLBACK_NAMES.len() + ABI_MARKERS.len());
        assert_eq!(resolve_callbacks(), Err(missing.clone()));
        assert!(missing.contains(&"envoy_dynamic_module_callback_http_send_response".to_owned()));
        assert!(missing
            .iter()
            .all(|m| m.starts_with("envoy_dynamic_module_callback_")));
    }

    /// A callout's answer is copied out, its body bounded by the limit.
    #[test]
    fn an_answer_is_copied_and_its_body_bounded() {
        let (name, value, body) = (b":status", b"200", b"0123456789");
        let header = EnvoyHeader {
            key_ptr: name.as_ptr().cast(),
            key_length: name.len(),
            value_ptr: value.as_ptr().cast(),
            value_length: value.len(),
        };
        let chunk = |bytes: &[u8]| EnvoyBuffer {
            ptr: bytes.as_ptr().cast(),
            length: bytes.len(),
        };
        let chunks = [chunk(&body[..4]), chunk(&body[4..])];
        // SAFETY: the arrays are ours, live for the calls.
        let answer = unsafe { callout_answer(0, &header, 1, chunks.as_ptr(), 2, 6) };
        assert!(answer.completed);
        assert_eq!(answer.header(":status"), Some(&b"200"[..]));
        assert_eq!(answer.body, b"012345");
        // SAFETY: null arrays are read as empty.
        let failed = unsafe { callout_answer(1, std::ptr::null(), 0, std::ptr::null(), 0, 6) };
        assert_eq!(failed, CalloutAnswer::default());
        // SAFETY: as above.
        assert_eq!(unsafe { envoy_chunks(chunks.as_ptr(), 2) }, body);
    }
}
