//! The plugin configuration: JSON parsed and validated once, in the root context, so that a bad
//! field makes Envoy refuse the configuration (`envoy --mode validate` catches it) instead of
//! surfacing per request. After [`Config::from_json`] every value is known good.

use serde::Deserialize;
use sluice_core::headers::HeaderFamilies;
use sluice_core::limits::{MAX_DECISION_TIMEOUT_MS, MAX_QUANTITY};
use sluice_core::{Action, FieldError};

mod cost;
mod lease_report;
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

/// A route gives either `action` and `key`, or `checks` (2 to MAX_CHECKS, HTTP callouts only);
/// each check is validated like a route's own action, key and quantity. With `checks`, the
/// route's `action` and `key` become the first check's (what logs and failure reports name).
fn validate_checks(route: &mut Route, at: &str, protocol: Protocol) -> Result<(), FieldError> {
    let key_given = route.key_written.is_some() || route.key != unset_key();
    if let Some(key) = route.key_written.take() {
        route.key = key;
    }
    if route.checks.is_empty() {
        if route.action.is_empty() {
            return Err(FieldError::new(
                format!("{at}.action"),
                "required (or give checks: a list of {action, key})",
            ));
        }
        if !key_given {
            return Err(FieldError::new(
                format!("{at}.key"),
                "required (or give checks: a list of {action, key})",
            ));
        }
        return Ok(());
    }
    if !route.action.is_empty() || key_given {
        return Err(FieldError::new(
            format!("{at}.checks"),
            "give either action and key, or checks, not both",
        ));
    }
    let max = sluice_core::limits::MAX_CHECKS;
    if route.checks.len() < 2 || route.checks.len() > max {
        return Err(FieldError::new(
            format!("{at}.checks"),
            format!(
                "must hold 2 to {max} checks (one limit is action and key); got {}",
                route.checks.len()
            ),
        ));
    }
    if !protocol.speaks_json() {
        return Err(FieldError::new(
            format!("{at}.checks"),
            "all-or-nothing checks need backend.protocol http or grpc_stream (one POST /v1/throttle/all carries them)",
        ));
    }
    for (j, check) in route.checks.iter_mut().enumerate() {
        let here = format!("{at}.checks[{j}]");
        Action::parse(&check.action).map_err(|r| FieldError::new(format!("{here}.action"), r))?;
        let quantity = check.quantity.unwrap_or(route.quantity);
        if !(1..=MAX_QUANTITY).contains(&quantity) {
            return Err(FieldError::new(
                format!("{here}.quantity"),
                format!("must be 1 to {MAX_QUANTITY}; got {quantity}"),
            ));
        }
        check.quantity = Some(quantity);
        validate_key(&mut check.key, &format!("{here}.key"), 1)?;
    }
    if let Some(first) = route.checks.first() {
        route.action = first.action.clone();
        route.key = first.key.clone();
    }
    Ok(())
}

fn validate_route(route: &mut Route, at: &str) -> Result<(), FieldError> {
    Action::parse(&route.action).map_err(|r| FieldError::new(format!("{at}.action"), r))?;
    if !(1..=MAX_QUANTITY).contains(&route.quantity) {
        return Err(FieldError::new(
            format!("{at}.quantity"),
            format!("must be 1 to {MAX_QUANTITY}; got {}", route.quantity),
        ));
    }
    let m = &mut route.matcher;
    if let Some(prefix) = &m.path_prefix {
        if !prefix.starts_with('/') {
            return Err(FieldError::new(
                format!("{at}.match.path_prefix"),
                "must start with /",
            ));
        }
    }
    if let Some(path) = &m.path {
        if !path.starts_with('/') {
            return Err(FieldError::new(
                format!("{at}.match.path"),
                "must start with /",
            ));
        }
    }
    if let Some(method) = &m.method {
        if method.is_empty() || !method.bytes().all(|c| c.is_ascii_uppercase()) {
            return Err(FieldError::new(
                format!("{at}.match.method"),
                format!("must be an uppercase HTTP method such as GET or POST; got {method:?}"),
            ));
        }
    }
    for (j, h) in m.headers.iter_mut().enumerate() {
        h.name = header_name(&h.name)
            .map_err(|r| FieldError::new(format!("{at}.match.headers[{j}].name"), r))?;
    }
    validate_key(&mut route.key, &format!("{at}.key"), 1)
}

