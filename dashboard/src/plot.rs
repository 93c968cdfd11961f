//! The what-if plot: a rule run over a simulated traffic pattern, in the browser, before saving.
//!
//! [`simulate`] feeds a timeline of requests through sluice-core's [`Params::decide`] (the very
//! transitions the backend runs) and counts offered vs allowed requests per time bucket, with the
//! funnel's level. [`Charts::new`] turns that into SVG path data, so the page only draws strings
//! and everything here is tested natively.

use sluice_core::limits::MAX_SPAN_MS;
use sluice_core::{Params, Span, State};

use crate::format::{duration_label, short_number};
use crate::rules::sustained_per_s;

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
    round_nicely(2.0 * sustained_per_s(params))
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
    let mut horizon = horizon_ns.max(1_000_000);
    let mut times = timeline(pattern, offered_per_s, params.capacity(), horizon);
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
            let (decision, after) = params.decide(&state, ORIGIN_NS + times[next], 1);
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

/// One axis label.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// Position along its axis, in SVG units.
    pub at: f64,
    /// The text.
    pub label: String,
}

/// Drawing size of a chart in SVG user units (the SVG scales to its box; the ratio is fixed so
/// the page never jumps).
pub const WIDTH: f64 = 640.0;
/// Height of the offered/allowed chart.
pub const COUNT_HEIGHT: f64 = 180.0;
/// Height of the level chart.
pub const LEVEL_HEIGHT: f64 = 130.0;
/// Room on the left for the y labels.
pub const LEFT: f64 = 52.0;
/// Room at the bottom for the x labels.
pub const BOTTOM: f64 = 24.0;
/// Room on the right (half an x label).
pub const RIGHT: f64 = 16.0;
const TOP: f64 = 10.0;

/// Everything the two what-if charts draw.
///
/// Offered and allowed are drawn as running totals ("requests so far"): a burst is a jump, a
/// rate is a slope, so a burst of 80 and a steady 3/s read on one linear scale, and the gap
/// between the two curves is what was denied.
#[derive(Debug, Clone, PartialEq)]
pub struct Charts {
    /// Offered requests so far, as a line.
    pub offered_path: String,
    /// Allowed requests so far, as a closed area.
    pub allowed_path: String,
    /// The funnel level over time.
    pub level_path: String,
    /// The y of the capacity line on the level chart.
    pub capacity_y: f64,
    /// Time labels (shared by both charts).
    pub x_ticks: Vec<Tick>,
    /// Request-count labels.
    pub count_ticks: Vec<Tick>,
    /// Level labels.
    pub level_ticks: Vec<Tick>,
    /// A one-line summary: `"allowed 80 of 128 requests (62%), denied 48, over 2m"`.
    pub summary: String,
}

