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

/// How long one replica's turn at the rounding remainder lasts ([`ceiling_with_remainder`]):
/// five ticks, so a turn outlives the lowering and raising it takes to move (a tick or two).
pub const REMAINDER_ROTATE_MS: u64 = 5 * sluice_core::rlqs::TICK_MS;

/// [`ceiling`] with the rounding remainder placed (the rule of `rlqs_shares.lua`): each
/// replica's part is rounded down, so a rule's one token per interval held through two replicas
/// of one holder each would be 0 on both. What the rounded parts leave goes one unit each to the
/// replicas holding the key (`replicas`: id and holders, this one included), in the order of
/// their ids rotated by one every [`REMAINDER_ROTATE_MS`] of store time (`now_ms`), still within
/// what the others hold. Every replica computes the same placement from the same records, so the
/// parts sum to the rule; where they do not (records a tick apart), "within what the others
/// hold" keeps the sum within it.
pub fn ceiling_with_remainder(
    rule: Shape,
    me: &str,
    replicas: &[(&str, u32)],
    others: ShareRecord,
    now_ms: u64,
) -> Shape {
    let mut sorted: Vec<(&str, u32)> = replicas.iter().copied().filter(|r| r.1 > 0).collect();
    sorted.sort_unstable();
    let holders = replicas.iter().find(|r| r.0 == me).map_or(0, |r| r.1);
    let all: u64 = replicas.iter().map(|r| u64::from(r.1)).sum();
    let count = sorted.len() as u64;
    let start = (now_ms / REMAINDER_ROTATE_MS.max(1))
        .checked_rem(count)
        .unwrap_or(0);
    let position = sorted
        .iter()
        .position(|r| r.0 == me)
        .map(|i| (i as u64 + count - start) % count);
    let part = |v: u32, taken: u32| -> u32 {
        let floor = |h: u32| (u64::from(v) * u64::from(h)).checked_div(all).unwrap_or(0);
        let given: u64 = sorted.iter().map(|r| floor(r.1)).sum();
        let extra = match position {
            Some(p) if holders > 0 && p < u64::from(v).saturating_sub(given) => 1,
            _ => 0,
        };
        let left = u64::from(v.saturating_sub(taken));
        u32::try_from((floor(holders) + extra).min(left)).unwrap_or(u32::MAX)
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

    #[test]
    fn the_rounding_remainder_goes_to_one_replica_in_turn() {
        // One token per interval (and a burst of one), two replicas of one holder each: rounded
        // down that was 0 on both. Now one of them holds it, the other in the next turn.
        let one = Shape {
            max_tokens: 1,
            tokens_per_fill: 1,
            fill_interval_s: 60,
        };
        let replicas = [("a", 1), ("b", 1)];
        let free = ShareRecord::default();
        let at = |me, ms| ceiling_with_remainder(one, me, &replicas, free, ms);
        let sum = |ms| {
            let (a, b) = (at("a", ms), at("b", ms));
            (
                a.max_tokens + b.max_tokens,
                a.tokens_per_fill + b.tokens_per_fill,
            )
        };
        assert_eq!(sum(0), (1, 1));
        assert_eq!(at("a", 0).tokens_per_fill, 1);
        assert_eq!(at("b", REMAINDER_ROTATE_MS).tokens_per_fill, 1);
        assert_eq!(at("a", REMAINDER_ROTATE_MS).tokens_per_fill, 0);
        assert_eq!(sum(REMAINDER_ROTATE_MS), (1, 1));
        // Still within what the others hold: a holding its turn's unit, b gets none yet.
        let a_holds = ShareRecord {
            holders: 1,
            burst: 1,
            tokens_per_fill: 1,
            fill_interval_s: 60,
        };
        let b = ceiling_with_remainder(one, "b", &replicas, a_holds, REMAINDER_ROTATE_MS);
        assert_eq!((b.max_tokens, b.tokens_per_fill), (0, 0));
        // Exact parts leave no remainder; a replica holding nothing gets none.
        let r = ceiling_with_remainder(RULE, "a", &replicas, free, 0);
        assert_eq!((r.max_tokens, r.tokens_per_fill), (10, 5));
        let idle = ceiling_with_remainder(one, "c", &[("a", 1), ("c", 0)], free, 0);
        assert_eq!(idle.tokens_per_fill, 0);
        // Two of three holders: 13.3 and 6.6 of 20 leave one unit, placed by turn; the sum is 20.
        let three = [("a", 2), ("b", 1)];
        for ms in [0, REMAINDER_ROTATE_MS] {
            let a = ceiling_with_remainder(RULE, "a", &three, free, ms);
            let b = ceiling_with_remainder(RULE, "b", &three, free, ms);
            assert_eq!(a.max_tokens + b.max_tokens, 20, "{ms}");
            assert_eq!(a.tokens_per_fill + b.tokens_per_fill, 10, "{ms}");
        }
    }
}
