//! Shares from demand: each Envoy holding a key gets a rate by the requests it reports, so a
//! busy Envoy gets more and an idle one gives its share back, while the rates still sum to the
//! rule's. Bursts stay equal ([`split`]): a burst moved from one Envoy to another would have to
//! be paid again (Envoy keeps a replaced bucket's fill fraction), rates move for free on the
//! next tick.
//!
//! Demand is a client's word, so it is weighed fairly, not as sent ([`fair_demands`]): what the
//! rates serve over one report interval is water-filled among the holders' peers (an Envoy's
//! address and domain), then within each peer among its holders. So a holder reporting absurd
//! demand gets at most an equal share unless the others report less than theirs, and a client
//! that reconnects often (each closed stream's holder lives until its TTL) counts once, however
//! many holders it leaves behind.
//!
//! An idle peer keeps a floor (an equal share's weight over [`IDLE_WEIGHT_DIVISOR`]) so its
//! first requests after a pause are not all denied until its next report (5 s). Demand is
//! smoothed over reports ([`smooth`]) and a share within [`slack`] of its target is left as it
//! is, so noise in the reports does not push a new bucket to every Envoy on every tick.

use std::collections::BTreeMap;

use super::shape::{split, Shape};
use super::ENVOY_REPORT_INTERVAL_S;

/// An idle peer's weight is an equal share's over this: 1/4 of its fair rate stays with it.
pub const IDLE_WEIGHT_DIVISOR: u64 = 4;

/// A share is lowered towards its target only when it is above it by more than the rule's rate
/// over this (unless the shares sum above the rule: then every share above its target is).
pub const SLACK_DIVISOR: u32 = 10;

/// Each holder's target, every holder its own peer: bursts split equally, rates by `demands`
/// (requests per report, smoothed) weighed fairly ([`fair_demands`]: in proportion while they
/// fit what the rates serve), with the idle floor; equal when nobody reports demand. The rates
/// sum to the rule's exactly (largest remainders, ties to the first holders).
pub fn by_demand(total: Shape, demands: &[u64]) -> Vec<Shape> {
    by_demand_turn(total, demands, 0)
}

/// [`by_demand_of`] with every holder its own peer.
pub fn by_demand_turn(total: Shape, demands: &[u64], turn: usize) -> Vec<Shape> {
    let peers: Vec<u64> = (0..demands.len() as u64).collect();
    by_demand_of(total, demands, &peers, turn)
}

/// [`by_demand`] when there may be more holders than burst units (`max_tokens`). An Envoy
/// bucket with `max_tokens` 0 admits nothing, so an equal split would leave the holders past
/// the units denied for as long as they hold the key. Instead each unit goes to one holder:
/// holders reporting demand first, in their order rotated by `turn` (the ledger advances it by
/// the units every [`ROTATE_EVERY_TICKS`] while a holder with demand has none), then idle ones;
/// the rule's rate is split by demand among the holders with a unit, the others get nothing
/// (their target is `DENY_ALL` until their turn). So with d holders reporting demand and b
/// units, each gets a unit at least once every ⌈d / b⌉ rotations.
///
/// `peers[i]` names holder i's peer: holders of one peer share one peer's part of the rate
/// ([`fair_demands`]).
pub fn by_demand_of(total: Shape, demands: &[u64], peers: &[u64], turn: usize) -> Vec<Shape> {
    let units = usize::try_from(total.max_tokens).unwrap_or(usize::MAX);
    if demands.len() <= units {
        return weigh(split(total, demands.len()), total, demands, peers);
    }
    let mut order: Vec<usize> = (0..demands.len()).filter(|i| demands[*i] > 0).collect();
    if !order.is_empty() {
        let by = turn % order.len();
        order.rotate_left(by);
    }
    order.extend((0..demands.len()).filter(|i| demands[*i] == 0));
    order.truncate(units);
    order.sort_unstable();
    let chosen: Vec<u64> = order.iter().map(|i| demands[*i]).collect();
    let chosen_peers: Vec<u64> = order
        .iter()
        .map(|i| peers.get(*i).copied().unwrap_or(u64::MAX - *i as u64))
        .collect();
    let given = weigh(split(total, order.len()), total, &chosen, &chosen_peers);
    let mut shares = vec![
        Shape {
            max_tokens: 0,
            tokens_per_fill: 0,
            fill_interval_s: total.fill_interval_s,
        };
        demands.len()
    ];
    for (i, share) in order.into_iter().zip(given) {
        shares[i] = share;
    }
    shares
}