impl Charts {
    /// Lays out a simulation.
    pub fn new(sim: &Simulation) -> Charts {
        let x = |i: usize| LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / BUCKETS as f64;
        let count_top = nice_ceiling(sim.offered as f64);
        let count_bottom = COUNT_HEIGHT - BOTTOM;
        let count_y = |n: f64| count_bottom - (count_bottom - TOP) * (n / count_top);
        let running = |value: fn(&Bucket) -> u64| {
            let mut total = 0u64;
            let mut d = String::new();
            for (i, b) in sim.buckets.iter().enumerate() {
                total += value(b);
                d += &format!(" L{:.1} {:.1}", x(i + 1), count_y(total as f64));
            }
            d
        };
        let offered_path = format!("M{:.1} {:.1}{}", x(0), count_bottom, running(|b| b.offered));
        let allowed_path = format!(
            "M{:.1} {:.1}{} L{:.1} {:.1} Z",
            x(0),
            count_bottom,
            running(|b| b.allowed),
            x(BUCKETS),
            count_bottom
        );

        let level_top = (sim.capacity.max(1) as f64) * 1.1;
        let level_bottom = LEVEL_HEIGHT - BOTTOM;
        let level_y =
            |l: f64| level_bottom - (level_bottom - TOP) * (l.max(0.0) / level_top).min(1.0);
        let mut level_path = format!("M{:.1} {:.1}", x(0), level_y(0.0));
        for (i, b) in sim.buckets.iter().enumerate() {
            level_path += &format!(" L{:.1} {:.1}", x(i + 1), level_y(b.level));
        }

        let x_ticks = time_ticks(sim.horizon_s)
            .into_iter()
            .map(|(t, label)| Tick {
                at: LEFT + (WIDTH - LEFT - RIGHT) * t / sim.horizon_s,
                label,
            })
            .collect();
        let count_ticks = [0.0, 0.5, 1.0]
            .iter()
            .map(|f| Tick {
                at: count_y(count_top * f),
                label: short_number(count_top * f),
            })
            .collect();
        let level_ticks = [0.0, sim.capacity as f64]
            .iter()
            .map(|l| Tick {
                at: level_y(*l),
                label: short_number(*l),
            })
            .collect();
        let percent = if sim.offered == 0 {
            100.0
        } else {
            100.0 * sim.allowed as f64 / sim.offered as f64
        };
        let mut summary = format!(
            "allowed {} of {} requests ({}%), denied {}, over {}",
            sim.allowed,
            sim.offered,
            percent.round(),
            sim.offered - sim.allowed,
            duration_label(sim.horizon_s)
        );
        if sim.truncated {
            summary += &format!(" (cut at {MAX_EVENTS} requests)");
        }
        Charts {
            offered_path,
            allowed_path,
            level_path,
            capacity_y: level_y(sim.capacity as f64),
            x_ticks,
            count_ticks,
            level_ticks,
            summary,
        }
    }
}

