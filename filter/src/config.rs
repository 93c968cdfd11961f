//! The plugin configuration: JSON parsed and validated once, in the root context, so that a bad
//! field makes Envoy refuse the configuration (`envoy --mode validate` catches it) instead of
//! surfacing per request. After [`Config::from_json`] every value is known good.

use serde::Deserialize;
use sluice_core::headers::HeaderFamilies;
use sluice_core::limits::{MAX_DECISION_TIMEOUT_MS, MAX_QUANTITY};
use sluice_core::{Action, FieldError};
use validate::{validate_checks, validate_route};

mod cost;
mod lease_report;
mod validate;
pub use cost::{units, Actual, Cost, Reserve};
pub use lease_report::{LeaseConfig, ReportConfig};

/// What to do when the backend cannot give a decision (error status, timeout, bad JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Let the request through (fail open). The default: a rate limiter outage should not be a
    /// site outage.
    #[default]
    Allow,
    /// Answer `failure_status` (fail closed).
    Deny,
}

/// What to do when the backend has no rule for the route's action (404 `unknown_action`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownAction {
    /// Let the request through (a route added before its rule does not block traffic).
    #[default]
    Allow,
    /// Answer 403: no rule means the action is not allowed.
    Deny,
}

/// How the filter asks the backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// `POST /v1/throttle` with a JSON body to the decision listener (`--decision-listen`), one
    /// HTTP callout per decision.
    Http,
    /// gRPC `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` to the backend's gRPC
    /// listener (`--grpc-listen`), over an HTTP/2 cluster.
    Grpc,
    /// The decision API's requests as messages on one long-lived gRPC stream per worker
    /// (`sluice.v1.DecisionExchange/Stream` on the gRPC listener, an HTTP/2 cluster): the same
    /// JSON as `http` (leases and all-or-nothing checks included) at a fraction of Envoy's cost per
    /// request; unary `DecisionExchange/Call` while the stream is down. See `exchange.rs`.
    /// The default: of the three it costs Envoy the least CPU per decision (docs/exchange.md).
    #[default]
    GrpcStream,
}

impl Protocol {
    /// Whether the callout goes to the backend's gRPC listener (an HTTP/2 cluster).
    pub fn is_grpc(self) -> bool {
        matches!(self, Protocol::Grpc | Protocol::GrpcStream)
    }

    /// Whether the callout carries the decision API's JSON (leases, all-or-nothing checks).
    pub fn speaks_json(self) -> bool {
        matches!(self, Protocol::Http | Protocol::GrpcStream)
    }
}

/// Longest `backend.cluster` / `backend.authority` in gRPC mode: their serialized
/// `GrpcService` must stay a valid UTF-8 string for proxy-wasm's `dispatch_grpc_call`, which it is
/// when every length fits one varint byte.
pub const MAX_GRPC_NAME: usize = 60;

/// Where the decision backend is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Envoy cluster name of the sluice backend's gRPC listener (`grpc_stream`, the default, and
    /// `grpc`; `--grpc-listen`, HTTP/2) or its decision listener (`http`; `--decision-listen`).
    pub cluster: String,
    /// The callout's protocol (default `grpc_stream`; `http` and `grpc` are the options).
    #[serde(default)]
    pub protocol: Protocol,
    /// `:authority` of the callout.
    #[serde(default = "default_authority")]
    pub authority: String,
    /// Path of the decision API.
    #[serde(default = "default_path")]
    pub path: String,
    /// Callout timeout in milliseconds; past it the failure mode applies.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// In gRPC mode: the serialized `envoy.config.core.v3.GrpcService` naming `cluster` (and
    /// `authority`), computed once at configuration, as `dispatch_grpc_call` takes it.
    #[serde(skip)]
    pub grpc_service: String,
}

fn default_authority() -> String {
    "sluice-backend".to_owned()
}
fn default_path() -> String {
    "/v1/throttle".to_owned()
}
fn default_timeout_ms() -> u64 {
    sluice_core::limits::DEFAULT_DECISION_TIMEOUT_MS
}

