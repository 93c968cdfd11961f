//! One user's view: `GET /v1/keys?key=K` (where K stands on every action, consuming nothing) and
//! `GET /v1/top-denied` (the keys denied most per action over the last 5 minutes). Both behind
//! the admin token: they reveal who is being limited.

use serde::{Deserialize, Serialize};

use crate::rule::{Algorithm, Mode};

/// How far back `GET /v1/top-denied` counts: 5 minutes.
pub const TOP_DENIED_SPAN_MS: u64 = 300_000;
/// Most keys `GET /v1/top-denied` lists per action.
pub const TOP_DENIED_KEYS: usize = 10;

/// `GET /v1/keys?key=K` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyView {
    /// The key asked about (untrusted text: render it as text only).
    pub key: String,
    /// When the states were read, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// One entry per action that has a rule (sorted by action).
    pub actions: Vec<KeyActionState>,
}

/// Where one key stands under one action's rule, as a quantity-0 peek would say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyActionState {
    /// The action.
    pub action: String,
    /// Its rule's algorithm.
    pub algorithm: Algorithm,
    /// Its rule's mode.
    pub mode: Mode,
    /// Its rule's capacity.
    pub capacity: u64,
    /// How full the key's funnel is, in requests.
    pub level: f64,
    /// Requests of quantity 1 that could pass now.
    pub remaining: u64,
    /// Milliseconds until a request of quantity 1 would pass; null if one would pass now.
    pub retry_after_ms: Option<u64>,
    /// Milliseconds until the key is idle again.
    pub reset_after_ms: u64,
    /// When any replica last saw the key under this action, in milliseconds since the Unix
    /// epoch; null if not among the recently active keys.
    pub last_seen_ms: Option<u64>,
    /// Whether a per-key override applies to this key under this action (the algorithm,
    /// capacity and mode above are then the override's, not the action's rule's).
    #[serde(default)]
    pub overridden: bool,
    /// The backend's denials of the key under the action, per minute over the last 5–6 minutes
    /// (the top-denied buckets), oldest first, minutes without a denial left out: when it
    /// started being denied and whether it still is. The filters' cached denials carry no key
    /// and are not here.
    #[serde(default)]
    pub denied_minutes: Vec<DeniedMinute>,
    /// The key's cost budget beyond its level: reservations still waiting for their commit, and
    /// what commits debited beyond their reservations (docs/cost-budgets.md, "The dashboard").
    #[serde(default)]
    pub budget: KeyBudget,
}

/// One key's cost-budget figures under one action, read from its budget record: the reservations in
/// flight (allowed throttle requests that carried a `reservation_id` and whose commit has not
/// arrived) and the commits' debits beyond their reservations in the current budget
/// ([`crate::budget`] says what "current" is per algorithm). All zero for a key that never
/// reserved or committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyBudget {
    /// Units of the reservations in flight: allowed, not yet committed, made within the last
    /// 10 minutes (a reservation never committed, its request reset or its usage missing,
    /// stops counting then; its units stay debited). Already part of `level`.
    #[serde(default)]
    pub reserved_in_flight: u64,
    /// How many reservations those are (at most 1024 are recorded per key: at 1024 the figures are
    /// a lower bound).
    #[serde(default)]
    pub reservations_in_flight: u64,
    /// Units committed beyond the budget in its current window: the part of the debits
    /// (actual − reserved) that did not fit, admitted over the limit and carried as debt (the
    /// commit's `overshoot`, summed; `debt` is what of it is still owed).
    #[serde(default)]
    pub overshoot: u64,
    /// Units committed beyond their reservations in the same span (actual − reserved, summed;
    /// `overshoot` is the part of it that did not fit).
    #[serde(default)]
    pub debited: u64,
    /// Units the budget is spent above its size now: debits that did not fit, carried as debt
    /// (docs/cost-budgets.md, "Overshoot is carried as debt"). While it is above 0 nothing is
    /// left (`remaining` is 0) until the limit has paid it back: a meter drains it at its rate
    /// (rounded up to whole units here), a fixed window's ends with the window, a sliding
    /// window's and a sliding log's as their counted units age out. Read from the key's state,
    /// so it is the same whatever commits made it.
    #[serde(default)]
    pub debt: u64,
    /// When `overshoot` and `debited` stop counting (ms since the epoch: the fixed window's end,
    /// or when the budget is surely whole again); null when they are 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overshoot_until_ms: Option<u64>,
}

/// One key's backend denials in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeniedMinute {
    /// Start of the minute, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Denials in it.
    pub denied: u64,
}

/// `GET /v1/top-denied` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopDeniedBody {
    /// When the counts were read, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The span counted, in milliseconds (300000).
    pub span_ms: u64,
    /// One entry per action with any denial in the span (sorted by action).
    pub actions: Vec<ActionTopDenied>,
}

/// The keys one action denied most.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionTopDenied {
    /// The action.
    pub action: String,
    /// Most denied first, at most 10.
    pub keys: Vec<DeniedKey>,
}

/// One key and how often the backend denied it in the span.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeniedKey {
    /// The key (untrusted text: render it as text only).
    pub key: String,
    /// Denials by the backend (the filter's cached denials carry no key).
    pub denied: u64,
}