/// Ticks between two rotations of the burst units when holders outnumber them: one report
/// interval of Envoy's, so each holder's turn lasts at least until its next report.
pub const ROTATE_EVERY_TICKS: u32 = 5;

/// True when a holder reporting demand has no burst unit in `targets`: the units should rotate.
pub fn starving(targets: &[Shape], demands: &[u64]) -> bool {
    targets
        .iter()
        .zip(demands)
        .any(|(t, d)| t.max_tokens == 0 && *d > 0)
}

/// What the rates of `total` serve over one report interval of Envoy's (rounded up): the most
/// demand any split can serve, the supply [`fair_demands`] water-fills.
pub fn serves_per_report(total: Shape) -> u64 {
    let rate = u128::from(total.tokens_per_fill) * u128::from(ENVOY_REPORT_INTERVAL_S);
    let per = u128::from(total.fill_interval_s.max(1));
    u64::try_from(rate.div_ceil(per)).unwrap_or(u64::MAX)
}

/// The level that water-fills `supply` among `needs`: each need up to it is met in full and the
/// rest get the level; `None` when the needs fit (nobody is capped).
fn water_level(needs: &[u64], supply: u64) -> Option<u64> {
    let sum: u128 = needs.iter().map(|d| u128::from(*d)).sum();
    if sum <= u128::from(supply) {
        return None;
    }
    let mut sorted = needs.to_vec();
    sorted.sort_unstable();
    let mut left = u128::from(supply);
    let mut rest = sorted.len() as u128;
    for d in sorted {
        if u128::from(d) * rest <= left {
            left -= u128::from(d);
            rest -= 1;
        } else {
            return Some(u64::try_from(left / rest).unwrap_or(u64::MAX));
        }
    }
    None
}

fn capped(needs: &[u64], supply: u64) -> Vec<u64> {
    match water_level(needs, supply) {
        Some(level) => needs.iter().map(|d| (*d).min(level)).collect(),
        None => needs.to_vec(),
    }
}

/// Each holder's demand as the split weighs it. A report's counts are a client's word, so what
/// the rates serve over one report interval ([`serves_per_report`]) is water-filled: first
/// among the peers (`peers[i]` is holder i's: the demands of one peer's holders add up), then
/// each peer's part among its own holders. No peer is weighed above an equal part of that
/// supply unless others need less than theirs, and when all demand fits, it is weighed as
/// sent. Absurd demand weighs no more than the supply, and a peer's many holders (a client
/// reconnecting: every closed stream's holder stays until its TTL) weigh as one.
pub fn fair_demands(total: Shape, demands: &[u64], peers: &[u64]) -> Vec<u64> {
    let supply = serves_per_report(total);
    let groups = groups(peers);
    let per_peer: Vec<u64> = groups
        .iter()
        .map(|members| {
            members
                .iter()
                .map(|i| demands.get(*i).copied().unwrap_or(0))
                .fold(0u64, u64::saturating_add)
        })
        .collect();
    let parts = capped(&per_peer, supply);
    let mut out = vec![0; demands.len()];
    for (members, part) in groups.iter().zip(parts) {
        let own: Vec<u64> = members
            .iter()
            .map(|i| demands.get(*i).copied().unwrap_or(0))
            .collect();
        for (i, c) in members.iter().zip(capped(&own, part)) {
            out[*i] = c;
        }
    }
    out
}

