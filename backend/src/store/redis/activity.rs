//! Recent activity in Redis: per action, a zset of keys by last seen (ms) and a hash of their
//! counts, `activity_record.lua` keeping the newest [`ACTIVITY_KEEP`] with a TTL of
//! [`ACTIVITY_TTL_MS`], so a key spray cannot grow them.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sluice_core::Action;

use super::errors::parse_u64;
use super::keys::{ACTIVITY_TTL_MS, TOUCHED_TTL_MS};
use super::RedisStore;
use crate::store::{Activity, ActivityStore, StoreError, ACTIVITY_KEEP, TOUCHED_KEEP};

#[async_trait]
impl ActivityStore for RedisStore {
    async fn record_activity(&self, batch: &[Activity]) -> Result<(), StoreError> {
        let mut by_action: BTreeMap<&Action, Vec<&Activity>> = BTreeMap::new();
        for item in batch {
            by_action.entry(&item.action).or_default().push(item);
        }
        let calls = by_action.into_iter().map(|(action, items)| {
            let [recent, counts] = self.keys.activity(action);
            let mut conn = self.conn.clone();
            async move {
                let mut invocation = self.scripts.activity_record.key(&recent);
                invocation
                    .key(&counts)
                    .arg(ACTIVITY_KEEP)
                    .arg(ACTIVITY_TTL_MS);
                for item in items {
                    invocation
                        .arg(&item.key)
                        .arg(item.last_seen_ms)
                        .arg(item.allowed)
                        .arg(item.denied);
                }
                invocation.invoke_async::<i64>(&mut conn).await
            }
        });
        self.batch("activity", "activity_record", calls).await
    }
    async fn recent_activity(
        &self,
        action: &Action,
        limit: usize,
    ) -> Result<Vec<Activity>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let [recent, counts] = self.keys.activity(action);
        let flat: Vec<String> = self
            .script(
                &recent,
                "activity_recent",
                self.scripts
                    .activity_recent
                    .key(&recent)
                    .key(&counts)
                    .arg(limit),
            )
            .await?;
        flat.chunks(4)
            .map(|row| {
                let [key, last, allowed, denied] = row else {
                    return Err(StoreError::Corrupt(format!("{recent}: short activity row")));
                };
                let last_seen_ms = last
                    .parse::<f64>()
                    .map_err(|_| StoreError::Corrupt(format!("{recent}: score {last:?}")))?;
                Ok(Activity {
                    action: action.clone(),
                    key: key.clone(),
                    last_seen_ms: last_seen_ms as u64,
                    allowed: parse_u64(allowed, &counts)?,
                    denied: parse_u64(denied, &counts)?,
                })
            })
            .collect()
    }

    /// The key's score in the action's recent zset.
    async fn key_last_seen(&self, action: &Action, key: &str) -> Result<Option<u64>, StoreError> {
        let [recent, _] = self.keys.activity(action);
        let score: Option<String> = self
            .command(&recent, redis::cmd("ZSCORE").arg(&recent).arg(key))
            .await?;
        score
            .map(|s| {
                s.parse::<f64>()
                    .map(|ms| ms as u64)
                    .map_err(|_| StoreError::Corrupt(format!("{recent}: score {s:?}")))
            })
            .transpose()
    }

    async fn touch_actions(&self, actions: &[Action], at_ms: u64) -> Result<(), StoreError> {
        if actions.is_empty() {
            return Ok(());
        }
        let key = self.keys.touched();
        let mut invocation = self.scripts.actions_touch.key(&key);
        invocation.arg(at_ms).arg(TOUCHED_KEEP).arg(TOUCHED_TTL_MS);
        for action in actions {
            invocation.arg(action.as_str());
        }
        self.script::<i64>(&key, "actions_touch", &invocation)
            .await
            .map(|_| ())
    }

    async fn touched_actions(&self, since_ms: u64) -> Result<Vec<Action>, StoreError> {
        let key = self.keys.touched();
        let names: Vec<String> = self
            .command(
                &key,
                redis::cmd("ZRANGEBYSCORE")
                    .arg(&key)
                    .arg(since_ms)
                    .arg("+inf"),
            )
            .await?;
        // A name that is no action (written by something else) is skipped, not fatal: the
        // index only narrows what a view reads.
        Ok(names
            .iter()
            .filter_map(|name| Action::parse(name).ok())
            .collect())
    }
}
