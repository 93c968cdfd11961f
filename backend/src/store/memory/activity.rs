//! Recent activity per action for the memory store: the newest keys with their counts, trimmed
//! to a fixed number per action so memory stays bounded.

use async_trait::async_trait;
use sluice_core::Action;

use super::MemoryStore;
use crate::store::{Activity, ActivityStore, StoreError};

pub(super) mod state;
pub(super) mod touched;

#[async_trait]
impl ActivityStore for MemoryStore {
    async fn record_activity(&self, batch: &[Activity]) -> Result<(), StoreError> {
        self.activity.record(batch);
        Ok(())
    }

    async fn recent_activity(
        &self,
        action: &Action,
        limit: usize,
    ) -> Result<Vec<Activity>, StoreError> {
        Ok(self.activity.recent(action, limit))
    }

    async fn key_last_seen(&self, action: &Action, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.activity.last_seen(action, key))
    }

    async fn touch_actions(&self, actions: &[Action], at_ms: u64) -> Result<(), StoreError> {
        self.touched.touch(actions, at_ms);
        Ok(())
    }

    async fn touched_actions(&self, since_ms: u64) -> Result<Vec<Action>, StoreError> {
        Ok(self.touched.since(since_ms))
    }
}