/// The local denial cache (see `cache.rs` for why it is exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenialCache {
    /// Whether denials are remembered and answered locally.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Longest time one denial is answered locally, whatever its retry time. This bounds how long
    /// a rule loosened through the admin API can still be denied locally.
    #[serde(default = "default_max_ttl_ms")]
    pub max_ttl_ms: u64,
    /// Number of shared-data slots: the cache's memory bound (one entry per slot; a newer denial
    /// whose key hashes to a taken slot replaces the older one).
    #[serde(default = "default_slots")]
    pub slots: u64,
}

fn yes() -> bool {
    true
}
fn default_max_ttl_ms() -> u64 {
    1000
}
fn default_slots() -> u64 {
    65_536
}

impl Default for DenialCache {
    fn default() -> Self {
        DenialCache {
            enabled: true,
            max_ttl_ms: default_max_ttl_ms(),
            slots: default_slots(),
        }
    }
}

/// One header condition of a route: present, or equal to a value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatch {
    /// Header name (matched case-insensitively; stored lowercase).
    pub name: String,
    /// When set, some value of the header must equal it byte for byte; else presence suffices.
    #[serde(default)]
    pub equals: Option<String>,
}

/// The conditions of a route, all of which must hold. An empty match matches every request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// The path (query string excluded) starts with this.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// The path (query string excluded) ends with this (`/replies` for `/posts/7/replies`).
    #[serde(default)]
    pub path_suffix: Option<String>,
    /// The path (query string excluded) is exactly this.
    #[serde(default)]
    pub path: Option<String>,
    /// The method is exactly this (uppercase).
    #[serde(default)]
    pub method: Option<String>,
    /// Header conditions.
    #[serde(default)]
    pub headers: Vec<HeaderMatch>,
}

/// Where a route's key (the subject being limited) comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum KeySource {
    /// A request header's value(s); repeated headers are joined with `,` in order.
    Header {
        /// Header name (case-insensitive; stored lowercase).
        name: String,
        /// Used when the header is missing or empty. Default: the constant `anonymous`, so a
        /// missing key is one shared bucket, never a free pass.
        #[serde(default)]
        on_missing: Option<Box<KeySource>>,
    },
    /// The downstream peer's IP address (Envoy's `source.address`, port removed).
    ClientIp {
        /// Used when the address is unavailable.
        #[serde(default)]
        on_missing: Option<Box<KeySource>>,
    },
    /// The request path without the query string.
    Path {
        /// Used when the path is missing or empty.
        #[serde(default)]
        on_missing: Option<Box<KeySource>>,
    },
    /// The same key for every request: one bucket for the whole route.
    Constant {
        /// The key.
        value: String,
    },
}

/// The key used when a source yields nothing and no `on_missing` is given.
pub const DEFAULT_MISSING_KEY: &str = "anonymous";

/// How deep `on_missing` fallbacks may nest.
pub const MAX_KEY_DEPTH: usize = 4;

/// One of a route's all-or-nothing checks (`checks`): an action and where its key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteCheck {
    /// The action whose rule applies.
    pub action: String,
    /// Where this check's key comes from.
    pub key: KeySource,
    /// Units this check costs (default: the route's `quantity`).
    #[serde(default)]
    pub quantity: Option<u64>,
    /// Index of `action` in [`Config::actions`] (set by validation).
    #[serde(skip)]
    pub action_index: usize,
}

/// The `key` before validation fills it in (never used as a key: validation refuses a route
/// without one).
fn unset_key() -> KeySource {
    KeySource::Constant {
        value: String::new(),
    }
}

