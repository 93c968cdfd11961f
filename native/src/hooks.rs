//! The top floor: the event hooks Envoy calls (`envoy_dynamic_module_on_*`), exported from the
//! module: a request's here, the configuration's in `hooks/config.rs`. Each turns Envoy's
//! pointers into the glue's values (a handle, the module's filter or configuration borrowed for
//! the hook's call only, copied headers and answers) and runs the glue's work under
//! `catch_unwind`: a panic is logged and the hook answers "continue" (or, for a
//! request that waits, its failure mode applies), never unwinding into Envoy. Hooks with an
//! empty body (nothing that could panic) are the exception.
//!
//! What a request's hook leaves for Envoy to do (resume, reply) is done here after the glue
//! returned, with the worker's lock released (`glue::After`). With `abi/` the only code allowed
//! `unsafe`: the pointer casts to the module's own objects, each with its invariant.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::ffi::{
    self, EnvoyBuffer, EnvoyHeader, CONTINUE, STOP_ITERATION, STOP_ITERATION_AND_WATERMARK,
};
use crate::abi::handle::{self, FilterHandle};
use crate::abi::{log, Level};
use crate::glue::{self, After, NativeConfig, NativeFilter, When};

/// The module's filter of one request, over the real bindings.
type Filter = NativeFilter<FilterHandle>;

mod config;

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
/// (`glue::undecided`); `when` says whether in the request-headers hook. With no filter at all
/// (Envoy could not make one) the module fails closed when any configuration says `deny`.
fn undecided(
    envoy: &FilterHandle,
    filter: *mut c_void,
    hook: &str,
    when: When,
) -> (bool, Option<After>) {
    let outcome = caught(hook, || {
        with_filter(filter, |f| glue::undecided(f, hook, when)).unwrap_or_else(|| match when {
            // No filter after its request headers: this module never stopped the request.
            When::Later => (false, None),
            When::InRequestHeaders => glue::undecided_without_filter(envoy, hook, when),
        })
    });
    outcome.unwrap_or_else(|| glue::undecided_without_filter(envoy, hook, when))
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

/// Runs `body` with the module's configuration behind Envoy's config module pointer, borrowed
/// for the call only (`None`: a null pointer). Like `with_filter` and `handle`, private to this
/// module and called only with the running hook's own arguments, as Envoy passed them: that is
/// the contract their `unsafe` blocks rely on.
fn with_config<T>(ptr: *const c_void, body: impl FnOnce(&NativeConfig) -> T) -> Option<T> {
    // SAFETY: a non-null pointer is one `config_new` returned (a leaked `Box<NativeConfig>`),
    // live until `config_destroy`, which Envoy calls after every other hook of the configuration;
    // the configuration is only read (shared state inside is behind locks and atomics). The
    // borrow ends with `body`.
    let config = unsafe { ptr.cast::<NativeConfig>().as_ref() }?;
    Some(body(config))
}

/// Runs `body` with the request's filter behind Envoy's filter module pointer, borrowed for the
/// call only (`None`: a null pointer).
fn with_filter<T>(ptr: *mut c_void, body: impl FnOnce(&mut Filter) -> T) -> Option<T> {
    // SAFETY: a non-null pointer is one `filter_new` returned (a leaked `Box<Filter>`), live
    // until `filter_destroy`; Envoy calls a filter's hooks one at a time on its worker thread, and
    // no hook runs this twice for one filter at once (an answer arriving inside the filter's own
    // hook is kept aside instead: `http_callout_done`), so this `&mut` is the only one. The borrow
    // ends with `body`, before anything that may re-enter Envoy (`glue::perform`).
    let filter = unsafe { ptr.cast::<Filter>().as_mut() }?;
    Some(body(filter))
}

/// The handle of the filter whose hook is running.
fn handle(filter_envoy: *mut c_void) -> FilterHandle {
    // SAFETY: Envoy passes its live filter pointer to each of the filter's hooks, on its worker;
    // the handle is used during this hook only, or kept in the module's filter (`filter_new`),
    // which `filter_destroy` drops while Envoy's side still lives.
    unsafe { FilterHandle::from_envoy(filter_envoy) }
}

// ---------------------------------------------------------------------------------------------
// Event hooks.
// ---------------------------------------------------------------------------------------------

/// A request's filter.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    filter_envoy: *mut c_void,
) -> *mut c_void {
    guarded("http_filter_new", std::ptr::null_mut(), || {
        with_config(config, |config| {
            let filter: Filter = glue::filter_new(config, handle(filter_envoy));
            Box::into_raw(Box::new(filter)).cast()
        })
        .unwrap_or(std::ptr::null_mut())
    })
}

/// The request's filter goes away.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *mut c_void) {
    guarded("http_filter_destroy", (), || {
        if filter.is_null() {
            return;
        }
        // SAFETY: `filter_new` leaked this Box; Envoy destroys it once, after the filter's other
        // hooks, while its own side is still alive (the flow's end step may count and log).
        let filter = unsafe { Box::from_raw(filter.cast::<Filter>()) };
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
        with_filter(filter, |f| {
            handle::as_active(filter_envoy, || glue::on_request_headers(f))
        })
    });
    let envoy = handle(filter_envoy);
    let (stop, after) = match outcome {
        Some(Some(decided)) => decided,
        // A panic, or no filter: nothing decided the request.
        Some(None) | None => undecided(&envoy, filter, HOOK, When::InRequestHeaders),
    };
    glue::perform(&envoy, after);
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
    guarded("on_request_body", CONTINUE, || {
        match with_filter(filter, |f| glue::decision_pending(f)) {
            Some(true) => STOP_ITERATION_AND_WATERMARK,
            Some(false) | None => CONTINUE,
        }
    })
}

/// Request trailers: held while the decision is pending (as the body), else passed through.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _e: *mut c_void,
    filter: *mut c_void,
) -> u32 {
    guarded("on_request_trailers", CONTINUE, || {
        match with_filter(filter, |f| glue::decision_pending(f)) {
            Some(true) => STOP_ITERATION,
            Some(false) | None => CONTINUE,
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
        let after = with_filter(filter, |f| {
            handle::as_active(filter_envoy, || glue::on_response_headers(f))
        });
        glue::perform(&handle(filter_envoy), after.flatten());
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
        let after = with_filter(filter, |f| {
            handle::as_active(filter_envoy, || glue::on_response_trailers(f))
        });
        glue::perform(&handle(filter_envoy), after.flatten());
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
        with_filter(filter, |f| {
            handle::as_active(filter_envoy, || glue::on_scheduled(f, event_id))
        })
        .flatten()
    });
    let envoy = handle(filter_envoy);
    let after = match outcome {
        Some(after) => after,
        None => undecided(&envoy, filter, HOOK, When::Later).1,
    };
    guarded(HOOK, (), || glue::perform(&envoy, after));
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
        if handle::is_active(filter_envoy) {
            // Inside this filter's own hook (its `http_callout` answered at once): the hook's
            // work takes it over (`FilterHandle::take_early`); no second `&mut` to the filter.
            handle::keep_early(callout_id, answer);
            return;
        }
        const HOOK: &str = "http_callout_done";
        let outcome = caught(HOOK, || {
            with_filter(filter, |f| {
                handle::as_active(filter_envoy, || {
                    glue::on_callout_done(f, callout_id, answer)
                })
            })
            .flatten()
        });
        let envoy = handle(filter_envoy);
        let after = match outcome {
            Some(after) => after,
            None => undecided(&envoy, filter, HOOK, When::Later).1,
        };
        glue::perform(&envoy, after);
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
