//! The failure log: one warn line per reason at most every [`LOG_EVERY_NS`] (10 s) per worker,
//! saying how many requests the failure mode decided since that reason's last line, and how
//! (passed or denied), why, and the likely fix. The first failure of a reason is logged at once,
//! so a misconfiguration is named within a second of the first failed decision; after that the
//! counts accumulate and the next line comes with the next failure, or on the root's tick
//! ([`FailureLog::due`]), 10 s later. Time is the host's clock, passed in.
//!
//! Stream events (the exchange stream failed to open, or closed) are counted in the same slot
//! with no request, so a worker whose stream cannot open says why before any request arrives.

use super::{Failure, Reason};
use crate::config::{Config, FailureMode};

/// Shortest time between two lines of one reason.
pub const LOG_EVERY_NS: u64 = 10_000_000_000;

/// What accumulated for one reason since its last line.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// When this reason's last line was logged; `None` before the first.
    logged_ns: Option<u64>,
    /// Requests decided by the failure mode since then.
    requests: u64,
    /// Exchange stream failures (open refused, closed) since then.
    streams: u64,
    /// The latest failure, for what was seen and the fix.
    latest: Option<Failure>,
}

/// One worker's failure log.
#[derive(Debug, Clone, Default)]
pub struct FailureLog {
    slots: [Slot; Reason::ALL.len()],
}

impl FailureLog {
    /// A request whose failure mode applied after `failure`; the line to log now, if one is due.
    pub fn request(&mut self, failure: &Failure, now_ns: u64, config: &Config) -> Option<String> {
        let slot = &mut self.slots[failure.reason.index()];
        slot.requests = slot.requests.saturating_add(1);
        slot.latest = Some(failure.clone());
        Self::line_if_due(slot, now_ns, config)
    }

    /// The exchange stream failed (could not open, or closed); the line to log now, if due.
    pub fn stream(&mut self, failure: &Failure, now_ns: u64, config: &Config) -> Option<String> {
        let slot = &mut self.slots[failure.reason.index()];
        slot.streams = slot.streams.saturating_add(1);
        slot.latest = Some(failure.clone());
        Self::line_if_due(slot, now_ns, config)
    }

    /// Lines due at `now_ns` for counts that accumulated since each reason's last line (the
    /// root's tick calls this, so counts are not held back when failures stop).
    pub fn due(&mut self, now_ns: u64, config: &Config) -> Vec<String> {
        self.slots
            .iter_mut()
            .filter(|s| s.requests > 0 || s.streams > 0)
            .filter_map(|slot| Self::line_if_due(slot, now_ns, config))
            .collect()
    }

    fn line_if_due(slot: &mut Slot, now_ns: u64, config: &Config) -> Option<String> {
        let since = match slot.logged_ns {
            Some(at) if now_ns < at.saturating_add(LOG_EVERY_NS) => return None,
            Some(at) => Some(now_ns.saturating_sub(at)),
            None => None,
        };
        let failure = slot.latest.as_ref()?;
        let line = render(failure, slot.requests, slot.streams, since, config);
        slot.logged_ns = Some(now_ns);
        slot.requests = 0;
        slot.streams = 0;
        Some(line)
    }
}

/// One line, e.g.
/// `sluice: wrong_protocol: 3 requests passed unchecked (failure_mode allow) in the 10.2 s since
/// the last wrong_protocol line; cluster "sluice_backend", protocol grpc_stream: gRPC status 12
/// UNIMPLEMENTED (grpc-message "..."); likely fix: point cluster "sluice_backend" at ...`.
fn render(
    failure: &Failure,
    requests: u64,
    streams: u64,
    since_ns: Option<u64>,
    config: &Config,
) -> String {
    let name = failure.reason.name();
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let decided = match config.failure_mode {
        FailureMode::Allow => format!(
            "{} passed unchecked (failure_mode allow)",
            plural(requests, "request", "requests")
        ),
        FailureMode::Deny => format!(
            "{} denied with {} (failure_mode deny)",
            plural(requests, "request", "requests"),
            config.failure_status
        ),
    };
    let streams = if streams > 0 {
        format!(
            ", the exchange stream failed {}",
            plural(streams, "time", "times")
        )
    } else {
        String::new()
    };
    let when = match since_ns {
        Some(ns) => format!(
            " in the {}.{} s since the last {name} line",
            ns / 1_000_000_000,
            ns % 1_000_000_000 / 100_000_000
        ),
        None => String::new(),
    };
    let protocol = match config.backend.protocol {
        crate::config::Protocol::Http => "http",
        crate::config::Protocol::Grpc => "grpc",
        crate::config::Protocol::GrpcStream => "grpc_stream",
    };
    format!(
        "sluice: {name}: {decided}{streams}{when}; cluster {:?}, protocol {protocol}: {}; likely fix: {}",
        config.backend.cluster,
        failure.seen,
        failure.fix(config)
    )
}
