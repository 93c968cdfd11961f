//! Where the RLQS shares of every backend replica meet ([`ShareStore`]), so that replicas on one
//! Redis split a key's rule together, and a share whose replica stopped (crashed, restarted) is
//! still paid for until the Envoy holding it lets it expire.
//!
//! Per (action, key) the store keeps one record per replica holding it ([`ShareRecord`]: its
//! holders, the bursts and rates it has handed out, when its last share expires, and when it was
//! last paid for). Each replica syncs each key it holds once per ledger tick
//! ([`ShareStore::sync_shares`]): one atomic step writes its record, reads the others', and
//! takes over the records of replicas that stopped paying ([`Orphan`]: one claimer only). An
//! index of the keys holding records ([`ShareStore::touch_share_keys`]) lets a replica find
//! orphans of keys it does not hold itself.
//!
//! Times here are the store's wall-clock milliseconds (Redis `TIME`, or the store's clock), the
//! one clock every replica shares; in-process timing stays on [`std::time::Instant`].

use async_trait::async_trait;
use sluice_core::rlqs::shape::Shape;
use sluice_core::Action;

use super::error::StoreError;

/// What one replica holds of one key, as written to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShareRecord {
    /// Envoy buckets (shares) holding the key on that replica, closed streams' included.
    pub holders: u32,
    /// Σ `max_tokens` of those shares and of the orphans it took over.
    pub burst: u32,
    /// Σ `tokens_per_fill` paid for (a lowering in flight counts its old rate), per
    /// `fill_interval_s`.
    pub tokens_per_fill: u32,
    /// The fill interval `tokens_per_fill` is per, in whole seconds (≥ 1).
    pub fill_interval_s: u32,
}

/// One replica's sync of one key.
#[derive(Debug, Clone, Copy)]
pub struct ShareSync<'a> {
    /// This replica's id (a new one per process start).
    pub instance: &'a str,
    /// The rule's token bucket for all Envoys together.
    pub rule: Shape,
    /// What this replica holds now (its floor: recorded even above its ceiling).
    pub mine: ShareRecord,
    /// Milliseconds from now until this replica's last share of the key expires.
    pub expires_in_ms: u64,
    /// A record not paid for this long is an orphan.
    pub stale_ms: u64,
}

/// A record of a replica that stopped paying, taken over by the caller: it pays its refill
/// from `paid_ms` until `expires_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The stopped replica's id.
    pub instance: String,
    /// What it held.
    pub record: ShareRecord,
    /// When its shares' refill was last paid for (store ms).
    pub paid_ms: u64,
    /// When its last share expires in Envoy (store ms).
    pub expires_ms: u64,
}

/// The answer of a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareView {
    /// The store's time of the sync, in ms.
    pub now_ms: u64,
    /// What this replica may hold in all (its holders' part of the rule, within what the other
    /// replicas hold): burst and rate on the rule's fill interval.
    pub ceiling: Shape,
    /// The other live replicas together, rate on the rule's fill interval.
    pub others: ShareRecord,
    /// Records left after the sync (this replica's included): 0 means the key holds no share.
    pub live: u32,
    /// Records this sync took over (no other replica got them).
    pub orphans: Vec<Orphan>,
}

/// One entry of the index of keys holding records.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareKey {
    /// The rule's action.
    pub action: Action,
    /// The key.
    pub key: String,
}

/// The index's answer: the store's time and keys no replica has synced for `stale_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StaleKeys {
    /// The store's time, in ms.
    pub now_ms: u64,
    /// Keys whose records may be orphans (at most the limit asked for).
    pub keys: Vec<ShareKey>,
}

/// The replicas' shares, kept beside the keys' state.
#[async_trait]
pub trait ShareStore: Send + Sync + 'static {
    /// Writes this replica's record of `key` (deleted when it holds nothing), drops expired
    /// records, takes over the records not paid for `stale_ms` (atomically: one claimer), and
    /// returns the others and this replica's ceiling.
    async fn sync_shares(
        &self,
        key: &ShareKey,
        sync: &ShareSync<'_>,
    ) -> Result<ShareView, StoreError>;

    /// Marks `touch.held` as synced now, drops `touch.empty` (keys found holding no record)
    /// unless someone synced them since, and returns up to `touch.limit` keys nobody synced for
    /// `touch.stale_ms`.
    async fn touch_share_keys(&self, touch: &IndexTouch<'_>) -> Result<StaleKeys, StoreError>;
}

/// One replica's touch of the index of keys holding records.
#[derive(Debug, Clone, Copy)]
pub struct IndexTouch<'a> {
    /// Keys this replica holds a record of: marked synced now.
    pub held: &'a [ShareKey],
    /// Keys found holding no record: dropped unless synced within `stale_ms`.
    pub empty: &'a [ShareKey],
    /// A key not synced for this long may hold orphans.
    pub stale_ms: u64,
    /// Most stale keys returned.
    pub limit: usize,
}

/// The part of `rule` a replica with `holders` of all `holders + others.holders` may hold,
/// within what the others hold (`others` on the rule's fill interval): the rule of the Lua
/// twin `rlqs_shares.lua`.
pub fn ceiling(rule: Shape, holders: u32, others: ShareRecord) -> Shape {
    let all = u64::from(holders) + u64::from(others.holders);
    let part = |v: u32, taken: u32| -> u32 {
        let fair = (u64::from(v) * u64::from(holders))
            .checked_div(all)
            .unwrap_or(0);
        let left = u64::from(v.saturating_sub(taken));
        u32::try_from(fair.min(left)).unwrap_or(u32::MAX)
    };
    Shape {
        max_tokens: part(rule.max_tokens, others.burst),
        tokens_per_fill: part(rule.tokens_per_fill, others.tokens_per_fill),
        fill_interval_s: rule.fill_interval_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Shape = Shape {
        max_tokens: 20,
        tokens_per_fill: 10,
        fill_interval_s: 1,
    };

    #[test]
    fn alone_a_replica_gets_the_whole_rule() {
        assert_eq!(ceiling(RULE, 3, ShareRecord::default()), RULE);
    }

    #[test]
    fn a_replica_gets_its_holders_part_within_what_the_others_hold() {
        let others = ShareRecord {
            holders: 1,
            burst: 20,
            tokens_per_fill: 10,
            fill_interval_s: 1,
        };
        // Its fair part is half, but the other still holds everything: nothing yet.
        assert_eq!(ceiling(RULE, 1, others).tokens_per_fill, 0);
        let lowered = ShareRecord {
            burst: 10,
            tokens_per_fill: 5,
            ..others
        };
        assert_eq!(
            ceiling(RULE, 1, lowered),
            Shape {
                max_tokens: 10,
                tokens_per_fill: 5,
                fill_interval_s: 1
            }
        );
        // Two of three holders: two thirds, rounded down, so the parts never sum past the rule.
        let one = ShareRecord {
            holders: 1,
            ..ShareRecord::default()
        };
        let c = ceiling(RULE, 2, one);
        assert_eq!((c.max_tokens, c.tokens_per_fill), (13, 6));
        assert_eq!(ceiling(RULE, 0, one).tokens_per_fill, 0);
    }
}
