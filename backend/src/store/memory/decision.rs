//! Decisions in the memory store: core's transitions on the sharded state map, at the store's
//! clock.

use async_trait::async_trait;
use sluice_core::cell::CellArgs;
use sluice_core::{Decision, Lease, Leased, Params, Rule};

use super::slot::{cell_slot, rule_slot};
use super::MemoryStore;
use crate::store::{AllOutcome, CheckRequest, DecisionStore, StoreError};

/// The state name of `key` under `rule`.
fn slot_of(rule: &Rule, key: &str) -> String {
    rule_slot(rule.action(), rule.algorithm(), key)
}

#[async_trait]
impl DecisionStore for MemoryStore {
    async fn throttle_leased(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        lease: Option<Lease>,
    ) -> Result<Leased, StoreError> {
        let now = self.now();
        Ok(self
            .states
            .decide_leased(&slot_of(rule, key), rule.params(), now, quantity, lease))
    }

    async fn throttle_all(&self, checks: &[CheckRequest<'_>]) -> Result<AllOutcome, StoreError> {
        let now = self.now();
        let (names, planned) = crate::store::all::plan(checks, slot_of);
        let decided = self.states.decide_all(&names, &planned, now);
        Ok(AllOutcome {
            decisions: decided.decisions,
            denied: decided.denied,
            unrefunded: 0,
        })
    }

    async fn cell_throttle(&self, key: &str, args: CellArgs) -> Result<Decision, StoreError> {
        let now = self.now();
        Ok(self.states.decide(
            &cell_slot(key),
            Params::Gcra(args.params),
            now,
            args.quantity,
        ))
    }

    async fn peek_many(&self, rule: &Rule, keys: &[String]) -> Result<Vec<Decision>, StoreError> {
        let now = self.now();
        let params = rule.params();
        Ok(keys
            .iter()
            .map(|key| self.states.decide(&slot_of(rule, key), params, now, 0))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::Nanos;

    use super::*;
    use crate::store::ManualClock;

    const B: Nanos = 1_700_000_040_000_000_000;

    #[tokio::test]
    async fn peeks_never_take_room() {
        let clock = ManualClock::new(B);
        let store = MemoryStore::with_max_keys(1).with_clock(clock);
        let r = Rule::from_json_str(
            r#"{"action":"a","algorithm":"gcra","capacity":2,"rate":{"count":1,"period":"1h"}}"#,
        )
        .expect("valid rule");
        store.throttle(&r, "held", 1).await.expect("memory");
        let keys: Vec<String> = (0..100).map(|i| format!("peek{i}")).collect();
        store.peek_many(&r, &keys).await.expect("memory");
        assert_eq!(store.state_count(), 1);
        assert_eq!(store.evictions(), 0);
        let d = store.throttle(&r, "held", 1).await.expect("memory");
        assert_eq!(d.remaining, 0, "the held key kept its state");
    }
}
