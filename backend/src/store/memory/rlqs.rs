//! RLQS share records for the memory store: trivial. The memory store serves one process, the
//! only replica, and its state dies with it, so there are no other replicas to count and no
//! orphans to take over: a sync answers the whole rule (the part of a replica alone) and keeps
//! nothing.

use async_trait::async_trait;
use sluice_core::time::NANOS_PER_MILLI;

use super::MemoryStore;
use crate::store::rlqs::{
    ceiling, IndexTouch, ShareKey, ShareRecord, ShareStore, ShareSync, ShareView, StaleKeys,
};
use crate::store::StoreError;

#[async_trait]
impl ShareStore for MemoryStore {
    async fn sync_shares(
        &self,
        _: &ShareKey,
        sync: &ShareSync<'_>,
    ) -> Result<ShareView, StoreError> {
        let held = sync.mine != ShareRecord::default();
        Ok(ShareView {
            now_ms: self.now() / NANOS_PER_MILLI,
            ceiling: ceiling(sync.rule, sync.mine.holders, ShareRecord::default()),
            others: ShareRecord::default(),
            live: u32::from(held),
            orphans: Vec::new(),
        })
    }

    async fn touch_share_keys(&self, _: &IndexTouch<'_>) -> Result<StaleKeys, StoreError> {
        Ok(StaleKeys {
            now_ms: self.now() / NANOS_PER_MILLI,
            keys: Vec::new(),
        })
    }
}