fn validate_key(key: &mut KeySource, at: &str, depth: usize) -> Result<(), FieldError> {
    if depth > MAX_KEY_DEPTH {
        return Err(FieldError::new(
            at,
            format!("on_missing may nest at most {MAX_KEY_DEPTH} deep"),
        ));
    }
    let on_missing = match key {
        KeySource::Header { name, on_missing } => {
            *name = header_name(name).map_err(|r| FieldError::new(format!("{at}.name"), r))?;
            on_missing
        }
        KeySource::ClientIp { on_missing } | KeySource::Path { on_missing } => on_missing,
        KeySource::Constant { value } => {
            if value.is_empty() {
                return Err(FieldError::new(format!("{at}.value"), "must not be empty"));
            }
            return Ok(());
        }
    };
    match on_missing {
        Some(next) => validate_key(next, &format!("{at}.on_missing"), depth + 1),
        None => Ok(()),
    }
}

/// Lowercases and checks a header name (an RFC 9110 token, or an HTTP/2 pseudo-header).
fn header_name(name: &str) -> Result<String, String> {
    let body = name.strip_prefix(':').unwrap_or(name);
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    if body.is_empty() || !body.bytes().all(token) {
        return Err(format!(
            "must be a header name (letters, digits, - and the like); got {name:?}"
        ));
    }
    Ok(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Config, FieldError> {
        Config::from_json(json.as_bytes())
    }

    const MINIMAL: &str = r#"{"backend": {"cluster": "sluice_backend"},
        "routes": [{"action": "reply", "key": {"source": "header", "name": "X-User"}}]}"#;

    #[test]
    fn minimal_config_gets_the_documented_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.backend.timeout_ms, 25);
        assert_eq!(c.backend.authority, "sluice-backend");
        assert_eq!(c.backend.path, "/v1/throttle");
        assert_eq!(c.backend.protocol, Protocol::GrpcStream);
        // GrpcService { envoy_grpc (1) { cluster_name (1), authority (2) } }
        assert!(c.backend.grpc_service.contains("sluice_backend"));
        assert!(c.report.via_exchange && c.report.cluster.is_none());
        assert_eq!(c.failure_mode, FailureMode::Allow);
        assert_eq!(c.failure_status, 503);
        assert_eq!(c.grpc_denied_status, 8, "RESOURCE_EXHAUSTED");
        assert_eq!(c.unknown_action, UnknownAction::Allow);
        assert_eq!(c.headers, HeaderFamilies::default());
        assert_eq!(c.denial_cache, DenialCache::default());
        assert_eq!(c.routes[0].quantity, 1);
        assert_eq!(c.routes[0].matcher, Match::default());
        assert_eq!(
            c.routes[0].key,
            KeySource::Header {
                name: "x-user".into(),
                on_missing: None
            }
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (
                r#"{"backend": {"cluster": ""}, "routes": []}"#,
                "backend.cluster",
            ),
            (
                r#"{"backend": {"cluster": "c", "timeout_ms": 0}, "routes": []}"#,
                "backend.timeout_ms",
            ),
            (
                r#"{"backend": {"cluster": "c", "timeout_ms": "x"}, "routes": []}"#,
                "backend.timeout_ms",
            ),
            (r#"{"backend": {"cluster": "c"}, "routes": []}"#, "routes"),
            (
                r#"{"backend": {"cluster": "c"}, "failure_mode": "maybe", "routes": []}"#,
                "failure_mode",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "failure_status": 200, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
                "failure_status",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "grpc_denied_status": 0, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
                "grpc_denied_status",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "grpc_denied_status": 17, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
                "grpc_denied_status",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "grpc_denied_status": -1, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
                "grpc_denied_status",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "grpc_denied_status": "8", "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
                "grpc_denied_status",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a b", "key": {"source": "path"}}]}"#,
                "routes[0].action",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "path"}, "quantity": 0}]}"#,
                "routes[0].quantity",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "header", "name": "a b"}}]}"#,
                "routes[0].key.name",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "constant", "value": ""}}]}"#,
                "routes[0].key.value",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "match": {"method": "get"}, "key": {"source": "path"}}]}"#,
                "routes[0].match.method",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "match": {"path_prefix": "api"}, "key": {"source": "path"}}]}"#,
                "routes[0].match.path_prefix",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "denial_cache": {"slots": 0}, "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
                "denial_cache.slots",
            ),
            (
                r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "path", "on_missing": {"source": "path", "on_missing": {"source": "path", "on_missing": {"source": "path", "on_missing": {"source": "path"}}}}}}]}"#,
                "routes[0].key.on_missing.on_missing.on_missing.on_missing",
            ),
        ];
        for (json, field) in cases {
            let err = parse(json).unwrap_err();
            assert_eq!(err.field, field, "{json} -> {err}");
        }
    }

    #[test]
    fn protocol_grpc_names_the_cluster_in_a_grpc_service() {
        let c = parse(
            r#"{"backend": {"cluster": "sluice_rls", "protocol": "grpc"},
            "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
        )
        .unwrap();
        assert_eq!(c.backend.protocol, Protocol::Grpc);
        // GrpcService { envoy_grpc (1) { cluster_name (1), authority (2) } }
        let mut want = vec![0x0a, 2 + 10 + 2 + 14, 0x0a, 10];
        want.extend(b"sluice_rls");
        want.extend([0x12, 14]);
        want.extend(b"sluice-backend");
        assert_eq!(c.backend.grpc_service.as_bytes(), want);
    }

    #[test]
    fn bad_protocols_and_long_grpc_names_are_refused() {
        let err = parse(
            r#"{"backend": {"cluster": "c", "protocol": "h3"},
            "routes": [{"action": "a", "key": {"source": "path"}}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.field, "backend.protocol", "{err}");
        assert!(
            err.reason.contains("`http`, `grpc`, `grpc_stream`"),
            "{err}"
        );
        let long = "c".repeat(MAX_GRPC_NAME + 1);
        for (field, backend) in [
            (
                "backend.cluster",
                format!(r#"{{"cluster": "{long}", "protocol": "grpc"}}"#),
            ),
            (
                "backend.authority",
                format!(r#"{{"cluster": "c", "authority": "{long}", "protocol": "grpc"}}"#),
            ),
            (
                "backend.cluster",
                format!(r#"{{"cluster": "{long}", "protocol": "grpc_stream"}}"#),
            ),
        ] {
            let json = format!(
                r#"{{"backend": {backend}, "routes": [{{"action": "a", "key": {{"source": "path"}}}}]}}"#
            );
            assert_eq!(parse(&json).unwrap_err().field, field);
        }
        // The same names are fine over HTTP.
        let json = format!(
            r#"{{"backend": {{"cluster": "{long}", "protocol": "http"}}, "routes": [{{"action": "a", "key": {{"source": "path"}}}}]}}"#
        );
        assert!(parse(&json).is_ok());
        let mid = "é".repeat(MAX_GRPC_NAME / 2);
        let json = format!(
            r#"{{"backend": {{"cluster": "{mid}", "authority": "{mid}", "protocol": "grpc"}}, "routes": [{{"action": "a", "key": {{"source": "path"}}}}]}}"#
        );
        let c = parse(&json).unwrap();
        assert!(c.backend.grpc_service.contains(&mid));
    }

    #[test]
    fn unknown_fields_are_refused_with_their_name() {
        let err =
            parse(r#"{"backend": {"cluster": "c", "timeout": 5}, "routes": []}"#).unwrap_err();
        assert!(err.to_string().contains("timeout"), "{err}");
        let err = parse(r#"{"backend": {"cluster": "c"}, "routs": []}"#).unwrap_err();
        assert!(err.to_string().contains("routs"), "{err}");
    }

    #[test]
    fn not_json_is_refused() {
        let err = parse("nope").unwrap_err();
        assert_eq!(err.field, "(root)");
    }

    #[test]
    fn fallback_chain_parses() {
        let c = parse(
            r#"{"backend": {"cluster": "c"}, "routes": [{"action": "a",
            "key": {"source": "header", "name": "x-user", "on_missing": {"source": "client_ip",
            "on_missing": {"source": "constant", "value": "nobody"}}}}]}"#,
        )
        .unwrap();
        let KeySource::Header {
            on_missing: Some(next),
            ..
        } = &c.routes[0].key
        else {
            panic!()
        };
        assert!(matches!(
            **next,
            KeySource::ClientIp {
                on_missing: Some(_)
            }
        ));
    }
}
