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

/// Declares [`Counter`] from one table: each counter's doc, variant and Envoy stat name, in the
/// order of [`Counter::ALL`] and of the ids both hosts define (`Counter::index`). A counter is
/// added, renamed or moved in this one place; the unit test `counter_table` holds the stat
/// names and ties every counter's index to its place.
macro_rules! counters {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Counters the filter keeps as Envoy stats (names in [`Counter::name`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Counter {
            $($(#[$doc])* $variant,)*
        }

        /// How many counters there are.
        const COUNTERS: usize = [$($name),*].len();

        impl Counter {
            /// Every counter, for defining them once at start (in index order).
            pub const ALL: [Counter; COUNTERS] = [$(Counter::$variant),*];

            /// The stat name (Envoy shows it as `wasmcustom.<name>`, or
            /// `dynamicmodulescustom.<name>` from the native build).
            pub fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $name,)*
                }
            }
        }
    };
}

counters! {
    /// The backend allowed the request (including shadow-mode would-deny).
    Allowed => "sluice.allowed",
    /// The backend denied the request: answered 429.
    Denied => "sluice.denied",
    /// Answered 429 from the local denial cache, with no callout.
    CachedDenials => "sluice.cached_denials",
    /// Shadow mode: the rule would have denied, the request passed.
    ShadowWouldDeny => "sluice.shadow_would_deny",
    /// Backend failure under `failure_mode: allow`: passed.
    FailuresAllow => "sluice.failures_allow",
    /// Backend failure under `failure_mode: deny`: answered `failure_status`.
    FailuresDeny => "sluice.failures_deny",
    /// The backend has no rule for the action (404 `unknown_action`).
    UnknownAction => "sluice.unknown_action",
    /// Admitted from a lease (units the backend debited in advance), with no callout.
    LeaseHits => "sluice.lease_hits",
    /// Callouts started (HTTP or gRPC): with `LeaseHits`, the share of requests that asked.
    Callouts => "sluice.callouts",
    /// Allowed answers that carried a lease, stored in the lease table.
    LeaseGrants => "sluice.lease_grants",
    /// Count reports the backend accepted (`POST /v1/report`, 2xx).
    ReportsSent => "sluice.reports_sent",
    /// Count reports that failed (kept and added to the next one).
    ReportsFailed => "sluice.reports_failed",
    /// Exchange streams opened (`protocol: grpc_stream`; one per worker, again after a close).
    ExchangeStreamsOpened => "sluice.exchange_streams_opened",
    /// Exchange streams that closed (the backend went away or restarted): its requests failed.
    ExchangeStreamsClosed => "sluice.exchange_streams_closed",
    /// Exchanges sent as unary calls because no stream was open (or it was full).
    ExchangeUnary => "sluice.exchange_unary",
    /// Failed decisions by reason (`failure::Reason`): the callout could not start.
    FailuresClusterMissing => "sluice.failures_cluster_missing",
    /// Failed decisions: the backend could not be reached (connection refused or reset).
    FailuresUnreachable => "sluice.failures_unreachable",
    /// Failed decisions: the cluster does not speak the protocol.
    FailuresWrongProtocol => "sluice.failures_wrong_protocol",
    /// Failed decisions: no answer in time.
    FailuresTimeout => "sluice.failures_timeout",
    /// Failed decisions: an answer that does not decode.
    FailuresBadResponse => "sluice.failures_bad_response",
    /// Failed decisions: sluice answered an error (store unavailable, deadline, ...).
    FailuresBackendError => "sluice.failures_backend_error",
    /// Cost routes: commits the backend accepted (`POST /v1/commit`, a duplicate included).
    CostCommits => "sluice.cost_commits",
    /// Cost routes: commits sent again (same id) after a failed attempt.
    CostCommitRetries => "sluice.cost_commit_retries",
    /// Cost routes: commits given up (attempts spent, refused, or the queue full): the
    /// reservation stays debited.
    CostCommitsFailed => "sluice.cost_commits_failed",
    /// Cost routes: a response whose actual cost was missing or not a number: the reservation
    /// stays debited, nothing is committed.
    CostActualMissing => "sluice.cost_actual_missing",
    /// Cost routes: a request that ended with its reservation unsettled (reset, or a streamed
    /// response that ended without its trailer): the reservation stays debited.
    CostUnsettled => "sluice.cost_unsettled",
    /// Leased units lost: debited by the backend, never to be spent by this Envoy (a grant that
    /// could not be stored, or arrived after its request had ended; grants or pocket units that
    /// expired unspent; a slot or pocket of another identity replaced). Added by units, when the
    /// filter notices the loss. Never on a leased hit; with `LeaseHits`, tells an operator why a
    /// leased key admitted less than its capacity.
    LeaseUnitsLost => "sluice.lease_units_lost",
    /// Failed decisions: the filter itself failed (a bug caught in a host's hook, or a request's
    /// state lost): the failure mode applied, as for any other failure.
    FailuresInternal => "sluice.failures_internal",
    /// Leased units given back to the backend (`lease::returns`): units of grants that expired
    /// or could not be kept, in returns the backend accepted (a retried copy counts once here;
    /// the backend applies one grant's return once). Added by units.
    LeaseUnitsReturned => "sluice.lease_units_returned",
}

impl Counter {
    /// Index into [`Counter::ALL`] (the host's id table).
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
    /// allocation and free costs ~0.2k; benches/envoy/results/callgrind.md).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The stat names operators' dashboards and the e2e tests read, in index order: a rename
    /// or a reorder fails here, and every counter's index is its place in `ALL` (the id each
    /// host defined for it), so no counter can be counted under another's name.
    #[test]
    fn counter_table() {
        let names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "sluice.allowed",
                "sluice.denied",
                "sluice.cached_denials",
                "sluice.shadow_would_deny",
                "sluice.failures_allow",
                "sluice.failures_deny",
                "sluice.unknown_action",
                "sluice.lease_hits",
                "sluice.callouts",
                "sluice.lease_grants",
                "sluice.reports_sent",
                "sluice.reports_failed",
                "sluice.exchange_streams_opened",
                "sluice.exchange_streams_closed",
                "sluice.exchange_unary",
                "sluice.failures_cluster_missing",
                "sluice.failures_unreachable",
                "sluice.failures_wrong_protocol",
                "sluice.failures_timeout",
                "sluice.failures_bad_response",
                "sluice.failures_backend_error",
                "sluice.cost_commits",
                "sluice.cost_commit_retries",
                "sluice.cost_commits_failed",
                "sluice.cost_actual_missing",
                "sluice.cost_unsettled",
                "sluice.lease_units_lost",
                "sluice.failures_internal",
                "sluice.lease_units_returned",
            ]
        );
        for (i, counter) in Counter::ALL.iter().enumerate() {
            assert_eq!(counter.index(), i, "{counter:?}");
        }
    }
}
