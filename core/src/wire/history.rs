//! `GET /v1/history`: what happened to each action over the last hour, in 10-second steps, kept
//! in the store so every replica answers the same.

use serde::{Deserialize, Serialize};

/// Width of one history step: 10 seconds.
pub const HISTORY_STEP_MS: u64 = 10_000;
/// How far back history reaches: one hour (360 steps).
pub const HISTORY_SPAN_MS: u64 = 3_600_000;

/// The ranges the dashboard offers, as `GET /v1/history?range=` takes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum HistoryRange {
    /// The last 5 minutes (30 steps).
    #[serde(rename = "5m")]
    FiveMinutes,
    /// The last hour (360 steps).
    #[default]
    #[serde(rename = "1h")]
    OneHour,
}

impl HistoryRange {
    /// The range in milliseconds.
    pub fn millis(self) -> u64 {
        match self {
            HistoryRange::FiveMinutes => 300_000,
            HistoryRange::OneHour => HISTORY_SPAN_MS,
        }
    }
}

/// `GET /v1/history` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryBody {
    /// When the history was read, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Width of one step in milliseconds (10000).
    pub step_ms: u64,
    /// The range answered.
    pub range: HistoryRange,
    /// One entry per action that has a rule (sorted by action).
    pub actions: Vec<ActionHistory>,
}

/// One action's history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionHistory {
    /// The action.
    pub action: String,
    /// When any request for the action last reached the backend or a filter report, in
    /// milliseconds since the Unix epoch; null if never within the last 24 h (likely no route).
    pub last_seen_ms: Option<u64>,
    /// Totals over the range.
    pub totals: StepCounts,
    /// One entry per step, oldest first, every step of the range present (zeros included).
    pub steps: Vec<StepCounts>,
}

/// Requests in one step (or a range's totals), by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepCounts {
    /// Start of the step, in milliseconds since the Unix epoch (0 in totals).
    pub at_ms: u64,
    /// Allowed by the backend (shadow-mode would-denials included).
    pub allowed: u64,
    /// Allowed by a filter from a lease, with no callout.
    pub leased: u64,
    /// Denied by the backend.
    pub denied: u64,
    /// Denied by a filter's denial cache, with no callout.
    pub cached_denied: u64,
    /// Callouts that failed and that the failure mode let through unchecked.
    pub passed_unchecked: u64,
    /// Callouts that failed (timeout or error), whatever the failure mode made of them.
    pub failed: u64,
}