/// One route: match → action and key, or match → all-or-nothing checks (one callout).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Conditions; all must hold.
    #[serde(default, rename = "match")]
    pub matcher: Match,
    /// The action whose rule limits this route (with `checks`: set by validation to the first
    /// check's, for logs and failure reports).
    #[serde(default)]
    pub action: String,
    /// `key` as written (absent for a route with `checks`); validation moves it to [`Route::key`].
    #[serde(default, rename = "key")]
    key_written: Option<KeySource>,
    /// Where the key comes from (with `checks`: the first check's). Set by validation.
    #[serde(skip, default = "unset_key")]
    pub key: KeySource,
    /// Units each request costs (default 1).
    #[serde(default = "one")]
    pub quantity: u64,
    /// All-or-nothing checks instead of `action` and `key` (2 to
    /// [`sluice_core::limits::MAX_CHECKS`]): the request passes only if every one allows it, and
    /// a denied request consumes nothing from any of them (`POST /v1/throttle/all`). HTTP callouts
    /// only; no leases and no denial cache for such routes.
    #[serde(default)]
    pub checks: Vec<RouteCheck>,
    /// `cost` as written; validation moves it to [`Route::cost`].
    #[serde(default, rename = "cost")]
    cost_written: Option<cost::CostWritten>,
    /// The route meters cost (docs/cost-budgets.md): reserve at request time, commit the actual
    /// cost when the response ends. Set by validation; no lease for such a route.
    #[serde(skip)]
    pub cost: Option<Cost>,
    /// Index of `action` in [`Config::actions`] (set by validation): the per-worker counters
    /// are a table indexed by it, so a request never hashes an action name.
    #[serde(skip)]
    pub action_index: usize,
}

fn one() -> u64 {
    1
}

/// HTTP status of a fail-closed answer, default 503.
fn default_failure_status() -> u16 {
    503
}

/// gRPC status of a denial answered to a gRPC client, default RESOURCE_EXHAUSTED (8).
fn default_grpc_denied_status() -> u32 {
    crate::failure::grpc::RESOURCE_EXHAUSTED
}

/// The whole plugin configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The decision backend.
    pub backend: Backend,
    /// Backend failure policy (default `allow`).
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// Status of a fail-closed answer (default 503).
    #[serde(default = "default_failure_status")]
    pub failure_status: u16,
    /// The gRPC status a gRPC request over its limit gets (1 to 16, default 8
    /// RESOURCE_EXHAUSTED): its trailers-only answer's `grpc-status` (see `reply::Reply`).
    #[serde(default = "default_grpc_denied_status")]
    pub grpc_denied_status: u32,
    /// Policy for an action without a rule (default `allow`).
    #[serde(default)]
    pub unknown_action: UnknownAction,
    /// Which rate-limit header families to emit (default: both).
    #[serde(default)]
    pub headers: HeaderFamilies,
    /// The local denial cache.
    #[serde(default)]
    pub denial_cache: DenialCache,
    /// The lease table (default on; a rule without `lease` is never leased).
    #[serde(default)]
    pub lease: LeaseConfig,
    /// The counts report to the backend (default on, every second).
    #[serde(default)]
    pub report: ReportConfig,
    /// Ordered routes; the first that matches applies.
    pub routes: Vec<Route>,
    /// The routes' distinct actions in order of first appearance (set by validation). The
    /// first [`sluice_core::limits::MAX_REPORT_ACTIONS`] are counted and reported.
    #[serde(skip)]
    pub actions: Vec<String>,
}

