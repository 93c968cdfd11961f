//! Why the backend could not decide, in one place: every failed decision is classified here into
//! exactly one [`Reason`], with what was seen (bounded, sanitized) and the likely fix, so that an
//! operator reads in Envoy's log what went wrong and what to change instead of finding out from
//! the bill (`failure_mode: allow` passes such requests quietly otherwise).
//!
//! The `x-sluice-failure` header keeps its old values ([`Failure::header`]: `unavailable`,
//! `timeout`, `status_NNN`, `bad_response`, `dispatch`, `grpc_N`); the reason is the operator's
//! classification on top of it, used for the log line ([`log`]), the per-reason stats
//! (`sluice.failures_<reason>`) and the exchange's backoff (`exchange.rs`: a reason that
//! [`persists`](Reason::persists) stops unary calls per request).

use sluice_core::wire::{ApiError, ErrorCode};

use crate::config::{Config, Protocol};
use crate::host::Counter;

pub mod log;
pub mod mode;

/// The backend's gRPC listener's default address (`sluice --grpc-listen`), named in fixes.
pub const GRPC_LISTEN_DEFAULT: &str = sluice_core::limits::DEFAULT_GRPC_LISTEN;

/// Longest snippet of a body or grpc-message quoted in a log line.
pub const MAX_SNIPPET: usize = 240;

/// Why a decision failed. Every failed decision is exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The callout could not even start: Envoy has no such cluster (dispatch refused).
    ClusterMissing,
    /// Envoy could not reach the backend (503 / gRPC UNAVAILABLE: connection refused or reset).
    Unreachable,
    /// The cluster does not speak the protocol (gRPC UNIMPLEMENTED, 421 `wrong_listener`, or an
    /// answer that is clearly not sluice's).
    WrongProtocol,
    /// No answer in time (504 / gRPC DEADLINE_EXCEEDED / the exchange's deadline tick).
    Timeout,
    /// An answer that does not decode.
    BadResponse,
    /// sluice answered an error (`ApiError`): store unavailable, store timeout, deadline, ...
    BackendError,
    /// The filter itself failed: a bug caught in a host's hook (a panic), or a request's state
    /// lost. The failure mode applies as for any other reason: `deny` still denies.
    Internal,
}

impl Reason {
    /// Every reason, in the order of their log slots and counters.
    pub const ALL: [Reason; 7] = [
        Reason::ClusterMissing,
        Reason::Unreachable,
        Reason::WrongProtocol,
        Reason::Timeout,
        Reason::BadResponse,
        Reason::BackendError,
        Reason::Internal,
    ];

    /// The reason's name in log lines and stats.
    pub fn name(self) -> &'static str {
        match self {
            Reason::ClusterMissing => "cluster_missing",
            Reason::Unreachable => "unreachable",
            Reason::WrongProtocol => "wrong_protocol",
            Reason::Timeout => "timeout",
            Reason::BadResponse => "bad_response",
            Reason::BackendError => "backend_error",
            Reason::Internal => "internal",
        }
    }

    /// Index into [`Reason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its Envoy stat (`sluice.failures_<reason>`).
    pub fn counter(self) -> Counter {
        match self {
            Reason::ClusterMissing => Counter::FailuresClusterMissing,
            Reason::Unreachable => Counter::FailuresUnreachable,
            Reason::WrongProtocol => Counter::FailuresWrongProtocol,
            Reason::Timeout => Counter::FailuresTimeout,
            Reason::BadResponse => Counter::FailuresBadResponse,
            Reason::BackendError => Counter::FailuresBackendError,
            Reason::Internal => Counter::FailuresInternal,
        }
    }

    /// Whether the next request would fail the same way: a configuration or a backend that is
    /// down does not fix itself per request, so the exchange stops making a unary call for each
    /// (it probes instead, see `exchange.rs`).
    pub fn persists(self) -> bool {
        matches!(
            self,
            Reason::ClusterMissing | Reason::Unreachable | Reason::WrongProtocol
        )
    }
}

