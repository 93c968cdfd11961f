//! The model of the history view (`app/history.rs`): what happened to each action over the last
//! 5 minutes or hour, in the backend's 10-second steps, as a stacked chart of the five outcomes,
//! the values under the pointer, and the "passed unchecked" panel.
//!
//! The body is sluice-core's [`HistoryBody`] (`GET /v1/history`), kept in the store, so every
//! replica answers the same. Nothing here knows about Leptos: the view only places strings.

use sluice_core::wire::{ActionHistory, HistoryBody, HistoryRange, StepCounts};

use crate::format::{duration_label, nice_ceiling, short_number};
use crate::whatif::chart::Tick;

/// Drawing width of a history chart in SVG user units (it scales to its box, ratio fixed).
pub const WIDTH: f64 = 640.0;
/// Drawing height.
pub const HEIGHT: f64 = 170.0;
/// Room on the left for the y labels.
pub const LEFT: f64 = 52.0;
/// Room on the right.
pub const RIGHT: f64 = 16.0;
/// Room at the bottom for the x labels.
pub const BOTTOM: f64 = 24.0;
const TOP: f64 = 10.0;

/// What became of a request, in the order the chart stacks them (bottom first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Allowed by the backend.
    Allowed,
    /// Allowed by a filter from a lease, with no callout.
    Leased,
    /// Denied by the backend.
    Denied,
    /// Denied by a filter's denial cache, with no callout.
    CachedDenied,
    /// Let through unchecked because the callout failed.
    PassedUnchecked,
}

impl Outcome {
    /// Every outcome, bottom of the stack first.
    pub const ALL: [Outcome; 5] = [
        Outcome::Allowed,
        Outcome::Leased,
        Outcome::Denied,
        Outcome::CachedDenied,
        Outcome::PassedUnchecked,
    ];

    /// The words in the legend and the readout.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Leased => "leased",
            Outcome::Denied => "denied",
            Outcome::CachedDenied => "cached denied",
            Outcome::PassedUnchecked => "passed unchecked",
        }
    }

    /// The CSS class of its layer and legend key.
    pub fn class(self) -> &'static str {
        match self {
            Outcome::Allowed => "h-allowed",
            Outcome::Leased => "h-leased",
            Outcome::Denied => "h-denied",
            Outcome::CachedDenied => "h-cached",
            Outcome::PassedUnchecked => "h-unchecked",
        }
    }

    /// Its count in a step.
    pub fn of(self, step: &StepCounts) -> u64 {
        match self {
            Outcome::Allowed => step.allowed,
            Outcome::Leased => step.leased,
            Outcome::Denied => step.denied,
            Outcome::CachedDenied => step.cached_denied,
            Outcome::PassedUnchecked => step.passed_unchecked,
        }
    }
}

/// One stacked layer: an outcome and its closed SVG path.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Which outcome.
    pub outcome: Outcome,
    /// Path data (empty when the outcome never happened in the range: nothing to draw).
    pub path: String,
}

/// A hover zone: one step's column and what it held.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Left edge, in SVG units.
    pub x: f64,
    /// Width, in SVG units.
    pub width: f64,
    /// `"12:03:40–12:03:50 UTC: allowed 12 · leased 0 · denied 3 · cached denied 0 · passed unchecked 0"`.
    pub readout: String,
    /// The step was still filling when the history was read (drawn hatched: its counts are
    /// so far, not a fall in traffic).
    pub partial: bool,
}

/// One action's chart and words.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionChart {
    /// The action (also the card's identity).
    pub action: String,
    /// Stacked layers, bottom first.
    pub layers: Vec<Layer>,
    /// Count labels (requests per step).
    pub y_ticks: Vec<Tick>,
    /// Time labels, UTC clock times (`12:01` … `12:05`).
    pub x_ticks: Vec<Tick>,
    /// Hover zones, one per step, oldest first.
    pub columns: Vec<Column>,
    /// What the readout says with no step under the pointer: the range's totals.
    pub totals_text: String,
    /// The range's totals, for the page's data attributes.
    pub totals: StepCounts,
    /// `Some("no traffic in 24 h: likely no route")` when the action saw nothing for a day.
    pub quiet: Option<String>,
}