/// The holders of each peer, by position, peers in order of first appearance.
/// (A map, not a scan: a key may have thousands of holders, and this runs per grant and tick.)
fn groups(peers: &[u64]) -> Vec<Vec<usize>> {
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let g = *index.entry(*p).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
}

/// Scale of the weights, so that a peer's floor divides among its holders with no visible loss.
const WEIGHT_SCALE: u128 = 1 << 32;

/// Rates of `shares` (bursts already set) by the fair demands ([`fair_demands`]), with the idle
/// floor given per peer (split among its holders).
fn weigh(mut shares: Vec<Shape>, total: Shape, demands: &[u64], peers: &[u64]) -> Vec<Shape> {
    if shares.is_empty() {
        return shares;
    }
    let groups = groups(peers);
    let fair = fair_demands(total, demands, peers);
    let sum: u128 = fair.iter().map(|d| u128::from(*d)).sum();
    if sum == 0 && groups.len() == shares.len() {
        return shares;
    }
    let mut of_peer = vec![1u128; shares.len()];
    for members in &groups {
        for i in members {
            of_peer[*i] = members.len() as u128;
        }
    }
    let p = groups.len() as u128;
    let floor = sum.max(1) * WEIGHT_SCALE;
    let weights: Vec<u128> = fair
        .iter()
        .zip(&of_peer)
        .map(|(d, k)| {
            u128::from(*d) * p * u128::from(IDLE_WEIGHT_DIVISOR) * WEIGHT_SCALE + floor / k
        })
        .collect();
    let weight_sum: u128 = weights.iter().sum();
    let rate = u128::from(total.tokens_per_fill);
    let mut given: u128 = 0;
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, (w, share)) in weights.iter().zip(shares.iter_mut()).enumerate() {
        let exact = rate * w;
        let whole = exact / weight_sum;
        share.tokens_per_fill = u32::try_from(whole).unwrap_or(u32::MAX);
        given += whole;
        remainders.push((exact % weight_sum, i));
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let left = usize::try_from(rate.saturating_sub(given)).unwrap_or(usize::MAX);
    for (_, i) in remainders.into_iter().take(left) {
        shares[i].tokens_per_fill = shares[i].tokens_per_fill.saturating_add(1);
    }
    shares
}

/// The demand carried to the next report: the mean of the last estimate and this report's
/// requests (allowed and denied), the report alone for a new bucket.
pub fn smooth(previous: Option<u64>, requests: u64) -> u64 {
    match previous {
        None => requests,
        Some(p) => p / 2 + requests / 2 + (p % 2 + requests % 2) / 2,
    }
}

