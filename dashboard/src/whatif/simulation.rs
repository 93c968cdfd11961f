//! The what-if simulation: a rule run over a request pattern, in the browser, before saving.
//!
//! [`timeline`] lays out when requests arrive for a [`Pattern`]; [`simulate`] feeds them through
//! sluice-core's [`Params::decide`] (the very transitions the backend runs) and counts offered vs
//! allowed requests per time bucket, with the funnel's level. Nothing here knows about drawing:
//! [`super::chart`] turns a [`Simulation`] into SVG geometry.

use sluice_core::limits::{MAX_QUANTITY, MAX_SPAN_MS};
use sluice_core::{Params, Span, State};

use crate::format::nice_ceiling;
use crate::sustained;

/// Time buckets across the plot.
pub const BUCKETS: usize = 48;
/// Most requests simulated per plot; a pattern with more is cut short (and says so).
pub const MAX_EVENTS: usize = 4000;
/// Simulated time starts at midnight of a day, so clock-aligned windows start with the plot.
const ORIGIN_NS: u64 = 20_000 * 86_400 * 1_000_000_000;
const NS_PER_S: f64 = 1e9;

/// The traffic shapes a user can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Requests evenly spaced at the offered rate.
    Steady,
    /// Twice the capacity at once, then steady at the offered rate.
    BurstThenSteady,
    /// Four spikes of 1.5 × capacity at once, over a background of a quarter of the offered rate.
    Spikes,
}

impl Pattern {
    /// Every pattern, in picker order.
    pub const ALL: [Pattern; 3] = [Pattern::Steady, Pattern::BurstThenSteady, Pattern::Spikes];

    /// The value in the picker.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Steady => "steady",
            Pattern::BurstThenSteady => "burst",
            Pattern::Spikes => "spikes",
        }
    }

    /// What the picker shows.
    pub fn label(self) -> &'static str {
        match self {
            Pattern::Steady => "Steady rate",
            Pattern::BurstThenSteady => "Burst, then steady",
            Pattern::Spikes => "Spikes",
        }
    }

    /// The pattern a picker value names.
    pub fn parse(name: &str) -> Option<Pattern> {
        Pattern::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// What each simulated request costs, in the rule's units: the same every time (`"1"`, the
/// default), or spread over a range (`"10-200"`), for budgets whose requests cost what they use.
/// The spread is a fixed pseudo-random sequence, so the same inputs give the same plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cost {
    /// Every request costs this.
    Fixed(u64),
    /// Request costs spread evenly over `lo..=hi`.
    Range(u64, u64),
}

impl Cost {
    /// One unit per request: a plain request count.
    pub const ONE: Cost = Cost::Fixed(1);

    /// Parses the cost input: empty is one unit; `"N"` or `"LO-HI"` with 1 ≤ LO ≤ HI ≤
    /// [`MAX_QUANTITY`].
    pub fn parse(text: &str) -> Result<Cost, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Cost::ONE);
        }
        let number = |t: &str| {
            match t.trim().parse::<u64>() {
            Ok(n) if (1..=MAX_QUANTITY).contains(&n) => Ok(n),
            _ => Err(format!(
                "a whole number of units from 1 to {MAX_QUANTITY}, or a range like 10-200; got {text:?}"
            )),
        }
        };
        match text.split_once('-') {
            None => number(text).map(Cost::Fixed),
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    return Err(format!(
                        "the range's low end is above its high end: {text:?}"
                    ));
                }
                Ok(Cost::Range(lo, hi))
            }
        }
    }

    /// The cost of the `i`th request.
    pub fn of(self, i: usize) -> u64 {
        match self {
            Cost::Fixed(n) => n,
            Cost::Range(lo, hi) => {
                // SplitMix64 of the index: spread, and the same every run.
                let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                lo + z % (hi - lo + 1)
            }
        }
    }
}

/// One time bucket of the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bucket {
    /// Requests offered in the bucket.
    pub offered: u64,
    /// Requests allowed in the bucket.
    pub allowed: u64,
    /// The highest funnel level seen in the bucket (including at its end).
    pub level: f64,
}

/// A rule's behaviour over a pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// Simulated time span, in seconds.
    pub horizon_s: f64,
    /// Per-bucket counts, [`BUCKETS`] of them.
    pub buckets: Vec<Bucket>,
    /// The rule's capacity (the level axis' top).
    pub capacity: u64,
    /// Requests offered in total.
    pub offered: u64,
    /// Requests allowed in total.
    pub allowed: u64,
    /// Whether the pattern had more than [`MAX_EVENTS`] requests and the plot stops early.
    pub truncated: bool,
}