/// What the page says about an action that saw no request in 24 hours.
pub const QUIET_TEXT: &str = "no traffic in 24 h: likely no route";

/// One action's requests that passed unchecked (or failed) in the range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchecked {
    /// The action.
    pub action: String,
    /// Callouts that failed and were let through.
    pub passed_unchecked: u64,
    /// Callouts that failed, whatever became of them.
    pub failed: u64,
    /// `"checkout: 4 passed unchecked of 4 failed callouts, 12:03:40–12:04:20 UTC"`: from the
    /// start of the first step with a failure to the end of the last.
    pub text: String,
    /// (start of the first step, end of the last) with a failure, ms since the epoch.
    pub span_ms: Option<(u64, u64)>,
}

/// The charts of every action in a history body, sorted by action.
pub fn charts(body: &HistoryBody) -> Vec<ActionChart> {
    let mut charts: Vec<ActionChart> = body
        .actions
        .iter()
        .map(|a| ActionChart::new(a, body.step_ms, body.range).read_at(body.at_ms, body.step_ms))
        .collect();
    charts.sort_by(|a, b| a.action.cmp(&b.action));
    charts
}

/// The actions whose requests passed unchecked or whose callouts failed in the range: the
/// panel shows only when this is not empty.
pub fn unchecked(body: &HistoryBody) -> Vec<Unchecked> {
    let mut rows: Vec<Unchecked> = body
        .actions
        .iter()
        .filter(|a| a.totals.failed > 0 || a.totals.passed_unchecked > 0)
        .map(|a| {
            let with = |s: &&StepCounts| s.failed > 0 || s.passed_unchecked > 0;
            let span_ms = a
                .steps
                .iter()
                .find(with)
                .zip(a.steps.iter().rev().find(with))
                .map(|(first, last)| (first.at_ms, last.at_ms + body.step_ms));
            let when = span_ms
                .map(|(from, to)| format!(", {}–{} UTC", clock(from), clock(to.min(body.at_ms))))
                .unwrap_or_default();
            Unchecked {
                action: a.action.clone(),
                passed_unchecked: a.totals.passed_unchecked,
                failed: a.totals.failed,
                text: format!(
                    "{}: {} passed unchecked of {} failed callouts{when}",
                    a.action, a.totals.passed_unchecked, a.totals.failed
                ),
                span_ms,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.action.cmp(&b.action));
    rows
}

impl ActionChart {
    /// Lays out one action's steps (oldest first; the right edge is when the history was read).
    pub fn new(history: &ActionHistory, step_ms: u64, range: HistoryRange) -> Self {
        let steps = &history.steps;
        let n = steps.len().max(1);
        let plot_w = WIDTH - LEFT - RIGHT;
        let x = |i: usize| LEFT + plot_w * i as f64 / n as f64;
        let tallest = steps.iter().map(total).max().unwrap_or(0);
        let top = nice_ceiling(tallest as f64).max(1.0);
        let bottom = HEIGHT - BOTTOM;
        let y = |v: u64| bottom - (bottom - TOP) * (v as f64 / top);

        // Cumulative heights, layer by layer.
        let mut below = vec![0u64; steps.len()];
        let mut layers = Vec::new();
        for outcome in Outcome::ALL {
            let above: Vec<u64> = steps
                .iter()
                .zip(&below)
                .map(|(s, b)| b + outcome.of(s))
                .collect();
            let path = if above == below {
                String::new()
            } else {
                stacked_path(&above, &below, x, y)
            };
            layers.push(Layer { outcome, path });
            below = above;
        }

        let y_ticks = [0.0, 0.5, 1.0]
            .iter()
            .map(|f| Tick {
                at: bottom - (bottom - TOP) * f,
                label: short_number(top * f),
            })
            .collect();
        // Clock times: the right edge is the end of the newest step.
        let end_ms = steps.last().map_or(0, |s| s.at_ms + step_ms);
        let x_ticks = age_ticks(range)
            .into_iter()
            .map(|(fraction, age)| Tick {
                at: LEFT + plot_w * fraction,
                label: if end_ms == 0 {
                    age
                } else {
                    let at =
                        end_ms.saturating_sub(((1.0 - fraction) * range.millis() as f64) as u64);
                    clock(at)[..5].to_owned()
                },
            })
            .collect();
        let columns = steps
            .iter()
            .enumerate()
            .map(|(i, s)| Column {
                x: x(i),
                width: x(i + 1) - x(i),
                readout: format!(
                    "{}–{} UTC: {}",
                    clock(s.at_ms),
                    clock(s.at_ms + step_ms),
                    counts_text(s)
                ),
                partial: false,
            })
            .collect();
        let span = duration_label(range.millis() as f64 / 1000.0);
        ActionChart {
            action: history.action.clone(),
            layers,
            y_ticks,
            x_ticks,
            columns,
            totals_text: format!("last {span}: {}", counts_text(&history.totals)),
            totals: history.totals,
            quiet: history
                .last_seen_ms
                .is_none()
                .then(|| QUIET_TEXT.to_owned()),
        }
    }
}

impl ActionChart {
    /// Marks the step still filling at `at_ms` (the history's read time) as partial, and says so
    /// in its readout.
    pub fn read_at(mut self, at_ms: u64, step_ms: u64) -> Self {
        if let Some(last) = self.columns.last_mut() {
            let start = at_ms - at_ms % step_ms.max(1);
            if last.readout.starts_with(&clock(start)) && !at_ms.is_multiple_of(step_ms.max(1)) {
                last.partial = true;
                last.readout = format!("{} (so far: this step is still filling)", last.readout);
            }
        }
        self
    }
}

/// Every outcome of a step, in words: `"allowed 12 · leased 0 · denied 3 · …"`.
pub fn counts_text(step: &StepCounts) -> String {
    Outcome::ALL
        .iter()
        .map(|o| format!("{} {}", o.label(), o.of(step)))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn total(step: &StepCounts) -> u64 {
    Outcome::ALL.iter().map(|o| o.of(step)).sum()
}

/// A closed step-shaped area between the `above` and `below` heights.
fn stacked_path(
    above: &[u64],
    below: &[u64],
    x: impl Fn(usize) -> f64,
    y: impl Fn(u64) -> f64,
) -> String {
    let mut d = format!("M{:.1} {:.1}", x(0), y(below.first().copied().unwrap_or(0)));
    for (i, v) in above.iter().enumerate() {
        d += &format!(" L{:.1} {:.1} L{:.1} {:.1}", x(i), y(*v), x(i + 1), y(*v));
    }
    for (i, v) in below.iter().enumerate().rev() {
        d += &format!(" L{:.1} {:.1} L{:.1} {:.1}", x(i + 1), y(*v), x(i), y(*v));
    }
    d + " Z"
}

/// Age labels across the range, as (fraction of the width, label): `−5m … −1m now` or
/// `−60m −45m −30m −15m now`.
fn age_ticks(range: HistoryRange) -> Vec<(f64, String)> {
    let minutes = range.millis() / 60_000;
    let every = if minutes > 10 { 15 } else { 1 };
    (0..=minutes / every)
        .map(|k| {
            let age = minutes - k * every;
            let label = if age == 0 {
                "now".to_owned()
            } else {
                format!("−{age}m")
            };
            ((k * every) as f64 / minutes as f64, label)
        })
        .collect()
}

/// The step a key press moves the readout to, for a chart of `len` steps: arrows step (from
/// the newest when none is shown), Home and End jump to the oldest and newest, Escape (or any
/// move on an empty chart) shows the totals again. `None` for a key that does not move it, so
/// the page leaves such keys alone (Tab still leaves the chart).
pub fn step_after(current: Option<usize>, key: &str, len: usize) -> Option<Option<usize>> {
    let last = len.checked_sub(1);
    let moved = match key {
        "ArrowLeft" => current.map_or(last, |i| Some(i.saturating_sub(1))),
        "ArrowRight" => current.map_or(last, |i| Some((i + 1).min(last.unwrap_or(0)))),
        "Home" => last.map(|_| 0),
        "End" => last,
        "Escape" => None,
        _ => return None,
    };
    Some(moved.filter(|_| len > 0))
}

/// Time of day in UTC, `HH:MM:SS`, from milliseconds since the epoch.
pub fn clock(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at_ms: u64, allowed: u64, denied: u64, cached: u64, unchecked: u64) -> StepCounts {
        StepCounts {
            at_ms,
            allowed,
            denied,
            cached_denied: cached,
            passed_unchecked: unchecked,
            failed: unchecked,
            ..StepCounts::default()
        }
    }

    /// 12:00:00 UTC on some day, in ms.
    const NOON: u64 = 1_700_000_000_000 - 1_700_000_000_000 % 86_400_000 + 43_200_000;

    fn body(actions: Vec<ActionHistory>) -> HistoryBody {
        HistoryBody {
            at_ms: NOON + 300_000,
            step_ms: 10_000,
            range: HistoryRange::FiveMinutes,
            actions,
        }
    }

    fn action(name: &str, steps: Vec<StepCounts>, last_seen_ms: Option<u64>) -> ActionHistory {
        let mut totals = StepCounts::default();
        for s in &steps {
            totals.allowed += s.allowed;
            totals.denied += s.denied;
            totals.cached_denied += s.cached_denied;
            totals.passed_unchecked += s.passed_unchecked;
            totals.failed += s.failed;
        }
        ActionHistory {
            action: name.into(),
            last_seen_ms,
            totals,
            steps,
        }
    }

    fn thirty(f: impl Fn(u64) -> StepCounts) -> Vec<StepCounts> {
        (0..30).map(f).collect()
    }

    #[test]
    fn layers_stack_and_only_what_happened_is_drawn() {
        let steps = thirty(|i| step(NOON + i * 10_000, 10, if i == 29 { 5 } else { 0 }, 0, 0));
        let chart = ActionChart::new(
            &action("reply", steps, Some(NOON)),
            10_000,
            HistoryRange::FiveMinutes,
        );
        let drawn: Vec<Outcome> = chart
            .layers
            .iter()
            .filter(|l| !l.path.is_empty())
            .map(|l| l.outcome)
            .collect();
        assert_eq!(drawn, [Outcome::Allowed, Outcome::Denied]);
        for l in chart.layers.iter().filter(|l| !l.path.is_empty()) {
            assert!(
                l.path.starts_with('M') && l.path.ends_with('Z'),
                "{}",
                l.path
            );
            assert!(l.path.chars().all(|c| "MLZ .-0123456789".contains(c)));
        }
        // The y axis tops at a round number at or above the tallest step (15 → 20).
        assert_eq!(chart.y_ticks.last().unwrap().label, "20");
        assert_eq!(chart.columns.len(), 30);
        assert!((chart.columns[29].x + chart.columns[29].width - (WIDTH - RIGHT)).abs() < 1e-9);
        assert!(chart.quiet.is_none());
        assert_eq!(
            chart.totals_text,
            "last 5m: allowed 300 · leased 0 · denied 5 · cached denied 0 · passed unchecked 0"
        );
    }

    #[test]
    fn hover_values_say_when_and_how_many() {
        let steps = thirty(|i| step(NOON + i * 10_000, i, 1, 2, 0));
        let chart = ActionChart::new(
            &action("a", steps, Some(NOON)),
            10_000,
            HistoryRange::FiveMinutes,
        );
        assert_eq!(
            chart.columns[3].readout,
            "12:00:30–12:00:40 UTC: allowed 3 · leased 0 · denied 1 · cached denied 2 · passed unchecked 0"
        );
        let labels: Vec<_> = chart.x_ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["12:00", "12:01", "12:02", "12:03", "12:04", "12:05"]
        );
        // Read 4 s into the newest step: it is partial, and says so.
        let read = chart.clone().read_at(NOON + 29 * 10_000 + 4_000, 10_000);
        assert!(read.columns[29].partial);
        assert!(read.columns[29]
            .readout
            .ends_with("(so far: this step is still filling)"));
        assert!(!read.columns[28].partial);
        let whole = chart.read_at(NOON + 30 * 10_000, 10_000);
        assert!(
            !whole.columns[29].partial,
            "read on the boundary: no step is filling"
        );
        assert_eq!(
            age_ticks(HistoryRange::OneHour)
                .into_iter()
                .map(|(_, l)| l)
                .collect::<Vec<_>>(),
            ["−60m", "−45m", "−30m", "−15m", "now"]
        );
    }

    #[test]
    fn an_idle_action_draws_nothing_and_is_marked_when_quiet_for_a_day() {
        let idle = action(
            "ghost",
            thirty(|i| step(NOON + i * 10_000, 0, 0, 0, 0)),
            None,
        );
        let chart = ActionChart::new(&idle, 10_000, HistoryRange::FiveMinutes);
        assert!(chart.layers.iter().all(|l| l.path.is_empty()));
        assert_eq!(chart.y_ticks.last().unwrap().label, "1");
        assert_eq!(chart.quiet.as_deref(), Some(QUIET_TEXT));
        let b = body(vec![idle, action("busy", vec![], Some(NOON))]);
        assert!(!crate::scope::seen_actions(&b).contains("ghost"));
        // No steps at all (a backend that has none yet) still lays out without NaN.
        let empty = ActionChart::new(
            &action("x", vec![], Some(NOON)),
            10_000,
            HistoryRange::OneHour,
        );
        assert!(empty.columns.is_empty());
        assert!(empty.y_ticks.iter().all(|t| t.at.is_finite()));
    }

    #[test]
    fn the_unchecked_panel_lists_only_actions_with_failures() {
        let b = body(vec![
            action(
                "zeta",
                thirty(|i| step(NOON + i * 10_000, 1, 0, 0, 0)),
                Some(NOON),
            ),
            action(
                "checkout",
                thirty(|i| step(NOON + i * 10_000, 1, 0, 0, u64::from(i < 4))),
                Some(NOON),
            ),
        ]);
        let rows = unchecked(&b);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].text,
            "checkout: 4 passed unchecked of 4 failed callouts, 12:00:00–12:00:40 UTC"
        );
        assert_eq!(rows[0].span_ms, Some((NOON, NOON + 40_000)));
        assert_eq!(charts(&b)[0].action, "checkout");
        assert!(unchecked(&body(vec![])).is_empty());
    }

    #[test]
    fn keys_walk_the_steps() {
        assert_eq!(step_after(None, "ArrowLeft", 30), Some(Some(29)));
        assert_eq!(step_after(Some(29), "ArrowLeft", 30), Some(Some(28)));
        assert_eq!(step_after(Some(0), "ArrowLeft", 30), Some(Some(0)));
        assert_eq!(step_after(Some(29), "ArrowRight", 30), Some(Some(29)));
        assert_eq!(step_after(Some(3), "Home", 30), Some(Some(0)));
        assert_eq!(step_after(None, "End", 360), Some(Some(359)));
        assert_eq!(step_after(Some(3), "Escape", 30), Some(None));
        assert_eq!(step_after(Some(3), "Tab", 30), None);
        assert_eq!(step_after(None, "ArrowLeft", 0), Some(None));
    }

    #[test]
    fn clock_reads_utc() {
        assert_eq!(clock(NOON), "12:00:00");
        assert_eq!(clock(NOON + 3_723_000), "13:02:03");
    }
}
