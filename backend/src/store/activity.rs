//! Live activity: the recent keys of each action and their counts, batched by each replica and
//! flushed every ≤ 250 ms so the dashboard's live view costs no store round trip per decision.
//! Stored with TTLs; losing some is a gap in a view, never a wrong decision.

use async_trait::async_trait;
use sluice_core::Action;

use super::error::StoreError;

/// Recent traffic of one key, as one replica's batch holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// The action.
    pub action: Action,
    /// The key.
    pub key: String,
    /// When the key was last seen, in milliseconds since the epoch.
    pub last_seen_ms: u64,
    /// Requests allowed in this batch.
    pub allowed: u64,
    /// Requests denied in this batch.
    pub denied: u64,
}

/// Keys of recent activity kept per action (by both stores).
pub const ACTIVITY_KEEP: usize = 200;

/// Actions the index of touched actions keeps (by both stores), the most recently touched: far
/// above any rule set a dashboard shows (10,000 rules from a ratelimit configuration directory),
/// and a bound on what a store holds for it (about 50 bytes each in Redis).
pub const TOUCHED_KEEP: usize = 100_000;

/// Recent keys per action.
#[async_trait]
pub trait ActivityStore: Send + Sync + 'static {
    /// Records a batch of recent activity.
    async fn record_activity(&self, batch: &[Activity]) -> Result<(), StoreError>;

    /// The most recently active keys of an action, newest first, with their activity.
    async fn recent_activity(
        &self,
        action: &Action,
        limit: usize,
    ) -> Result<Vec<Activity>, StoreError>;

    /// When `key` was last seen under `action`, if it is among the action's recent keys.
    async fn key_last_seen(&self, action: &Action, key: &str) -> Result<Option<u64>, StoreError>;

    /// Raises the last-touched time of each action to `at_ms` in the index of touched actions
    /// (an action is touched when a decision, a report or a flush wrote anything of it). The
    /// dashboard's per-action views of what is active read only the indexed actions, so with
    /// thousands of rules they cost a read per active action, not one per rule. The index keeps
    /// the [`TOUCHED_KEEP`] most recently touched; in Redis it expires as a whole only after
    /// a year and a day without a touch (a fixed window's state may live a year).
    async fn touch_actions(&self, actions: &[Action], at_ms: u64) -> Result<(), StoreError>;

    /// The indexed actions last touched at or after `since_ms` (0: all of them), in no order.
    async fn touched_actions(&self, since_ms: u64) -> Result<Vec<Action>, StoreError>;
}
