//! RLQS share records in Redis ([`ShareStore`]): `rlqs_shares.lua` syncs one replica's record of
//! one key in one step (beside the key's state: same hash tag, one Cluster slot), and
//! `rlqs_index.lua` keeps the index of keys holding records (its own slot), so that a replica
//! finds the orphans of keys it does not hold.
//!
//! Sizes: a key's hash holds one record (~60 bytes) per replica holding the key, and expires
//! [`KEEP_MS`] after its last write; the index holds one member per key with records (removed
//! once found empty) and expires likewise.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;
use sluice_core::rlqs::shape::Shape;
use sluice_core::rlqs::MAX_TTL_S;
use sluice_core::Action;

use super::budget::now_arg;
use super::errors::parse_u64;
use super::scripts::with_now_ms;
use super::RedisStore;
use crate::store::rlqs::REMAINDER_ROTATE_MS;
use crate::store::rlqs::{
    IndexTouch, Orphan, ShareKey, ShareRecord, ShareStore, ShareSync, ShareView, StaleKeys,
};
use crate::store::StoreError;

static SHARES: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/rlqs_shares.lua")));
static INDEX: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/rlqs_index.lua")));

/// A share hash and the index live this long after their last write: longer than any
/// assignment's TTL, so a record outlives the shares it stands for.
pub const KEEP_MS: u64 = 2 * MAX_TTL_S * 1_000;

/// Separates the action from the key in an index member (no action contains it).
const MEMBER_SEP: char = '\n';

fn u32_of(text: &str, key: &str) -> Result<u32, StoreError> {
    u32::try_from(parse_u64(text, key)?)
        .map_err(|_| StoreError::Corrupt(format!("{key}: {text} is no u32")))
}

#[async_trait]
impl ShareStore for RedisStore {
    async fn sync_shares(
        &self,
        key: &ShareKey,
        sync: &ShareSync<'_>,
    ) -> Result<ShareView, StoreError> {
        let hash = self.keys.rlqs_shares(&key.action, &key.key);
        let mut invocation = SHARES.key(&hash);
        invocation
            .arg(now_arg(self.at()))
            .arg(sync.instance)
            .arg(sync.stale_ms)
            .arg(KEEP_MS)
            .arg(sync.rule.max_tokens)
            .arg(sync.rule.tokens_per_fill)
            .arg(sync.rule.fill_interval_s.max(1))
            .arg(sync.mine.holders)
            .arg(sync.mine.burst)
            .arg(sync.mine.tokens_per_fill)
            .arg(sync.mine.fill_interval_s.max(1))
            .arg(sync.expires_in_ms)
            .arg(REMAINDER_ROTATE_MS);
        let reply: Vec<String> = self.script(&hash, "rlqs_shares", &invocation).await?;
        let (head, rest) = reply.split_at_checked(7).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "{hash}: {} values, expected 7 or more",
                reply.len()
            ))
        })?;
        let n = |i: usize| u32_of(&head[i], &hash);
        let orphans = rest
            .chunks(7)
            .map(|o| {
                let [instance, h, b, n, f, exp, paid] = o else {
                    return Err(StoreError::Corrupt(format!("{hash}: short orphan")));
                };
                Ok(Orphan {
                    instance: instance.clone(),
                    record: ShareRecord {
                        holders: u32_of(h, &hash)?,
                        burst: u32_of(b, &hash)?,
                        tokens_per_fill: u32_of(n, &hash)?,
                        fill_interval_s: u32_of(f, &hash)?,
                    },
                    paid_ms: parse_u64(paid, &hash)?,
                    expires_ms: parse_u64(exp, &hash)?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShareView {
            now_ms: parse_u64(&head[0], &hash)?,
            ceiling: Shape {
                max_tokens: n(1)?,
                tokens_per_fill: n(2)?,
                fill_interval_s: sync.rule.fill_interval_s,
            },
            others: ShareRecord {
                holders: n(3)?,
                burst: n(4)?,
                tokens_per_fill: n(5)?,
                fill_interval_s: sync.rule.fill_interval_s,
            },
            live: n(6)?,
            orphans,
        })
    }

    async fn touch_share_keys(&self, touch: &IndexTouch<'_>) -> Result<StaleKeys, StoreError> {
        let index = self.keys.rlqs_index();
        let member = |k: &ShareKey| format!("{}{MEMBER_SEP}{}", k.action.as_str(), k.key);
        let mut invocation = INDEX.key(&index);
        invocation
            .arg(now_arg(self.at()))
            .arg(touch.stale_ms)
            .arg(touch.limit)
            .arg(KEEP_MS)
            .arg(touch.held.len());
        for k in touch.held.iter().chain(touch.empty) {
            invocation.arg(member(k));
        }
        let reply: Vec<String> = self.script(&index, "rlqs_index", &invocation).await?;
        let Some((now, members)) = reply.split_first() else {
            return Err(StoreError::Corrupt(format!("{index}: empty reply")));
        };
        // A member that names no action (written by something else) is skipped: the index only
        // says where to look.
        let keys = members
            .iter()
            .filter_map(|m| {
                let (action, key) = m.split_once(MEMBER_SEP)?;
                Some(ShareKey {
                    action: Action::parse(action).ok()?,
                    key: key.to_owned(),
                })
            })
            .collect();
        Ok(StaleKeys {
            now_ms: parse_u64(now, &index)?,
            keys,
        })
    }
}