/// The offered rate a new plot starts with: twice what the rule lets through in the long run,
/// rounded to a plain number, so the plot shows both the burst and the limit.
pub fn default_offered_per_s(params: &Params) -> f64 {
    round_nicely(2.0 * sustained::per_s(params))
}

/// How much simulated time shows the rule well, in nanoseconds: about four times its window (or
/// the time a full funnel takes to drain), rounded up to 1, 2 or 5 × 10^k seconds so it reads
/// well and stays put while the rule changes a little; between 10 ms and 7 days, in whole
/// milliseconds (so it is always a valid [`Span`]).
pub fn auto_horizon_ns(params: &Params) -> u64 {
    let seconds = nice_ceiling(params.policy_window_ns() as f64 * 4.0 / NS_PER_S);
    let millis = (seconds * 1000.0).round().clamp(10.0, MAX_SPAN_MS as f64) as u64;
    millis * 1_000_000
}

/// A horizon as the user would type it (`"200s"`), for the span input.
pub fn horizon_text(horizon_ns: u64) -> String {
    Span::from_millis(horizon_ns / 1_000_000)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Request times (offsets from the start, ascending) of a pattern over `horizon` ns, at most
/// [`MAX_EVENTS`] + 1 of them (one more than fits tells the caller it was cut).
pub fn timeline(pattern: Pattern, offered_per_s: f64, capacity: u64, horizon: u64) -> Vec<u64> {
    let mut times = Vec::new();
    let limit = MAX_EVENTS + 1;
    let steady = |times: &mut Vec<u64>, rate: f64, from: u64| {
        if !(rate.is_finite() && rate > 0.0) {
            return;
        }
        let gap = NS_PER_S / rate;
        let mut i = 0u64;
        loop {
            let t = from as f64 + i as f64 * gap;
            if t >= horizon as f64 || times.len() >= limit {
                break;
            }
            times.push(t as u64);
            i += 1;
        }
    };
    let at_once = |times: &mut Vec<u64>, count: u64, at: u64| {
        let room = limit.saturating_sub(times.len()) as u64;
        times.extend(std::iter::repeat_n(at, count.min(room) as usize));
    };
    match pattern {
        Pattern::Steady => steady(&mut times, offered_per_s, 0),
        Pattern::BurstThenSteady => {
            at_once(&mut times, capacity.saturating_mul(2), 0);
            let gap = if offered_per_s > 0.0 {
                (NS_PER_S / offered_per_s) as u64
            } else {
                horizon
            };
            steady(&mut times, offered_per_s, gap.max(1));
        }
        Pattern::Spikes => {
            // Spikes first, so that a dense background cannot crowd them out of the event budget.
            let spike = capacity.saturating_mul(3).div_ceil(2);
            for k in 0..4u64 {
                at_once(&mut times, spike, horizon / 8 + k * horizon / 4);
            }
            steady(&mut times, offered_per_s / 4.0, 0);
        }
    }
    times.sort_unstable();
    times
}

/// Runs `params` over `horizon` of the pattern. Pure and deterministic: the same inputs give the
/// same plot.
pub fn simulate(
    params: &Params,
    pattern: Pattern,
    offered_per_s: f64,
    horizon_ns: u64,
) -> Simulation {
    simulate_on_traffic_of(params, params, pattern, offered_per_s, horizon_ns)
}

/// As [`simulate`], on the traffic shaped for `traffic_of` (a pattern's burst is that rule's
/// capacity): the what-if runs the saved rule on the edited rule's traffic, so both lines answer
/// the same requests ("allowed 116 of 166" against "allowed 38 of 166", never "of 76").
pub fn simulate_on_traffic_of(
    params: &Params,
    traffic_of: &Params,
    pattern: Pattern,
    offered_per_s: f64,
    horizon_ns: u64,
) -> Simulation {
    simulate_costed(
        params,
        traffic_of,
        pattern,
        offered_per_s,
        horizon_ns,
        Cost::ONE,
    )
}

/// As [`simulate_on_traffic_of`], each request costing what `cost` says (its `i`th request
/// `cost.of(i)` units): requests are still counted one by one, the level in units.
pub fn simulate_costed(
    params: &Params,
    traffic_of: &Params,
    pattern: Pattern,
    offered_per_s: f64,
    horizon_ns: u64,
    cost: Cost,
) -> Simulation {
    let mut horizon = horizon_ns.max(1_000_000);
    let mut times = timeline(pattern, offered_per_s, traffic_of.capacity(), horizon);
    let truncated = times.len() > MAX_EVENTS;
    if truncated {
        times.truncate(MAX_EVENTS);
        // Stop the plot just after the last simulated request.
        horizon = times.last().map_or(horizon, |t| (t + 1).max(1_000_000));
    }
    let mut buckets = vec![Bucket::default(); BUCKETS];
    let bucket_of =
        |t: u64| ((t as u128 * BUCKETS as u128 / horizon as u128) as usize).min(BUCKETS - 1);
    let end_of = |i: usize| (horizon as u128 * (i as u128 + 1) / BUCKETS as u128) as u64;
    let mut state = State::Fresh;
    let (mut offered, mut allowed) = (0u64, 0u64);
    let mut next = 0usize;
    for (i, bucket) in buckets.iter_mut().enumerate() {
        while next < times.len() && bucket_of(times[next]) == i {
            let (decision, after) = params.decide(&state, ORIGIN_NS + times[next], cost.of(next));
            state = after;
            bucket.offered += 1;
            offered += 1;
            if decision.allowed {
                bucket.allowed += 1;
                allowed += 1;
            }
            bucket.level = bucket.level.max(decision.level);
            next += 1;
        }
        // Peek (quantity 0) at the bucket's end to see how far the funnel drained.
        let (end, _) = params.decide(&state, ORIGIN_NS + end_of(i), 0);
        bucket.level = bucket.level.max(end.level);
    }
    Simulation {
        horizon_s: horizon as f64 / NS_PER_S,
        buckets,
        capacity: params.capacity(),
        offered,
        allowed,
        truncated,
    }
}

/// `x` to two significant digits (`0.9` → `0.9`, `123` → `120`), for a starting rate.
fn round_nicely(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let scale = 10f64.powf(x.log10().floor() - 1.0);
    (x / scale).round() * scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::fixtures::{gcra, over_the_event_budget, params};
    use serde_json::json;

    #[test]
    fn costs_parse_spread_and_spend_a_budget_faster() {
        assert_eq!(Cost::parse(""), Ok(Cost::ONE));
        assert_eq!(Cost::parse(" 5 "), Ok(Cost::Fixed(5)));
        assert_eq!(Cost::parse("10-200"), Ok(Cost::Range(10, 200)));
        for bad in ["0", "x", "5-2", "1-", "2000000000"] {
            assert!(Cost::parse(bad).is_err(), "{bad}");
        }
        let spread: Vec<u64> = (0..1000).map(|i| Cost::Range(10, 200).of(i)).collect();
        assert!(spread.iter().all(|c| (10..=200).contains(c)));
        let mean = spread.iter().sum::<u64>() as f64 / 1000.0;
        assert!((95.0..=115.0).contains(&mean), "{mean}");
        // A budget of 1000 units a minute: one unit per request lets 1000 through, 10 to 200
        // units per request about a hundredth of them.
        let p = params(
            json!({"action": "a", "algorithm": "fixed_window", "capacity": 1000,
                              "window": "60s"}),
        );
        let horizon = 60_000_000_000;
        let one = simulate_costed(&p, &p, Pattern::Steady, 100.0, horizon, Cost::ONE);
        let costed = simulate_costed(
            &p,
            &p,
            Pattern::Steady,
            100.0,
            horizon,
            Cost::Range(10, 200),
        );
        assert_eq!(one.allowed, 1000);
        assert!((5..=15).contains(&costed.allowed), "{}", costed.allowed);
        assert_eq!(one.offered, costed.offered);
    }

    #[test]
    fn a_steady_rate_within_the_limit_passes_entirely() {
        let p = gcra(16, 30, "60s");
        let sim = simulate(&p, Pattern::Steady, 0.25, auto_horizon_ns(&p));
        assert!(sim.offered > 0);
        assert_eq!(sim.allowed, sim.offered);
        assert!(!sim.truncated);
        // The funnel never gets past one request's worth.
        assert!(sim.buckets.iter().all(|b| b.level <= 1.0 + 1e-9));
    }

    #[test]
    fn the_saved_rule_answers_the_edited_rules_traffic() {
        let edited = gcra(50, 30, "60s");
        let saved = gcra(5, 30, "60s");
        let horizon = auto_horizon_ns(&edited);
        let a = simulate(&edited, Pattern::BurstThenSteady, 1.0, horizon);
        let b = simulate_on_traffic_of(&saved, &edited, Pattern::BurstThenSteady, 1.0, horizon);
        assert_eq!(a.offered, b.offered, "the same requests");
        assert!(b.allowed < a.allowed);
    }

    #[test]
    fn capacity_16_at_30_per_minute_is_seen_not_guessed() {
        // 4 × (16 × 2 s) = 128 s, shown as 200 s; offered at 1/s: 16 back to back, then one per 2 s.
        let p = gcra(16, 30, "60s");
        assert_eq!(default_offered_per_s(&p), 1.0);
        assert_eq!(horizon_text(auto_horizon_ns(&p)), "200s");
        let sim = simulate(&p, Pattern::Steady, 1.0, auto_horizon_ns(&p));
        assert_eq!(sim.horizon_s, 200.0);
        assert_eq!(sim.offered, 200);
        assert!(
            (114..=118).contains(&sim.allowed),
            "allowed {}",
            sim.allowed
        );
        // The funnel fills to capacity and stays there while traffic is over the rate.
        assert!(sim.buckets.last().unwrap().level > 15.0);
    }

    #[test]
    fn a_burst_lets_exactly_capacity_through_at_once() {
        let p = gcra(16, 30, "60s");
        let sim = simulate(&p, Pattern::BurstThenSteady, 0.1, auto_horizon_ns(&p));
        assert_eq!(
            sim.buckets[0].offered,
            32 + u64::from(sim.horizon_s / 48.0 >= 10.0)
        );
        assert_eq!(sim.buckets[0].allowed, 16);
        assert!((sim.buckets[0].level - 16.0).abs() < 1e-9);
        // ...and then drains: the last bucket's level is below capacity.
        assert!(sim.buckets[47].level < 16.0);
    }

    #[test]
    fn spikes_are_four_and_each_is_cut_to_what_the_funnel_holds() {
        let p = params(
            json!({"action": "a", "algorithm": "fixed_window", "capacity": 10, "window": "10s"}),
        );
        let times = timeline(Pattern::Spikes, 0.0, 10, auto_horizon_ns(&p));
        assert_eq!(times.len(), 60);
        let sim = simulate(&p, Pattern::Spikes, 0.0, auto_horizon_ns(&p));
        let spiky: Vec<&Bucket> = sim.buckets.iter().filter(|b| b.offered > 0).collect();
        assert_eq!(spiky.len(), 4);
        assert!(spiky.iter().all(|b| b.offered == 15 && b.allowed == 10));
    }

    #[test]
    fn every_algorithm_simulates() {
        for algorithm in ["fixed_window", "sliding_log", "sliding_window"] {
            let p = params(
                json!({"action": "a", "algorithm": algorithm, "capacity": 5, "window": "1s"}),
            );
            let sim = simulate(&p, Pattern::BurstThenSteady, 10.0, auto_horizon_ns(&p));
            assert!(sim.allowed > 0 && sim.allowed < sim.offered, "{algorithm}");
        }
        for algorithm in ["leaky_bucket", "token_bucket"] {
            let p = params(json!({"action": "a", "algorithm": algorithm, "capacity": 5,
                                  "rate": {"count": 5, "period": "1s"}}));
            let sim = simulate(&p, Pattern::Spikes, 10.0, auto_horizon_ns(&p));
            assert!(sim.allowed > 0 && sim.allowed < sim.offered, "{algorithm}");
        }
    }

    #[test]
    fn a_huge_pattern_is_cut_short() {
        let (p, sim) = over_the_event_budget();
        assert!(sim.truncated);
        assert_eq!(sim.offered, MAX_EVENTS as u64);
        // The span shown ends just after the last simulated request, not at the requested span.
        assert!(sim.horizon_s < auto_horizon_ns(&p) as f64 / NS_PER_S);
    }

    #[test]
    fn starting_rates_are_round() {
        assert_eq!(round_nicely(123.0), 120.0);
        assert_eq!(round_nicely(0.0), 1.0);
        assert_eq!(default_offered_per_s(&gcra(16, 30, "60s")), 1.0);
    }
}