/// One failed decision: why, the `x-sluice-failure` value, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The operator's classification.
    pub reason: Reason,
    /// The `x-sluice-failure` header value (unchanged from before reasons existed).
    pub header: String,
    /// What the filter saw, for the log line: bounded and sanitized.
    pub seen: String,
}

/// gRPC status codes the filter tells apart (in its callouts' answers) or answers with (to a
/// gRPC client it refuses, `reply::Reply`).
pub mod grpc {
    /// OK.
    pub const OK: u32 = 0;
    /// UNKNOWN: an answer that is neither a message nor a readable status.
    pub const UNKNOWN: u32 = 2;
    /// DEADLINE_EXCEEDED: the call's timeout passed.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// PERMISSION_DENIED: a gRPC request refused by `unknown_action: deny` (its HTTP 403).
    pub const PERMISSION_DENIED: u32 = 7;
    /// RESOURCE_EXHAUSTED: a gRPC request over its limit, by default (`grpc_denied_status`); the
    /// code gRPC gives rate limiting, and not retried by a client's default retry policy.
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    /// UNIMPLEMENTED: the server has no such method (not sluice's gRPC listener).
    pub const UNIMPLEMENTED: u32 = 12;
    /// UNAVAILABLE: connection refused or reset; also what a gRPC request refused under
    /// `failure_mode: deny` gets (the limiter, not the request, is at fault: retry later).
    pub const UNAVAILABLE: u32 = 14;
    /// The largest status code (UNAUTHENTICATED): codes are 0 to 16.
    pub const MAX: u32 = 16;

    /// A `grpc-status` header's value as sent (decimal text); one that does not parse is
    /// UNKNOWN. For a host that reads gRPC answers as HTTP headers (the dynamic module).
    pub fn parse_status(value: &[u8]) -> u32 {
        std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(UNKNOWN)
    }

    /// A gRPC call's HTTP `:status` when it is not 200 and no `grpc-status` came (no gRPC
    /// server answered): Envoy's own 504 (the call's timeout passed) is DEADLINE_EXCEEDED,
    /// anything else (503: no upstream; or none at all) UNAVAILABLE; with what was seen, as
    /// the call's message.
    pub fn of_http_status(status: Option<&[u8]>) -> (u32, String) {
        match status {
            Some(b"504") => (DEADLINE_EXCEEDED, "HTTP 504 from Envoy".to_owned()),
            other => {
                let seen = other.map_or("none".into(), String::from_utf8_lossy);
                (UNAVAILABLE, format!("HTTP status {seen}"))
            }
        }
    }

    /// The status's name, for log lines.
    pub fn name(code: u32) -> &'static str {
        match code {
            0 => "OK",
            1 => "CANCELLED",
            2 => "UNKNOWN",
            3 => "INVALID_ARGUMENT",
            4 => "DEADLINE_EXCEEDED",
            5 => "NOT_FOUND",
            6 => "ALREADY_EXISTS",
            7 => "PERMISSION_DENIED",
            8 => "RESOURCE_EXHAUSTED",
            9 => "FAILED_PRECONDITION",
            10 => "ABORTED",
            11 => "OUT_OF_RANGE",
            12 => "UNIMPLEMENTED",
            13 => "INTERNAL",
            14 => "UNAVAILABLE",
            15 => "DATA_LOSS",
            16 => "UNAUTHENTICATED",
            _ => "?",
        }
    }
}

impl Failure {
    fn new(reason: Reason, header: impl Into<String>, seen: impl Into<String>) -> Failure {
        Failure {
            reason,
            header: header.into(),
            seen: seen.into(),
        }
    }

    /// The callout could not start (`dispatch_*` or opening the stream returned an error, e.g.
    /// BadArgument for a cluster Envoy does not have).
    pub fn not_started(host_error: &str) -> Failure {
        let seen = format!(
            "the callout could not start (Envoy said {})",
            snippet(host_error.as_bytes())
        );
        Failure::new(Reason::ClusterMissing, "dispatch", seen)
    }

