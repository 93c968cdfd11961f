//! One filter configuration as the module keeps it ([`NativeConfig`], made on Envoy's main
//! thread and shared by every worker), each worker's state for it, and the configuration's
//! main-thread hooks (the report turn, the exchange stream), handed to `relay.rs` and
//! `stream.rs`.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_filter::config::{Config, FailureMode, Match};
use sluice_filter::host::Counter;

use super::FAIL_CLOSED_STATUS;
use crate::abi::{self, ConfigHandle, Level, LocalState, WorkerBound};
use crate::copied::CalloutAnswer;
use crate::relay::Reports;
use crate::stream::{self, MainStream};

/// Configurations a worker thread remembers (older ones, replaced by a reload, are dropped).
const MAX_LOCALS: usize = 16;

/// One filter configuration, shared by every worker.
#[derive(Debug)]
pub struct NativeConfig {
    pub(super) common: Arc<Common>,
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
pub struct Common {
    id: u64,
    pub(super) config: Config,
    /// A route matches every request (its `match` is empty): the route check before the flow
    /// would find one every time, so it is skipped.
    pub(super) catch_all: bool,
    /// Envoy's id of each `Counter` (by `Counter::index`), `None` where Envoy refused one.
    pub(super) counters: Vec<Option<usize>>,
    pub(super) reports: Reports,
    /// `grpc_stream` over the main thread's exchange stream (`stream.rs`); `None`: unary calls.
    pub(super) stream: Option<MainStream>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Common {
    /// A configuration's shared part: `counters` as Envoy defined them, its reports and stream.
    pub(super) fn new(
        config: Config,
        counters: Vec<Option<usize>>,
        reports: Reports,
        stream: Option<MainStream>,
    ) -> Common {
        Common {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            catch_all: config.routes.iter().any(|r| r.matcher == Match::default()),
            config,
            counters,
            reports,
            stream,
        }
    }
}

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
        common: Arc::new(Common::new(config, counters, reports, stream)),
        handle,
    })
}

/// The `filter_config` string as a configuration, or the line Envoy's log gets for a refusal
/// (the wasm build's words: `sluice: bad plugin configuration: <field>: <reason>`).
pub fn parse_config(json: &[u8]) -> Result<Config, String> {
    Config::from_json(json).map_err(|e| format!("sluice: bad plugin configuration: {e}"))
}

thread_local! {
    static LOCALS: RefCell<Vec<(u64, Arc<WorkerBound>)>> = const { RefCell::new(Vec::new()) };
}

/// This worker's state for the configuration `common` (made at its first request).
pub(super) fn local(common: &Common) -> Arc<WorkerBound> {
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
