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

impl StepCounts {
    /// The six counters, `at_ms` left out, in declaration order. The backend keeps a history
    /// step in Redis as these, space separated (`"a l d c p f"`), so this order is a storage
    /// format: reordering it misreads every step already stored.
    pub fn values(&self) -> [u64; 6] {
        [
            self.allowed,
            self.leased,
            self.denied,
            self.cached_denied,
            self.passed_unchecked,
            self.failed,
        ]
    }

    /// Counts from values in [`StepCounts::values`] order, with `at_ms` 0 (a stored step keeps
    /// its start beside its counts; it is set when the step is answered).
    pub fn from_values(v: [u64; 6]) -> StepCounts {
        let [allowed, leased, denied, cached_denied, passed_unchecked, failed] = v;
        StepCounts {
            at_ms: 0,
            allowed,
            leased,
            denied,
            cached_denied,
            passed_unchecked,
            failed,
        }
    }

    /// Adds `other`'s counters, saturating (a counter never wraps); `at_ms` stays this one's.
    pub fn add(&mut self, other: &StepCounts) {
        let (a, b) = (self.values(), other.values());
        *self = StepCounts {
            at_ms: self.at_ms,
            ..StepCounts::from_values(std::array::from_fn(|i| a[i].saturating_add(b[i])))
        };
    }

    /// Whether every counter is zero (`at_ms` aside): such a step need not be stored.
    pub fn is_zero(&self) -> bool {
        self.values().iter().all(|v| *v == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_the_stored_order_and_add_saturates() {
        let mut c = StepCounts::from_values([1, 2, 3, 4, 5, 6]);
        assert_eq!(
            (c.at_ms, c.allowed, c.leased, c.denied, c.cached_denied),
            (0, 1, 2, 3, 4)
        );
        assert_eq!((c.passed_unchecked, c.failed), (5, 6));
        assert_eq!(c.values(), [1, 2, 3, 4, 5, 6]);
        c.at_ms = 10_000;
        c.add(&StepCounts {
            at_ms: 20_000,
            allowed: u64::MAX,
            failed: 1,
            ..StepCounts::default()
        });
        assert_eq!(c.values(), [u64::MAX, 2, 3, 4, 5, 7], "saturates");
        assert_eq!(c.at_ms, 10_000, "keeps its own step");
        assert!(!c.is_zero());
        assert!(StepCounts {
            at_ms: 10_000,
            ..StepCounts::default()
        }
        .is_zero());
    }
}
