//! Key resets in Redis ([`ResetStore`]): `state_reset.lua` deletes the key's state keys (one per
//! algorithm, one hash tag, so one slot) and its budget records, and writes the marks that make a
//! later commit of a reservation from before the reset change nothing, in one script.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;
use sluice_core::{Action, Algorithm};

use super::budget::now_arg;
use super::scripts::with_now_ms;
use super::RedisStore;
use crate::store::{ResetStore, StoreError};

static RESET: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/state_reset.lua")));

#[async_trait]
impl ResetStore for RedisStore {
    async fn reset_key(&self, action: &Action, key: &str) -> Result<Vec<Algorithm>, StoreError> {
        let keys: Vec<String> = Algorithm::ALL
            .iter()
            .map(|&algorithm| self.keys.state(action, algorithm, key))
            .collect();
        let first = keys.first().cloned().unwrap_or_default();
        let mut invocation = RESET.prepare_invoke();
        for k in &keys {
            invocation.key(k);
        }
        // The marks that make a later commit of a reservation from before the reset change
        // nothing live as long as a commit id's own mark.
        invocation
            .arg(now_arg(self.at()))
            .arg(sluice_core::commit::COMMIT_ID_TTL_MS);
        let removed: Vec<i64> = self.script(&first, "state_reset", &invocation).await?;
        removed
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| Algorithm::ALL.get(i).copied())
                    .ok_or_else(|| StoreError::Script {
                        script: "state_reset",
                        message: format!("returned the index {i}"),
                    })
            })
            .collect()
    }
}
