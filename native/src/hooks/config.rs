//! The configuration's hooks: load time, a configuration made and destroyed, and what Envoy's
//! main thread runs for it (its report callouts' answers, its exchange stream's events, its
//! scheduled turns). Under `catch_unwind` as every hook (`super::guarded`); the configuration is
//! borrowed for the hook's call only (`super::with_config`).

use std::ffi::c_void;
use std::os::raw::c_char;

use super::{guarded, with_config};
use crate::abi::ffi::{self, EnvoyBuffer, EnvoyHeader, ABI_VERSION, ABI_VERSION_C, ENVOY_MINORS};
use crate::abi::handle::ConfigHandle;
use crate::abi::{log, Level};
use crate::glue::{self, NativeConfig};

/// Load time: refuse (null) when the process lacks a callback we call; else our ABI version.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    guarded("program_init", std::ptr::null(), || {
        if let Err(missing) = ffi::resolve_callbacks() {
            // No logging callback can be trusted here: say it on stderr, and refuse.
            eprintln!(
                "sluice: ABI mismatch: this module is built for dynamic-module ABI \
                 {ABI_VERSION} ({ENVOY_MINORS}), and this Envoy lacks its callbacks {}: not \
                 loaded (build the module for this Envoy's ABI: docs/envoy-versions.md)",
                missing.join(", ")
            );
            return std::ptr::null();
        }
        ABI_VERSION_C.as_ptr().cast()
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
        // SAFETY: Envoy's pointer for the configuration being made; the handle lives in the
        // `NativeConfig` made here, which `config_destroy` drops, and is used on the main thread.
        let handle = unsafe { ConfigHandle::from_envoy(config_envoy) };
        match glue::config_new(handle, name.bytes(), config.bytes()) {
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
            // SAFETY: `config_new` leaked this Box; Envoy destroys it once, after every other
            // hook of the configuration.
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
        // SAFETY: the arrays and their sizes are this hook's arguments, valid during it.
        let answer = unsafe {
            ffi::callout_answer(
                result,
                headers,
                headers_size,
                chunks,
                chunks_size,
                glue::MAX_ANSWER,
            )
        };
        with_config(config, |config| {
            glue::on_config_callout_done(config, callout_id, answer)
        });
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
        // SAFETY: the array and its size are this hook's arguments, valid during it.
        let headers = unsafe { ffi::envoy_headers(headers, headers_size) };
        with_config(config, |config| {
            glue::on_config_stream_headers(config, stream_id, &headers)
        });
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
        // SAFETY: the array and its size are this hook's arguments, valid during it.
        let bytes = unsafe { ffi::envoy_chunks(chunks, chunks_size) };
        with_config(config, |config| {
            glue::on_config_stream_data(config, stream_id, &bytes)
        });
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
        // SAFETY: the array and its size are this hook's arguments, valid during it.
        let trailers = unsafe { ffi::envoy_headers(trailers, trailers_size) };
        with_config(config, |config| {
            glue::on_config_stream_headers(config, stream_id, &trailers)
        });
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
        with_config(config, |config| {
            glue::on_config_stream_end(config, stream_id, None)
        });
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
        with_config(config, |config| {
            glue::on_config_stream_end(config, stream_id, Some(reason))
        });
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
        with_config(config, |config| {
            if event_id == crate::stream::STREAM_EVENT {
                glue::on_config_stream_turn(config);
            } else {
                glue::on_config_scheduled(config);
            }
        });
    })
}
