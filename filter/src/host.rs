//! The host trait: everything the filter needs from Envoy, so that the logic in [`crate::flow`]
//! runs natively against a fake host in tests and, in Envoy, against proxy-wasm hostcalls
//! (`wasm/src/abi.rs`) or the dynamic module's ABI (`native/`). Every method is infallible from
//! the flow's point of view: each host turns host errors into "absent" or a log line, never a
//! panic.

use crate::failure::Failure;

/// How often, at the longest, a host sends its workers' queued cost commits
/// (`report::Worker::tick`, `cost::Commits::send`) when a configuration meters cost: a commit
/// goes out at most this long after its response. Both hosts tick at this period then.
pub const COMMIT_TICK_MS: u64 = 20;

/// Counters the filter keeps as Envoy stats (names in [`Counter::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// The backend allowed the request (including shadow-mode would-deny).
    Allowed,
    /// The backend denied the request: answered 429.
    Denied,
    /// Answered 429 from the local denial cache, with no callout.
    CachedDenials,
    /// Shadow mode: the rule would have denied, the request passed.
    ShadowWouldDeny,
    /// Backend failure under `failure_mode: allow`: passed.
    FailuresAllow,
    /// Backend failure under `failure_mode: deny`: answered `failure_status`.
    FailuresDeny,
    /// The backend has no rule for the action (404 `unknown_action`).
    UnknownAction,
    /// Admitted from a lease (units the backend debited in advance), with no callout.
    LeaseHits,
    /// Callouts started (HTTP or gRPC): with `LeaseHits`, the share of requests that asked.
    Callouts,
    /// Allowed answers that carried a lease, stored in the lease table.
    LeaseGrants,
    /// Count reports the backend accepted (`POST /v1/report`, 2xx).
    ReportsSent,
    /// Count reports that failed (kept and added to the next one).
    ReportsFailed,
    /// Exchange streams opened (`protocol: grpc_stream`; one per worker, again after a close).
    ExchangeStreamsOpened,
    /// Exchange streams that closed (the backend went away or restarted): its requests failed.
    ExchangeStreamsClosed,
    /// Exchanges sent as unary calls because no stream was open (or it was full).
    ExchangeUnary,
    /// Failed decisions by reason (`failure::Reason`): the callout could not start.
    FailuresClusterMissing,
    /// Failed decisions: the backend could not be reached (connection refused or reset).
    FailuresUnreachable,
    /// Failed decisions: the cluster does not speak the protocol.
    FailuresWrongProtocol,
    /// Failed decisions: no answer in time.
    FailuresTimeout,
    /// Failed decisions: an answer that does not decode.
    FailuresBadResponse,
    /// Failed decisions: sluice answered an error (store unavailable, deadline, ...).
    FailuresBackendError,
    /// Cost routes: commits the backend accepted (`POST /v1/commit`, a duplicate included).
    CostCommits,
    /// Cost routes: commits sent again (same id) after a failed attempt.
    CostCommitRetries,
    /// Cost routes: commits given up (attempts spent, refused, or the queue full): the
    /// reservation stays debited.
    CostCommitsFailed,
    /// Cost routes: a response whose actual cost was missing or not a number: the reservation
    /// stays debited, nothing is committed.
    CostActualMissing,
    /// Cost routes: a request that ended with its reservation unsettled (reset, or a streamed
    /// response that ended without its trailer): the reservation stays debited.
    CostUnsettled,
    /// Leased units lost: debited by the backend, never to be spent by this Envoy (a grant that
    /// could not be stored, or arrived after its request had ended; grants or pocket units that
    /// expired unspent; a slot or pocket of another identity replaced). Added by units, when the
    /// filter notices the loss. Never on a leased hit; with `LeaseHits`, tells an operator why a
    /// leased key admitted less than its capacity.
    LeaseUnitsLost,
    /// Failed decisions: the filter itself failed (a bug caught in a host's hook, or a request's
    /// state lost): the failure mode applied, as for any other failure.
    FailuresInternal,
    /// Leased units given back to the backend (`lease::returns`): units of grants that expired
    /// or could not be kept, in returns the backend accepted (a retried copy counts once here;
    /// the backend applies one grant's return once). Added by units.
    LeaseUnitsReturned,
}