    /// The request to the backend could not be encoded (never expected: every field is
    /// validated at configuration); no callout was made.
    pub fn encode(what: &str) -> Failure {
        let seen = format!(
            "the request could not be encoded ({})",
            snippet(what.as_bytes())
        );
        Failure::new(Reason::BadResponse, "encode", seen)
    }

    /// No answer before `backend.timeout_ms` (the exchange's tick, or Envoy's 504 / gRPC 4).
    pub fn timed_out() -> Failure {
        Failure::new(
            Reason::Timeout,
            "timeout",
            "no answer within backend.timeout_ms",
        )
    }

    /// The filter failed in `hook` (a panic caught there, or the request's state lost): nothing
    /// was decided, so the failure mode applies.
    pub fn internal(hook: &str) -> Failure {
        let seen = format!("the filter failed in {} (a bug)", snippet(hook.as_bytes()));
        Failure::new(Reason::Internal, "internal", seen)
    }

    /// A body that does not decode as what it should be.
    pub fn bad_response(what: &str) -> Failure {
        Failure::new(Reason::BadResponse, "bad_response", what)
    }

    /// A gRPC call or stream that ended with `status` (not OK, or OK on a stream that ended with
    /// requests waiting) and `message` (grpc-message), under `protocol`.
    pub fn of_grpc(protocol: Protocol, status: u32, message: Option<&str>) -> Failure {
        let mut seen = format!("gRPC status {status} {}", grpc::name(status));
        if let Some(m) = message.filter(|m| !m.is_empty()) {
            let decoded = percent_decoded(m.as_bytes());
            seen.push_str(&format!(" (grpc-message {})", snippet(&decoded)));
        }
        let reason = match status {
            grpc::DEADLINE_EXCEEDED => Reason::Timeout,
            grpc::UNIMPLEMENTED => Reason::WrongProtocol,
            grpc::OK | grpc::UNAVAILABLE => Reason::Unreachable,
            _ => Reason::BackendError,
        };
        // The exchange answers as an HTTP callout would (504 timed out, 503 otherwise); the RLS
        // callout names the gRPC status.
        let header = match protocol {
            Protocol::Grpc => format!("grpc_{status}"),
            _ if reason == Reason::Timeout => "timeout".to_owned(),
            _ => "unavailable".to_owned(),
        };
        Failure::new(reason, header, seen)
    }

    /// A decision-API answer (HTTP callout, or an exchange reply's status and body) that is not
    /// a decision and not 404 `unknown_action`. `status` is `None` when there was none.
    pub fn of_http(protocol: Protocol, status: Option<u16>, body: &[u8]) -> Failure {
        let Some(code) = status else {
            return Failure::bad_response("an answer without a :status");
        };
        let header = match code {
            503 => "unavailable".to_owned(),
            504 => "timeout".to_owned(),
            200 => "bad_response".to_owned(),
            _ => format!("status_{code}"),
        };
        let seen = if body.is_empty() {
            format!("HTTP {code}")
        } else {
            format!("HTTP {code} {}", snippet(body))
        };
        let reason = match sluice_error(body) {
            Some(e) => {
                // sluice's own error: its code and message say it better than the raw body.
                let seen = format!(
                    "HTTP {code} {} ({})",
                    e.error,
                    snippet(e.message.as_bytes())
                );
                let reason = if e.error == ErrorCode::WrongListener {
                    Reason::WrongProtocol
                } else {
                    Reason::BackendError
                };
                return Failure::new(reason, header, seen);
            }
            None => match code {
                504 => Reason::Timeout,
                // Envoy's own 503: an HTTP/1.1 callout on an HTTP/2-only listener resets with a
                // protocol error; anything else is a connection refused or reset.
                503 if contains(body, b"protocol error") => Reason::WrongProtocol,
                503 => Reason::Unreachable,
                // The exchange's reply came from sluice's own router: an odd body is sluice's
                // bad answer, not another server.
                _ if protocol == Protocol::GrpcStream => Reason::BadResponse,
                // Over HTTP, a 200 that is not a decision, or an error without sluice's body,
                // came from something that is not sluice's decision listener.
                _ => Reason::WrongProtocol,
            },
        };
        Failure::new(reason, header, seen)
    }

