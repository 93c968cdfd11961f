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
}