impl Counter {
    /// Every counter, for defining them once at start.
    pub const ALL: [Counter; 29] = [
        Counter::Allowed,
        Counter::Denied,
        Counter::CachedDenials,
        Counter::ShadowWouldDeny,
        Counter::FailuresAllow,
        Counter::FailuresDeny,
        Counter::UnknownAction,
        Counter::LeaseHits,
        Counter::Callouts,
        Counter::LeaseGrants,
        Counter::ReportsSent,
        Counter::ReportsFailed,
        Counter::ExchangeStreamsOpened,
        Counter::ExchangeStreamsClosed,
        Counter::ExchangeUnary,
        Counter::FailuresClusterMissing,
        Counter::FailuresUnreachable,
        Counter::FailuresWrongProtocol,
        Counter::FailuresTimeout,
        Counter::FailuresBadResponse,
        Counter::FailuresBackendError,
        Counter::CostCommits,
        Counter::CostCommitRetries,
        Counter::CostCommitsFailed,
        Counter::CostActualMissing,
        Counter::CostUnsettled,
        Counter::LeaseUnitsLost,
        Counter::FailuresInternal,
        Counter::LeaseUnitsReturned,
    ];

    /// The stat name (Envoy shows it as `wasmcustom.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Counter::Allowed => "sluice.allowed",
            Counter::Denied => "sluice.denied",
            Counter::CachedDenials => "sluice.cached_denials",
            Counter::ShadowWouldDeny => "sluice.shadow_would_deny",
            Counter::FailuresAllow => "sluice.failures_allow",
            Counter::FailuresDeny => "sluice.failures_deny",
            Counter::UnknownAction => "sluice.unknown_action",
            Counter::LeaseHits => "sluice.lease_hits",
            Counter::Callouts => "sluice.callouts",
            Counter::LeaseGrants => "sluice.lease_grants",
            Counter::ReportsSent => "sluice.reports_sent",
            Counter::ReportsFailed => "sluice.reports_failed",
            Counter::ExchangeStreamsOpened => "sluice.exchange_streams_opened",
            Counter::ExchangeStreamsClosed => "sluice.exchange_streams_closed",
            Counter::ExchangeUnary => "sluice.exchange_unary",
            Counter::FailuresClusterMissing => "sluice.failures_cluster_missing",
            Counter::FailuresUnreachable => "sluice.failures_unreachable",
            Counter::FailuresWrongProtocol => "sluice.failures_wrong_protocol",
            Counter::FailuresTimeout => "sluice.failures_timeout",
            Counter::FailuresBadResponse => "sluice.failures_bad_response",
            Counter::FailuresBackendError => "sluice.failures_backend_error",
            Counter::CostCommits => "sluice.cost_commits",
            Counter::CostCommitRetries => "sluice.cost_commit_retries",
            Counter::CostCommitsFailed => "sluice.cost_commits_failed",
            Counter::CostActualMissing => "sluice.cost_actual_missing",
            Counter::CostUnsettled => "sluice.cost_unsettled",
            Counter::LeaseUnitsLost => "sluice.lease_units_lost",
            Counter::FailuresInternal => "sluice.failures_internal",
            Counter::LeaseUnitsReturned => "sluice.lease_units_returned",
        }
    }

    /// Index into [`Counter::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The HTTP callout to the decision API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callout {
    /// Envoy cluster.
    pub cluster: String,
    /// Pseudo-headers and content type.
    pub headers: Vec<(&'static str, String)>,
    /// JSON `ThrottleRequest`.
    pub body: Vec<u8>,
    /// Timeout in milliseconds.
    pub timeout_ms: u64,
}

impl Callout {
    /// A JSON `POST {path}` to `cluster` (decisions, reports, commits).
    pub fn post_json(
        cluster: &str,
        path: &str,
        authority: &str,
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Callout {
        Callout {
            cluster: cluster.to_owned(),
            headers: vec![
                (":method", "POST".to_owned()),
                (":path", path.to_owned()),
                (":authority", authority.to_owned()),
                ("content-type", "application/json".to_owned()),
            ],
            body,
            timeout_ms,
        }
    }
}

/// The gRPC callout to the backend's rate limit service (`ShouldRateLimit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcCall {
    /// The serialized `envoy.config.core.v3.GrpcService` naming the cluster (see
    /// `Backend::grpc_service`).
    pub service: String,
    /// The encoded `RateLimitRequest`.
    pub message: Vec<u8>,
    /// Timeout in milliseconds.
    pub timeout_ms: u64,
}

/// A decision-API request over the exchange transport (`protocol: grpc_stream`, see
/// `exchange.rs`): `POST {path}` with the JSON `body`, answered like an HTTP callout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeCall {
    /// The decision API's path (`/v1/throttle`, `/v1/throttle/all`, `/v1/report`).
    pub path: String,
    /// The JSON body.
    pub body: Vec<u8>,
    /// Timeout in milliseconds.
    pub timeout_ms: u64,
}

