//! The memory store's health: its key count, bound and evictions, and a warning while keys that
//! still held state were evicted within the last minute.

use async_trait::async_trait;
use sluice_core::wire::StoreHealth;
use sluice_core::Nanos;

use super::shards::Totals;
use super::MemoryStore;
use crate::store::{HealthStore, StoreError};

/// How recent a live eviction must be (store time) for [`HealthStore::health`] to warn.
const WARN_WINDOW_NS: Nanos = 60_000_000_000;

/// The health report of a store with `totals` and bound `max_keys`: a warning while keys that
/// still held state were evicted within the last minute (the bound is too small for the traffic,
/// or a spray is under way).
fn health_of(totals: &Totals, max_keys: usize) -> StoreHealth {
    let mut warnings = Vec::new();
    let recent = totals
        .last_live_eviction
        .is_some_and(|at| at.saturating_add(WARN_WINDOW_NS) >= totals.latest);
    if recent {
        warnings.push(format!(
            "memory store at its bound of {max_keys} keys (--max-keys, SLUICE_MAX_KEYS) and \
             evicting keys that still hold state ({} so far): each may pass one extra burst; \
             raise the bound if this is normal traffic, or use Redis",
            totals.live_evictions
        ));
    }
    StoreHealth {
        kind: "memory".to_owned(),
        warnings,
        keys: Some(totals.rows as u64),
        max_keys: Some(max_keys as u64),
        evictions: totals.live_evictions,
    }
}

#[async_trait]
impl HealthStore for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn health(&self) -> StoreHealth {
        health_of(&self.states.totals(), self.states.max_keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{DecisionStore, ManualClock};
    use sluice_core::Rule;

    const S: Nanos = 1_000_000_000;
    const B: Nanos = 1_700_000_040 * S;

    #[tokio::test]
    async fn health_warns_while_live_keys_are_evicted_and_clears_after_a_minute() {
        let clock = ManualClock::new(B);
        let store = MemoryStore::with_max_keys(64).with_clock(clock.clone());
        let r = Rule::from_json_str(
            r#"{"action":"a","algorithm":"fixed_window","capacity":5,"window":"1h"}"#,
        )
        .expect("valid rule");
        store.throttle(&r, "k", 1).await.expect("memory");
        let h = store.health();
        assert_eq!((h.keys, h.max_keys, h.evictions), (Some(1), Some(64), 0));
        assert!(h.warnings.is_empty(), "{:?}", h.warnings);

        // One key per shard: 1,000 keys fill all 64 (a shard missing all of them: p < 1e-5).
        clock.set(B + S);
        for i in 0..1_000 {
            store
                .throttle(&r, &format!("k{i}"), 1)
                .await
                .expect("memory");
        }
        let h = store.health();
        assert_eq!((h.keys, h.evictions), (Some(64), 1_001 - 64));
        assert_eq!(h.warnings.len(), 1);
        assert!(h.warnings[0].contains("--max-keys"), "{}", h.warnings[0]);

        // Two hours on, every held key is back to fresh: a new key replaces one losing nothing,
        // and with no live eviction in the last minute the warning is gone.
        clock.set(B + 7_200 * S);
        store.throttle(&r, "late", 1).await.expect("memory");
        let h = store.health();
        assert_eq!(
            h.evictions,
            1_001 - 64,
            "fresh keys dropped are not evictions"
        );
        assert!(h.warnings.is_empty(), "{:?}", h.warnings);
        assert_eq!(store.peak_keys(), 64);
    }
}