/// Time-axis labels for a span of `horizon_s` seconds: 3 to 6 round values in one unit
/// (`0, 50s, 100s, 150s, 200s` or `0, 1m, 2m, 3m, 4m, 5m`), as (seconds, label).
pub fn time_ticks(horizon_s: f64) -> Vec<(f64, String)> {
    let (unit_s, unit) = if horizon_s < 1.0 {
        (0.001, "ms")
    } else if horizon_s < 300.0 {
        (1.0, "s")
    } else if horizon_s < 3.0 * 3600.0 {
        (60.0, "m")
    } else if horizon_s < 3.0 * 86_400.0 {
        (3600.0, "h")
    } else {
        (86_400.0, "d")
    };
    let span = horizon_s / unit_s;
    let step = nice_ceiling(span / 5.0);
    (0..)
        .map(|k| k as f64 * step)
        .take_while(|v| *v <= span * (1.0 + 1e-9))
        .take(12)
        .map(|v| {
            (
                v * unit_s,
                if v == 0.0 {
                    "0".to_owned()
                } else {
                    format!("{}{unit}", short_number(v))
                },
            )
        })
        .collect()
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `x` (1 for nothing), for an axis top.
pub fn nice_ceiling(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let mut step = 10f64.powf(x.log10().floor());
    loop {
        for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
            if m * step >= x * (1.0 - 1e-9) {
                return m * step;
            }
        }
        step *= 10.0;
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
    use serde_json::json;
    use sluice_core::Rule;

    fn params(v: serde_json::Value) -> Params {
        Rule::from_json(&v).unwrap().params()
    }

    fn gcra(capacity: u64, count: u64, period: &str) -> Params {
        params(
            json!({"action": "a", "algorithm": "gcra", "capacity": capacity,
                      "rate": {"count": count, "period": period}}),
        )
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
    fn a_huge_pattern_is_cut_and_says_so() {
        let p = params(
            json!({"action": "a", "algorithm": "sliding_log", "capacity": 10000, "window": "1s"}),
        );
        let sim = simulate(
            &p,
            Pattern::Steady,
            default_offered_per_s(&p),
            auto_horizon_ns(&p),
        );
        assert!(sim.truncated);
        assert_eq!(sim.offered, MAX_EVENTS as u64);
        assert!(Charts::new(&sim).summary.contains("cut at 4000"));
    }

    #[test]
    fn the_charts_change_when_capacity_or_rate_change() {
        // The traffic and the span stay put while the rule changes (as in the editor).
        let span = 200_000_000_000;
        let run = |p: Params| simulate(&p, Pattern::Steady, 1.0, span);
        let base_sim = run(gcra(16, 30, "60s"));
        let faster_sim = run(gcra(16, 45, "60s"));
        assert!(faster_sim.allowed > base_sim.allowed);
        let base = Charts::new(&base_sim);
        let bigger = Charts::new(&run(gcra(32, 30, "60s")));
        let faster = Charts::new(&faster_sim);
        assert_ne!(base.allowed_path, bigger.allowed_path);
        assert_ne!(base.allowed_path, faster.allowed_path);
        assert_ne!(base.level_path, faster.level_path);
        assert!(base.summary.starts_with("allowed "), "{}", base.summary);
    }

    #[test]
    fn paths_are_well_formed_svg() {
        let p = gcra(16, 30, "60s");
        let c = Charts::new(&simulate(
            &p,
            Pattern::BurstThenSteady,
            1.0,
            auto_horizon_ns(&p),
        ));
        for d in [&c.offered_path, &c.allowed_path, &c.level_path] {
            assert!(d.starts_with('M'), "{d}");
            assert!(d.chars().all(|ch| "MLZ .-0123456789".contains(ch)), "{d}");
        }
        assert!(c.allowed_path.ends_with('Z'));
        assert_eq!(c.x_ticks[0].label, "0");
        assert!(c
            .x_ticks
            .iter()
            .all(|t| (LEFT..=WIDTH - RIGHT).contains(&t.at)));
    }

    #[test]
    fn running_totals_end_at_the_totals() {
        // The offered line ends at the total offered, the allowed area at the total allowed.
        let p = gcra(16, 30, "60s");
        let sim = simulate(&p, Pattern::Steady, 1.0, auto_horizon_ns(&p));
        let c = Charts::new(&sim);
        let top = nice_ceiling(sim.offered as f64);
        let y_of = |n: f64| (COUNT_HEIGHT - BOTTOM) - (COUNT_HEIGHT - BOTTOM - TOP) * n / top;
        let last = |d: &str, nth_from_end: usize| {
            let points: Vec<&str> = d.split(" L").collect();
            points[points.len() - 1 - nth_from_end].to_owned()
        };
        let y_at = |point: String| {
            point
                .split(' ')
                .nth(1)
                .and_then(|y| y.parse::<f64>().ok())
                .unwrap()
        };
        assert!((y_at(last(&c.offered_path, 0)) - y_of(sim.offered as f64)).abs() < 0.06);
        assert!((y_at(last(&c.allowed_path, 1)) - y_of(sim.allowed as f64)).abs() < 0.06);
        assert!(c
            .summary
            .contains(&format!("denied {}", sim.offered - sim.allowed)));
    }

    #[test]
    fn time_labels_are_round_in_one_unit() {
        let labels = |h: f64| {
            time_ticks(h)
                .into_iter()
                .map(|(_, l)| l)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(labels(200.0), "0 50s 100s 150s 200s");
        assert_eq!(labels(300.0), "0 1m 2m 3m 4m 5m");
        assert_eq!(labels(0.05), "0 10ms 20ms 30ms 40ms 50ms");
        assert_eq!(labels(20.0), "0 5s 10s 15s 20s");
        assert_eq!(labels(2.0 * 86_400.0), "0 10h 20h 30h 40h");
        assert_eq!(time_ticks(200.0)[1].0, 50.0);
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(11.0), 20.0);
        assert_eq!(nice_ceiling(239.0), 250.0);
        assert_eq!(nice_ceiling(0.03), 0.05);
        assert_eq!(round_nicely(123.0), 120.0);
    }
}
