//! The Redis store's health: Redis's memory settings and eviction count, read at connect and
//! every [`HEALTH_INTERVAL`] by a task the store owns, kept as a snapshot so that
//! `HealthStore::health()` (read by `/readyz` and every levels snapshot) costs no round trip.
//!
//! Each reading asks every node that holds data (the one node, or every Cluster master) for
//! `CONFIG GET maxmemory*` and `INFO stats`; [`super::sizing`] judges the answers. A warning is
//! logged at WARN when it appears and at INFO when it clears, never once per reading. A reading
//! that fails (Redis down, a timeout) keeps the last snapshot: outages are reported elsewhere,
//! and a warning must not flap because one probe was lost.

use async_trait::async_trait;
use sluice_core::wire::StoreHealth;

use super::RedisStore;
use crate::store::{HealthStore, StoreError};

pub(super) mod state;

/// The store's kind, ping, health and master.
#[async_trait]
impl HealthStore for RedisStore {
    fn kind(&self) -> &'static str {
        self.conn.kind()
    }

    /// On a Cluster, every slot range's master must answer (see `topology/cluster.rs`);
    /// elsewhere, a PING to the one node.
    async fn ping(&self) -> Result<(), StoreError> {
        if let Some(ready) = self.conn.cluster_ready(self.timeout).await {
            return ready;
        }
        let _: String = self.command("PING", &redis::cmd("PING")).await?;
        Ok(())
    }

    /// The last reading of Redis's memory settings (no round trip: see
    /// [`RedisStore::refresh_health`]).
    fn health(&self) -> StoreHealth {
        self.health.get()
    }

    /// With Sentinel, the master the sentinels name now (no round trip).
    fn master(&self) -> Option<String> {
        self.conn
            .sentinel_master()
            .map(|(name, address)| format!("{name} at {address}"))
    }
}
