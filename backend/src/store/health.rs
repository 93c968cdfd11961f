//! What identifies and probes a store: its kind, a ping, its health report, its master.

use async_trait::async_trait;
use sluice_core::wire::StoreHealth;

use super::error::StoreError;

/// For `/readyz`, the latency probe and the store metrics.
#[async_trait]
pub trait HealthStore: Send + Sync + 'static {
    /// A short name for logs and `/readyz`: "memory", "redis", "redis-cluster".
    fn kind(&self) -> &'static str;

    /// Whether the store answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;

    /// How the store stands: room left, evictions, settings that let a key spray switch limiting
    /// off. Cheap (no store round trip): stores refresh what they report in the background.
    fn health(&self) -> StoreHealth {
        StoreHealth {
            kind: self.kind().to_owned(),
            ..StoreHealth::default()
        }
    }

    /// Where writes go now, when that can change while running: with Redis Sentinel, the master
    /// the sentinels name (`mymaster at 10.0.0.5:6379`), for `/readyz`. `None` for stores whose
    /// address is configured.
    fn master(&self) -> Option<String> {
        None
    }
}
