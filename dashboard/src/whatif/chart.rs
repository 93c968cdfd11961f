//! The what-if charts: a [`Simulation`] laid out as SVG geometry (path data, axis ticks, the
//! capacity line) and a one-line summary, so the Leptos component only places strings and
//! everything that could be wrong about a chart is tested natively.

use super::simulation::{Bucket, Simulation, BUCKETS, MAX_EVENTS};
use crate::format::{duration_label, nice_ceiling, short_number};

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
    /// The saved rule's allowed-so-far line on the same scales, when comparing (else empty).
    pub baseline_allowed_path: String,
    /// The saved rule's funnel level on the same scales, when comparing (else empty).
    pub baseline_level_path: String,
    /// The y of the saved rule's capacity, when comparing.
    pub baseline_capacity_y: Option<f64>,
}

impl Charts {
    /// Lays out a simulation.
    pub fn new(sim: &Simulation) -> Charts {
        Charts::compared(sim, None)
    }

    /// Lays out a simulation of the edited rule and, when given, of the saved rule over the same
    /// traffic, on shared scales, so the two can be read against each other before saving.
    pub fn compared(sim: &Simulation, baseline: Option<&Simulation>) -> Charts {
        let x = |i: usize| LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / BUCKETS as f64;
        let most_offered = baseline.map_or(sim.offered, |b| b.offered.max(sim.offered));
        let count_top = nice_ceiling(most_offered as f64);
        let count_bottom = COUNT_HEIGHT - BOTTOM;
        let count_y = |n: f64| count_bottom - (count_bottom - TOP) * (n / count_top);
        let running = |of: &Simulation, value: fn(&Bucket) -> u64| {
            let mut total = 0u64;
            let mut d = String::new();
            for (i, b) in of.buckets.iter().enumerate() {
                total += value(b);
                d += &format!(" L{:.1} {:.1}", x(i + 1), count_y(total as f64));
            }
            d
        };
        let offered_path = format!(
            "M{:.1} {:.1}{}",
            x(0),
            count_bottom,
            running(sim, |b| b.offered)
        );
        let allowed_path = format!(
            "M{:.1} {:.1}{} L{:.1} {:.1} Z",
            x(0),
            count_bottom,
            running(sim, |b| b.allowed),
            x(BUCKETS),
            count_bottom
        );
        let baseline_allowed_path = baseline.map_or(String::new(), |b| {
            format!(
                "M{:.1} {:.1}{}",
                x(0),
                count_bottom,
                running(b, |b| b.allowed)
            )
        });

        let most_capacity = baseline.map_or(sim.capacity, |b| b.capacity.max(sim.capacity));
        let level_top = (most_capacity.max(1) as f64) * 1.1;
        let level_bottom = LEVEL_HEIGHT - BOTTOM;
        let level_y =
            |l: f64| level_bottom - (level_bottom - TOP) * (l.max(0.0) / level_top).min(1.0);
        let level_line = |of: &Simulation| {
            let mut d = format!("M{:.1} {:.1}", x(0), level_y(0.0));
            for (i, b) in of.buckets.iter().enumerate() {
                d += &format!(" L{:.1} {:.1}", x(i + 1), level_y(b.level));
            }
            d
        };
        let level_path = level_line(sim);
        let baseline_level_path = baseline.map_or(String::new(), level_line);

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
        if let Some(b) = baseline {
            summary += &format!("; the saved rule: allowed {} of {}", b.allowed, b.offered);
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
            baseline_allowed_path,
            baseline_level_path,
            baseline_capacity_y: baseline.map(|b| level_y(b.capacity as f64)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::whatif::fixtures::{gcra, over_the_event_budget};
    use crate::whatif::simulation::{auto_horizon_ns, simulate, Pattern};
    use sluice_core::Params;

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
    fn the_saved_rule_is_drawn_on_the_same_scales() {
        let span = 200_000_000_000;
        let run = |p: Params| simulate(&p, Pattern::BurstThenSteady, 1.0, span);
        let (edited, saved) = (run(gcra(16, 30, "60s")), run(gcra(64, 30, "60s")));
        let alone = Charts::new(&edited);
        assert!(alone.baseline_allowed_path.is_empty() && alone.baseline_capacity_y.is_none());
        let both = Charts::compared(&edited, Some(&saved));
        assert!(both.baseline_allowed_path.starts_with('M'));
        assert_ne!(both.baseline_level_path, both.level_path);
        // The saved capacity (64) is the taller one, so it sets the level axis: the edited
        // capacity line sits lower than it would alone, the saved one above it.
        assert!(both.capacity_y > alone.capacity_y);
        assert!(both.baseline_capacity_y.unwrap() < both.capacity_y);
        assert!(
            both.summary.contains(&format!(
                "the saved rule: allowed {} of {}",
                saved.allowed, saved.offered
            )),
            "{}",
            both.summary
        );
    }

    #[test]
    fn a_cut_simulation_says_so_in_the_summary() {
        let (_, sim) = over_the_event_budget();
        assert!(Charts::new(&sim).summary.contains("cut at 4000"));
        let whole = simulate(
            &gcra(16, 30, "60s"),
            Pattern::Steady,
            1.0,
            auto_horizon_ns(&gcra(16, 30, "60s")),
        );
        assert!(!Charts::new(&whole).summary.contains("cut"));
    }
}