impl Config {
    /// Parses and validates the plugin configuration, naming the field at fault on error.
    pub fn from_json(bytes: &[u8]) -> Result<Config, FieldError> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let mut config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let field = if path.is_empty() || path == "." {
                "(root)".to_owned()
            } else {
                path
            };
            FieldError::new(field, e.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&mut self) -> Result<(), FieldError> {
        let b = &self.backend;
        if b.cluster.is_empty() {
            return Err(FieldError::new(
                "backend.cluster",
                "must name an Envoy cluster",
            ));
        }
        if b.authority.is_empty() {
            return Err(FieldError::new("backend.authority", "must not be empty"));
        }
        if !b.path.starts_with('/') {
            return Err(FieldError::new(
                "backend.path",
                format!("must start with /; got {:?}", b.path),
            ));
        }
        if !(1..=MAX_DECISION_TIMEOUT_MS).contains(&b.timeout_ms) {
            return Err(FieldError::new(
                "backend.timeout_ms",
                format!(
                    "must be 1 to {MAX_DECISION_TIMEOUT_MS} milliseconds; got {}",
                    b.timeout_ms
                ),
            ));
        }
        if b.protocol.is_grpc() {
            for (field, value) in [("cluster", &b.cluster), ("authority", &b.authority)] {
                if value.len() > MAX_GRPC_NAME {
                    return Err(FieldError::new(
                        format!("backend.{field}"),
                        format!(
                            "must be at most {MAX_GRPC_NAME} bytes with a gRPC protocol; got {}",
                            value.len()
                        ),
                    ));
                }
            }
            self.backend.grpc_service =
                grpc_service(&self.backend.cluster, &self.backend.authority).ok_or_else(|| {
                    FieldError::new("backend.cluster", "cannot be named in a gRPC call")
                })?;
        }
        if !(400..=599).contains(&self.failure_status) {
            return Err(FieldError::new(
                "failure_status",
                format!(
                    "must be an HTTP error status, 400 to 599; got {}",
                    self.failure_status
                ),
            ));
        }
        if !(1..=crate::failure::grpc::MAX).contains(&self.grpc_denied_status) {
            return Err(FieldError::new(
                "grpc_denied_status",
                format!(
                    "must be a gRPC error code, 1 to {} (0 is OK: a denial would look like a success); got {}",
                    crate::failure::grpc::MAX,
                    self.grpc_denied_status
                ),
            ));
        }
        let dc = &self.denial_cache;
        if !(1..=86_400_000).contains(&dc.max_ttl_ms) {
            return Err(FieldError::new(
                "denial_cache.max_ttl_ms",
                format!("must be 1 to 86400000; got {}", dc.max_ttl_ms),
            ));
        }
        if !(1..=16_777_216).contains(&dc.slots) {
            return Err(FieldError::new(
                "denial_cache.slots",
                format!("must be 1 to 16777216; got {}", dc.slots),
            ));
        }
        self.lease.validate()?;
        self.report
            .validate(&self.backend.cluster, self.backend.protocol)?;
        if self.routes.is_empty() {
            return Err(FieldError::new("routes", "must hold at least one route"));
        }
        for (i, route) in self.routes.iter_mut().enumerate() {
            let at = format!("routes[{i}]");
            validate_checks(route, &at, self.backend.protocol)?;
            validate_route(route, &at)?;
            if let Some(written) = route.cost_written.take() {
                route.cost = Some(written.validate(&at, self.backend.protocol, &route.checks)?);
            }
            route.action_index = action_index(&mut self.actions, &route.action);
            for check in &mut route.checks {
                check.action_index = action_index(&mut self.actions, &check.action);
            }
        }
        Ok(())
    }
}

impl Config {
    /// Whether some route meters cost (its commits go out on the root's tick).
    pub fn meters_cost(&self) -> bool {
        self.routes.iter().any(|r| r.cost.is_some())
    }

    /// Whether this configuration spends leases (`lease.enabled` with a JSON callout): its
    /// workers then need a tick to give expired grants' units back (`lease::watch`).
    pub fn leases(&self) -> bool {
        self.lease.enabled && self.backend.protocol.speaks_json()
    }
}

/// The serialized `GrpcService { envoy_grpc { cluster_name, authority } }` as a string, or `None`
/// if it is not UTF-8 (not with names of at most [`MAX_GRPC_NAME`] bytes).
fn grpc_service(cluster: &str, authority: &str) -> Option<String> {
    use prost::Message;
    let service = crate::rls_proto::GrpcService {
        envoy_grpc: Some(crate::rls_proto::EnvoyGrpc {
            cluster_name: cluster.to_owned(),
            authority: authority.to_owned(),
        }),
    };
    String::from_utf8(service.encode_to_vec()).ok()
}

/// The position of `action` in `actions`, appended when new.
fn action_index(actions: &mut Vec<String>, action: &str) -> usize {
    match actions.iter().position(|a| a == action) {
        Some(index) => index,
        None => {
            actions.push(action.to_owned());
            actions.len() - 1
        }
    }
}

#[cfg(test)]
mod tests;