    /// The likely fix, naming the cluster and protocol.
    pub fn fix(&self, config: &Config) -> String {
        let backend = &config.backend;
        let cluster = &backend.cluster;
        let grpc = backend.protocol.is_grpc();
        match self.reason {
            Reason::ClusterMissing if grpc => format!(
                "define cluster {cluster:?} in Envoy (HTTP/2: http2_protocol_options, to sluice's gRPC listener, --grpc-listen, default {GRPC_LISTEN_DEFAULT}) or correct backend.cluster"
            ),
            Reason::ClusterMissing => format!(
                "define cluster {cluster:?} in Envoy (HTTP/1.1, to sluice's decision listener, --decision-listen) or correct backend.cluster"
            ),
            Reason::Unreachable if grpc => format!(
                "start sluice with its gRPC listener on (--grpc-listen, default {GRPC_LISTEN_DEFAULT}; not off) and point cluster {cluster:?} at that address"
            ),
            Reason::Unreachable => format!(
                "start sluice and point cluster {cluster:?} at its decision listener (--decision-listen)"
            ),
            Reason::WrongProtocol if grpc => format!(
                "point cluster {cluster:?} at sluice's gRPC listener (--grpc-listen, default {GRPC_LISTEN_DEFAULT}) with http2_protocol_options, or set backend.protocol to \"http\" for the decision listener"
            ),
            Reason::WrongProtocol => format!(
                "point cluster {cluster:?} at sluice's decision listener (--decision-listen, HTTP/1.1: no http2_protocol_options), or leave backend.protocol unset (grpc_stream) with an HTTP/2 cluster to the gRPC listener (--grpc-listen, default {GRPC_LISTEN_DEFAULT})"
            ),
            Reason::Timeout => format!(
                "the backend did not answer within backend.timeout_ms ({} ms): look at its latency and its store's (sluice_late_debits_total, sluice_deadline_exceeded_total), or raise backend.timeout_ms",
                backend.timeout_ms
            ),
            Reason::BadResponse => format!(
                "cluster {cluster:?} answered something that is not a sluice decision: check that it points at a sluice of a matching version"
            ),
            Reason::BackendError => "the backend's log names the cause (store_unavailable / store_timeout: Redis; deadline_exceeded: backend.timeout_ms leaves the store no time; overloaded: --max-in-flight)".to_owned(),
            Reason::Internal => "a bug in the sluice filter: report it with this line and Envoy's log around it (the request was answered by failure_mode)".to_owned(),
        }
    }
}

/// sluice's error body: an `ApiError` with an `error` code present (any JSON object would
/// otherwise parse, every field having a default).
fn sluice_error(body: &[u8]) -> Option<ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("error")?.as_str()?;
    serde_json::from_value(value).ok()
}

/// A grpc-message as sent: gRPC percent-encodes it on the wire (`%20` for a space), and Envoy
/// hands it over as received.
fn percent_decoded(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let pair = (bytes.get(i + 1).copied(), bytes.get(i + 2).copied());
        match (byte, pair) {
            (b'%', (Some(h), Some(l))) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Bytes as a quoted, printable, bounded snippet: printable ASCII kept, anything else (control
/// characters, newlines, non-ASCII, a gRPC frame's binary header) shown as `.`, at most
/// [`MAX_SNIPPET`] characters; a log line stays one line whatever the answer held.
pub fn snippet(bytes: &[u8]) -> String {
    let mut out: String = bytes
        .iter()
        .take(MAX_SNIPPET)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
                char::from(b)
            } else if b == b'"' {
                '\''
            } else {
                '.'
            }
        })
        .collect();
    if bytes.len() > MAX_SNIPPET {
        out.push_str("...");
    }
    format!("\"{out}\"")
}

#[cfg(test)]
mod tests;