/// Why a conditional shared-data write did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasError {
    /// Another worker wrote the key since it was read (or it appeared, for an insert): read again.
    Conflict,
    /// The host refused the write for another reason: give up (a lease is an optimisation).
    Failed,
}

/// What the filter needs from its host, per request.
pub trait Host {
    /// Host wall clock, nanoseconds since the Unix epoch.
    fn now_ns(&self) -> u64;
    /// Calls `each` with every value of a request header, in order (not at all when absent).
    /// Values are raw bytes, borrowed from the host for the call: the hot path (routes, keys)
    /// reads headers with no allocation (a leased hit is a few k instructions in all, and each
    /// allocation and free costs ~0.2k; docs/filter.md).
    fn each_request_header(&self, name: &str, each: &mut dyn FnMut(&[u8]));
    /// Every value of a request header, in order (empty when absent), copied: for the paths that
    /// keep them (a cost route's reserve header).
    fn request_header(&self, name: &str) -> Vec<Vec<u8>> {
        let mut values = Vec::new();
        self.each_request_header(name, &mut |v| values.push(v.to_vec()));
        values
    }
    /// The downstream peer address as Envoy reports it (`ip:port`, `[v6]:port`).
    fn client_address(&self) -> Option<Vec<u8>>;
    /// Reads proxy-wasm shared data (shared by every worker of this VM id).
    fn shared_get(&self, key: &str) -> Option<Vec<u8>>;
    /// Writes proxy-wasm shared data; failures are ignored (the cache is an optimisation).
    fn shared_set(&mut self, key: &str, value: &[u8]);
    /// Reads shared data with its version (Envoy's CAS number, never 0); `None` when absent.
    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)>;
    /// Envoy's check-and-set, atomic across workers: when the key exists, the write happens
    /// only if its version is still `version`; an absent key is inserted whatever `version` says
    /// (`lease::table` builds insert-if-absent on that).
    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError>;
    /// Starts the callout; `Err` carries why it could not start (unknown cluster, ...).
    fn dispatch(&mut self, call: &Callout) -> Result<u32, String>;
    /// Starts the gRPC callout (`rls_proto::SERVICE`/`METHOD`); `Err` carries why it could not
    /// start. Its answer comes back as a gRPC status and message.
    fn dispatch_grpc(&mut self, call: &GrpcCall) -> Result<u32, String>;
    /// Starts an exchange (on the worker's stream when it is open, else as a unary call);
    /// `Err` is the failure when it could not start, or when the stream is down for a reason
    /// that will not fix itself per request (then the failure mode applies at once, see
    /// `exchange.rs`). Its answer comes back as a status and a body, read as an HTTP callout's;
    /// a timeout, a closed stream or a failed unary call as a [`Failure`].
    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure>;
    /// Answers the client directly; the request goes no further.
    fn send_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]);
    /// Resumes a paused request.
    fn resume(&mut self);
    /// Sets (replaces) a request header on the way upstream.
    fn set_request_header(&mut self, name: &str, value: &str);
    /// Removes a request header (every value) on the way upstream.
    fn remove_request_header(&mut self, name: &str);
    /// Adds a header to the response on the way to the client. The value is bytes: the
    /// rate-limit headers are written as bytes (`headers::render_each`) and need no UTF-8 check.
    fn add_response_header(&mut self, name: &str, value: &[u8]);
    /// Increments a stat counter.
    fn count(&mut self, counter: Counter);
    /// Adds `n` to a stat counter (units, not events: `sluice.lease_units_lost`). Only the rare
    /// paths call it; a hit counts with [`Host::count`].
    fn count_by(&mut self, counter: Counter, n: u64);
    /// Logs a warning.
    fn warn(&self, message: &str);
    /// Every value of a response header, in order (empty when absent), read while the response
    /// headers are being processed (`Flow::on_response_headers`). Only cost routes read it.
    /// Default: none (a host without it keeps every cost route's reservation, counted in
    /// `sluice.cost_actual_missing`).
    fn response_header(&self, _name: &str) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// Every value of a response trailer, read while the response trailers are being processed
    /// (`Flow::on_response_trailers`). Only cost routes whose actual cost is a trailer read it.
    /// Default: none.
    fn response_trailer(&self, _name: &str) -> Vec<Vec<u8>> {
        Vec::new()
    }
}