/// How far above its target a share's rate may stay: none when the rates held sum above the
/// rule's (they must come down), else the rule's rate over [`SLACK_DIVISOR`].
pub fn slack(total: Shape, held_rate_sum: u64) -> u32 {
    if held_rate_sum > u64::from(total.tokens_per_fill) {
        0
    } else {
        total.tokens_per_fill / SLACK_DIVISOR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOTAL: Shape = Shape {
        max_tokens: 20,
        tokens_per_fill: 10,
        fill_interval_s: 1,
    };

    fn rates(demands: &[u64]) -> Vec<u32> {
        by_demand(TOTAL, demands)
            .iter()
            .map(|s| s.tokens_per_fill)
            .collect()
    }

    #[test]
    fn no_demand_is_an_equal_split() {
        assert_eq!(rates(&[0, 0]), vec![5, 5]);
        assert_eq!(by_demand(TOTAL, &[0, 0]), split(TOTAL, 2));
        assert!(by_demand(TOTAL, &[]).is_empty());
    }

    #[test]
    fn a_busy_holder_gets_more_and_an_idle_one_keeps_its_floor() {
        // Weights 100·2·4 + 100 = 900 and 0 + 100: 9 and 1.
        assert_eq!(rates(&[100, 0]), vec![9, 1]);
        assert_eq!(rates(&[0, 100]), vec![1, 9]);
        assert_eq!(rates(&[50, 50]), vec![5, 5]);
        // Weights 30·8+40 = 280 and 10·8+40 = 120: 7 and 3.
        assert_eq!(rates(&[30, 10]), vec![7, 3]);
    }

    #[test]
    fn rates_always_sum_to_the_rule_and_bursts_stay_equal() {
        for demands in [
            vec![1, 2, 3],
            vec![u64::MAX, 0, 7],
            vec![5; 7],
            vec![0, 0, 0, 1],
            vec![1_000_000, 1],
        ] {
            let shares = by_demand(TOTAL, &demands);
            let rate: u32 = shares.iter().map(|s| s.tokens_per_fill).sum();
            let burst: u32 = shares.iter().map(|s| s.max_tokens).sum();
            assert_eq!(rate, TOTAL.tokens_per_fill, "{demands:?}");
            assert_eq!(burst, TOTAL.max_tokens, "{demands:?}");
            let bursts: Vec<u32> = shares.iter().map(|s| s.max_tokens).collect();
            let equal: Vec<u32> = split(TOTAL, demands.len())
                .iter()
                .map(|s| s.max_tokens)
                .collect();
            assert_eq!(bursts, equal);
            assert!(shares.iter().all(|s| s.fill_interval_s == 1));
        }
    }

    #[test]
    fn with_more_holders_than_burst_units_the_units_rotate_among_those_with_demand() {
        // "1 per minute" as a meter: C = 1, so one unit for three Envoys.
        let one = Shape {
            max_tokens: 1,
            tokens_per_fill: 1,
            fill_interval_s: 60,
        };
        let bursts = |demands: &[u64], turn| -> Vec<u32> {
            by_demand_turn(one, demands, turn)
                .iter()
                .map(|s| s.max_tokens)
                .collect()
        };
        // The holder with demand gets it before idle ones.
        assert_eq!(bursts(&[0, 5, 0], 0), vec![0, 1, 0]);
        // Several with demand: it goes round them, turn by turn; the idle one never.
        assert_eq!(bursts(&[3, 0, 4], 0), vec![1, 0, 0]);
        assert_eq!(bursts(&[3, 0, 4], 1), vec![0, 0, 1]);
        assert_eq!(bursts(&[3, 0, 4], 2), vec![1, 0, 0]);
        // Nobody reports demand: the first ones.
        assert_eq!(bursts(&[0, 0, 0], 7), vec![1, 0, 0]);
        for turn in 0..6 {
            let shares = by_demand_turn(one, &[3, 0, 4], turn);
            let b: u32 = shares.iter().map(|s| s.max_tokens).sum();
            let n: u32 = shares.iter().map(|s| s.tokens_per_fill).sum();
            assert_eq!((b, n), (1, 1), "{turn}");
            // The rate goes with the unit: a holder without one could not use it.
            assert!(shares
                .iter()
                .all(|s| s.max_tokens > 0 || s.tokens_per_fill == 0));
            assert!(starving(&shares, &[3, 0, 4]));
            assert!(!starving(&shares, &[0, 0, 4]) || shares[2].max_tokens == 0);
        }
        // Two units, four holders all with demand: every holder within two turns.
        let two = Shape {
            max_tokens: 2,
            ..one
        };
        let mut seen = [false; 4];
        for turn in [0, 2] {
            for (i, s) in by_demand_turn(two, &[1, 1, 1, 1], turn).iter().enumerate() {
                seen[i] |= s.max_tokens > 0;
            }
        }
        assert_eq!(seen, [true; 4]);
        // As many holders as units or fewer: as by_demand.
        assert_eq!(
            by_demand_turn(TOTAL, &[30, 10], 3),
            by_demand(TOTAL, &[30, 10])
        );
    }

    #[test]
    fn absurd_demand_gets_no_more_than_an_equal_share_while_the_others_use_theirs() {
        // The rule serves 50 requests per report interval (10/s over 5 s).
        assert_eq!(serves_per_report(TOTAL), 50);
        assert_eq!(rates(&[u64::MAX, 30]), vec![5, 5]);
        assert_eq!(rates(&[1_000_000_000, 25]), vec![5, 5]);
        assert_eq!(rates(&[u64::MAX, 40, 40, 40]), rates(&[40, 40, 40, 40]));
        for others in [13u64, 25, 100, 10_000] {
            for n in 2..=6usize {
                let mut demands = vec![others; n];
                demands[0] = u64::MAX;
                let shares = rates(&demands);
                let fair = TOTAL.tokens_per_fill.div_ceil(n as u32);
                // Each other holder needs at least an equal part of the 50: no more than fair.
                if others * n as u64 >= 50 {
                    assert!(shares[0] <= fair, "{demands:?}: {shares:?}");
                }
                assert_eq!(shares.iter().sum::<u32>(), TOTAL.tokens_per_fill);
            }
        }
        // What the others leave unused goes to it: they need 2/s (10 per report) each.
        assert_eq!(rates(&[u64::MAX, 10]), vec![7, 3]);
        assert_eq!(rates(&[u64::MAX, 0]), vec![9, 1]);
        // Demand that fits is weighed as sent.
        assert_eq!(fair_demands(TOTAL, &[30, 10], &[0, 1]), vec![30, 10]);
        assert_eq!(fair_demands(TOTAL, &[u64::MAX, 30], &[0, 1]), vec![25, 25]);
        assert_eq!(fair_demands(TOTAL, &[u64::MAX, 10], &[0, 1]), vec![40, 10]);
    }

    #[test]
    fn a_peers_many_holders_count_as_one() {
        let of = |demands: &[u64], peers: &[u64]| -> Vec<u32> {
            by_demand_of(TOTAL, demands, peers, 0)
                .iter()
                .map(|s| s.tokens_per_fill)
                .collect()
        };
        // Peer 7 reconnected three times (its old streams' holders live until their TTL), all
        // reporting demand: together they get what peer 1's one holder gets.
        let shares = of(&[40, 40, 40, 40], &[1, 7, 7, 7]);
        assert_eq!(shares[0], 5, "{shares:?}");
        assert_eq!(shares[1..].iter().sum::<u32>(), 5);
        // Absurd demand on every one of its holders changes nothing.
        let shares = of(&[40, u64::MAX, u64::MAX, u64::MAX], &[1, 7, 7, 7]);
        assert_eq!(shares[0], 5, "{shares:?}");
        // Nobody reports demand: still half each, not one quarter.
        assert_eq!(of(&[0, 0, 0, 0], &[1, 7, 7, 7])[0], 5);
        // One peer alone splits as distinct holders would.
        assert_eq!(of(&[100, 0], &[3, 3]), rates(&[100, 0]));
        assert_eq!(of(&[30, 10], &[3, 3]), rates(&[30, 10]));
        assert_eq!(of(&[0, 0, 0], &[3, 3, 3]), rates(&[0, 0, 0]));
    }

    #[test]
    fn demand_is_smoothed_over_reports() {
        assert_eq!(smooth(None, 40), 40);
        assert_eq!(smooth(Some(40), 0), 20);
        assert_eq!(smooth(Some(3), 4), 3);
        assert_eq!(smooth(Some(3), 5), 4);
        assert_eq!(smooth(Some(u64::MAX), u64::MAX), u64::MAX);
    }

    #[test]
    fn slack_is_none_when_the_shares_sum_above_the_rule() {
        assert_eq!(slack(TOTAL, 10), 1);
        assert_eq!(slack(TOTAL, 11), 0);
    }
}
