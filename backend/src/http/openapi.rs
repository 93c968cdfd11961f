//! The OpenAPI document, generated from the handlers' annotations. The body schemas below
//! describe sluice-core's wire types (core stays free of utoipa); a test holds each schema's
//! properties to the fields the real type serializes.
#![allow(dead_code)]

use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::{admin, decision, events, probes};
use crate::levels::{ActionLevels, KeyLevel, LevelsBody};

/// `POST /v1/throttle` request.
#[derive(Serialize, ToSchema)]
#[schema(as = ThrottleRequest)]
pub struct ThrottleRequestDoc {
    /// The action whose rule applies: 1–64 of `[A-Za-z0-9_.:-]`.
    #[schema(example = "reply")]
    action: String,
    /// The subject (user, IP, ...). Any string, including empty.
    #[schema(example = "laoqian")]
    key: String,
    /// Units this request costs (default 1, at most 1000000000); 0 peeks without changing state.
    #[schema(default = 1, maximum = 1_000_000_000)]
    quantity: Option<u64>,
}

/// `POST /v1/throttle` response.
#[derive(Serialize, ToSchema)]
#[schema(as = ThrottleResponse)]
pub struct ThrottleResponseDoc {
    /// Whether the request may pass: false only for a denial under an enforced rule.
    allowed: bool,
    /// Echo of the action.
    action: String,
    /// Echo of the key.
    key: String,
    /// The rule's algorithm.
    algorithm: AlgorithmDoc,
    /// The rule's mode.
    mode: ModeDoc,
    /// Capacity, as the limit headers report it.
    limit: u64,
    /// Requests of quantity 1 that could pass right now.
    remaining: u64,
    /// After a denial, milliseconds until the same request would pass (rounded up); else null.
    retry_after_ms: Option<u64>,
    /// Milliseconds until the key is idle again (rounded up).
    reset_after_ms: u64,
    /// Funnel level in requests.
    level: f64,
    /// Funnel size in requests.
    capacity: u64,
    /// The span of the quota policy in milliseconds (the window, or a full funnel's drain time).
    window_ms: u64,
    /// In shadow mode: whether the rule would have denied this request.
    would_deny: bool,
}

/// `POST /v1/cl.throttle` request: redis-cell's `CL.THROTTLE key max_burst count period [quantity]`.
#[derive(Serialize, ToSchema)]
#[schema(as = ClThrottleRequest)]
pub struct ClThrottleRequestDoc {
    /// The key.
    key: String,
    /// Burst beyond the first request (capacity − 1).
    max_burst: u64,
    /// Requests per period.
    count: u64,
    /// Period in whole seconds.
    period: u64,
    /// Units asked for (default 1).
    #[schema(default = 1)]
    quantity: Option<u64>,
}

/// Error body of every non-2xx answer.
#[derive(Serialize, ToSchema)]
#[schema(as = ApiError)]
pub struct ApiErrorDoc {
    /// Stable code: `invalid_request`, `invalid_rule`, `unknown_action`, `unauthorized`, `not_found`, `method_not_allowed`,
    /// `store_unavailable`, `store_timeout`, `overloaded`, `store_wrong_type`, `store_corrupt`.
    error: String,
    /// The field at fault, when one is (`body` for unreadable JSON).
    field: Option<String>,
    /// What went wrong and how to fix it.
    message: String,
}

/// The six algorithms.
#[derive(Serialize, ToSchema)]
#[schema(as = Algorithm)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmDoc {
    /// Clock-aligned fixed windows.
    FixedWindow,
    /// Exact log of request times (capacity at most 10000).
    SlidingLog,
    /// Two counters, the previous window weighted.
    SlidingWindow,
    /// The funnel: a level leaking continuously.
    LeakyBucket,
    /// redis-cell's GCRA.
    Gcra,
    /// Tokens refilled continuously.
    TokenBucket,
}

/// Enforce denials, or only report them.
#[derive(Serialize, ToSchema)]
#[schema(as = Mode)]
#[serde(rename_all = "snake_case")]
pub enum ModeDoc {
    /// Deny over the limit (default).
    Enforce,
    /// Decide and report, never deny.
    Shadow,
}

/// `count` requests per `period`.
#[derive(Serialize, ToSchema)]
#[schema(as = Rate)]
pub struct RateDoc {
    /// Requests per period, at least 1.
    #[schema(example = 30)]
    count: u64,
    /// A duration: `"500ms"`, `"60s"`, `"5m"`, `"1h"`, `"1d"` (1ms to 7d).
    #[schema(example = "60s")]
    period: String,
}

/// A rule. `rate` for gcra, leaky_bucket and token_bucket; `window` for fixed_window,
/// sliding_log and sliding_window.
#[derive(Serialize, ToSchema)]
#[schema(as = Rule)]
pub struct RuleDoc {
    /// 1–64 of `[A-Za-z0-9_.:-]`. In `PUT /v1/rules/{action}` it may be omitted; if present it
    /// must equal the path's.
    #[schema(example = "reply")]
    action: String,
    /// The algorithm.
    algorithm: AlgorithmDoc,
    /// Requests that may pass back to back from idle (for gcra: redis-cell max_burst + 1).
    #[schema(example = 16, minimum = 1)]
    capacity: u64,
    /// The steady rate of a meter.
    rate: Option<RateDoc>,
    /// The window of a window algorithm, as a duration string.
    #[schema(example = "60s")]
    window: Option<String>,
    /// `enforce` (default) or `shadow`.
    mode: Option<ModeDoc>,
    /// Free text for operators (at most 1024 bytes).
    description: Option<String>,
}

/// `GET /v1/rules` body.
#[derive(Serialize, ToSchema)]
#[schema(as = RulesBody)]
pub struct RulesBodyDoc {
    /// The store's rules version (0 before any rule was stored); changes on every write.
    version: u64,
    /// Every rule, sorted by action.
    rules: Vec<RuleDoc>,
}

/// `POST /v1/session` body.
#[derive(Serialize, ToSchema)]
#[schema(as = SessionRequest)]
pub struct SessionRequestDoc {
    /// The admin token.
    token: String,
}

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("sluice_session"))),
        );
    }
}

/// The document served at `/v1/openapi.json` on both listeners.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "sluice",
        description = "Rate-limit decisions for Envoy (decision listener, default 127.0.0.1:8081: /v1/throttle, /v1/cl.throttle) and rule administration (admin listener, default 127.0.0.1:8080: everything tagged admin, token protected). Probes and this document are on both."
    ),
    paths(
        decision::throttle,
        decision::cl_throttle,
        admin::list_rules,
        admin::get_rule,
        admin::put_rule,
        admin::delete_rule,
        admin::get_levels,
        admin::login,
        admin::logout,
        events::events,
        probes::healthz,
        probes::readyz,
        probes::metrics,
        probes::openapi,
    ),
    components(schemas(
        ThrottleRequestDoc, ThrottleResponseDoc, ClThrottleRequestDoc, ApiErrorDoc, AlgorithmDoc, ModeDoc,
        RateDoc, RuleDoc, RulesBodyDoc, SessionRequestDoc, LevelsBody, ActionLevels, KeyLevel
    )),
    modifiers(&Security),
    tags(
        (name = "decision", description = "Decision listener: what the Envoy filter calls. No token; keep it off the public network."),
        (name = "admin", description = "Admin listener: `Authorization: Bearer <token>` or the `sluice_session` cookie from POST /v1/session."),
        (name = "probes", description = "On both listeners, no token."),
    )
)]
pub struct ApiDoc;
