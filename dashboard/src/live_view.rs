//! The model of the live view (`app/live_view.rs`): per action, the most active keys as funnels,
//! from the SSE `levels` snapshots.

use crate::format::{per_second, short_number};
use sluice_core::wire::{ActionLevels, LevelsBody};

/// Funnels shown per action; the rest are counted, not drawn.
pub const TOP_KEYS: usize = 8;

/// How full a funnel looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Under half full.
    Calm,
    /// Half full or more.
    Warm,
    /// 85 % full or more: about to deny.
    Hot,
    /// No room for one more request.
    Full,
}

impl Tone {
    /// The tone of a fill ratio with `remaining` requests of room.
    pub fn of(fill: f64, remaining: u64) -> Tone {
        if remaining == 0 && fill > 0.0 {
            Tone::Full
        } else if fill >= 0.85 {
            Tone::Hot
        } else if fill >= 0.5 {
            Tone::Warm
        } else {
            Tone::Calm
        }
    }

    /// The CSS class.
    pub fn class(self) -> &'static str {
        match self {
            Tone::Calm => "calm",
            Tone::Warm => "warm",
            Tone::Hot => "hot",
            Tone::Full => "full",
        }
    }
}

/// One key's funnel.
#[derive(Debug, Clone, PartialEq)]
pub struct FunnelView {
    /// The key (untrusted: rendered as text only).
    pub key: String,
    /// Level in requests.
    pub level: f64,
    /// Capacity.
    pub capacity: u64,
    /// Room left, in requests.
    pub remaining: u64,
    /// Level / capacity, clamped to 0..=1 (the drawn height).
    pub fill: f64,
    /// Colour.
    pub tone: Tone,
    /// `"12.5 / 16"`.
    pub level_text: String,
}

/// One action's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionView {
    /// The action.
    pub action: String,
    /// Algorithm name.
    pub algorithm: String,
    /// Capacity.
    pub capacity: u64,
    /// `"3.5/s"`.
    pub allowed_text: String,
    /// `"0/s"`.
    pub denied_text: String,
    /// Whether anything is being denied right now (the denied figure is highlighted).
    pub denying: bool,
    /// The most active (fullest) keys, in name order.
    pub funnels: Vec<FunnelView>,
    /// Keys in the snapshot beyond those drawn.
    pub more: usize,
}

impl ActionView {
    /// Builds one action's panel, keeping the `top` fullest keys.
    pub fn of(action: &ActionLevels, top: usize) -> ActionView {
        let mut keys: Vec<FunnelView> = action
            .keys
            .iter()
            .map(|k| {
                let capacity = if k.capacity > 0 {
                    k.capacity
                } else {
                    action.capacity
                };
                let fill = if capacity == 0 {
                    0.0
                } else {
                    (k.level / capacity as f64).clamp(0.0, 1.0)
                };
                FunnelView {
                    key: k.key.clone(),
                    level: k.level,
                    capacity,
                    remaining: k.remaining,
                    fill,
                    tone: Tone::of(fill, k.remaining),
                    level_text: format!("{} / {}", short_number(round_level(k.level)), capacity),
                }
            })
            .collect();
        // Keep the fullest `top` (ties by name), then show them by name: funnels that overtake
        // each other do not swap places twice a second.
        keys.sort_by(|a, b| b.level.total_cmp(&a.level).then_with(|| a.key.cmp(&b.key)));
        let more = keys.len().saturating_sub(top);
        keys.truncate(top);
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        ActionView {
            action: action.action.clone(),
            algorithm: action.algorithm.to_string(),
            capacity: action.capacity,
            allowed_text: per_second(action.allowed_per_s),
            denied_text: per_second(action.denied_per_s),
            denying: action.denied_per_s > 0.0,
            funnels: keys,
            more,
        }
    }
}

fn round_level(level: f64) -> f64 {
    (level * 10.0).round() / 10.0
}

/// Every action's panel, by action name.
pub fn live_view(body: &LevelsBody, top: usize) -> Vec<ActionView> {
    let mut actions: Vec<ActionView> = body
        .actions
        .iter()
        .map(|a| ActionView::of(a, top))
        .collect();
    actions.sort_by(|a, b| a.action.cmp(&b.action));
    actions
}

/// The 429s clients got for one action that the live levels cannot show: the filter's cached
/// denials (answered in Envoy, never reaching the backend), from the history's last complete step
/// (reports arrive about once a second, so the step still filling would read low).
#[derive(Debug, Clone, PartialEq)]
pub struct CachedDenials {
    /// `"4.7/s"`: cached denials per second over that step.
    pub rate_text: String,
    /// Whether there were any.
    pub any: bool,
}

/// The cached denials of `action` per second over the last complete step of `history` read at
/// its `at_ms`; `None` when the history does not hold the action.
pub fn cached_denials(
    history: &sluice_core::wire::HistoryBody,
    action: &str,
) -> Option<CachedDenials> {
    let a = history.actions.iter().find(|a| a.action == action)?;
    let complete = a
        .steps
        .iter()
        .rev()
        .find(|s| s.at_ms + history.step_ms <= history.at_ms)?;
    let per_s = complete.cached_denied as f64 * 1000.0 / history.step_ms.max(1) as f64;
    Some(CachedDenials {
        rate_text: per_second(per_s),
        any: complete.cached_denied > 0,
    })
}

/// Per action, the filter's cached denials over the history read (keys are not known for
/// them): what "Most denied" leaves out, in words.
pub fn cached_denied_note(history: &sluice_core::wire::HistoryBody) -> String {
    let parts: Vec<String> = history
        .actions
        .iter()
        .filter(|a| a.totals.cached_denied > 0)
        .map(|a| format!("{} {}", a.action, a.totals.cached_denied))
        .collect();
    if parts.is_empty() {
        "Counts are the backend's denials per key; the filter's cache denied nothing in this range."
            .to_owned()
    } else {
        format!(
            "Counts are the backend's denials per key. The filter's cached denials carry no key; per action over the history's range: {}.",
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_denials_come_from_the_last_complete_step() {
        use sluice_core::wire::{ActionHistory, HistoryBody, HistoryRange, StepCounts};
        let step = |at_ms, cached_denied| StepCounts {
            at_ms,
            cached_denied,
            ..StepCounts::default()
        };
        let body = HistoryBody {
            at_ms: 1_000_025_000,
            step_ms: 10_000,
            range: HistoryRange::FiveMinutes,
            actions: vec![ActionHistory {
                action: "reply".into(),
                last_seen_ms: None,
                totals: StepCounts {
                    cached_denied: 50,
                    ..StepCounts::default()
                },
                steps: vec![step(1_000_010_000, 47), step(1_000_020_000, 3)],
            }],
        };
        let c = cached_denials(&body, "reply").unwrap();
        assert_eq!(c.rate_text, per_second(4.7));
        assert!(c.any);
        assert_eq!(cached_denials(&body, "post"), None);
        assert!(cached_denied_note(&body).ends_with("reply 50."));
    }
    use sluice_core::wire::KeyLevel;
    use sluice_core::Algorithm;

    fn key(name: &str, level: f64, remaining: u64) -> KeyLevel {
        KeyLevel {
            key: name.into(),
            level,
            capacity: 10,
            remaining,
            last_seen_ms: 0,
        }
    }

    #[test]
    fn the_fullest_keys_are_kept_in_a_steady_order_and_the_rest_counted() {
        let body = LevelsBody {
            at_ms: 1,
            actions: vec![ActionLevels {
                action: "reply".into(),
                algorithm: Algorithm::Gcra,
                capacity: 10,
                allowed_per_s: 2.5,
                denied_per_s: 1.0,
                keys: vec![
                    key("b", 3.0, 7),
                    key("a", 3.0, 7),
                    key("c", 10.0, 0),
                    key("d", 0.2, 9),
                ],
            }],
            ..LevelsBody::default()
        };
        let view = &live_view(&body, 3)[0];
        let names: Vec<&str> = view.funnels.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(view.more, 1);
        assert_eq!(view.allowed_text, "2.5/s");
        assert!(view.denying);
        assert_eq!(view.funnels[2].tone, Tone::Full);
        assert_eq!(view.funnels[2].level_text, "10 / 10");
    }

    #[test]
    fn colour_follows_the_fill() {
        assert_eq!(Tone::of(0.1, 9), Tone::Calm);
        assert_eq!(Tone::of(0.5, 5), Tone::Warm);
        assert_eq!(Tone::of(0.9, 1), Tone::Hot);
        assert_eq!(Tone::of(0.99, 0), Tone::Full);
        assert_eq!(Tone::of(0.0, 0), Tone::Calm);
    }

    #[test]
    fn fill_is_clamped_after_a_rule_shrank() {
        let action = ActionLevels {
            action: "a".into(),
            algorithm: Algorithm::FixedWindow,
            capacity: 4,
            keys: vec![KeyLevel {
                key: "k".into(),
                level: 9.0,
                capacity: 0,
                remaining: 0,
                last_seen_ms: 0,
            }],
            allowed_per_s: 0.0,
            denied_per_s: 0.0,
        };
        let view = ActionView::of(&action, TOP_KEYS);
        assert_eq!(view.funnels[0].fill, 1.0);
        assert_eq!(view.funnels[0].capacity, 4);
    }

    #[test]
    fn a_snapshot_as_the_backend_sends_it_becomes_panels() {
        // Fields this page does not know (from a newer backend) are ignored, not fatal.
        let body: LevelsBody = serde_json::from_str(
            r#"{"at_ms": 5, "actions": [{"action": "reply", "algorithm": "gcra", "capacity": 16,
               "allowed_per_s": 1.5, "denied_per_s": 0.0, "keys": [{"key": "k", "level": 3.5,
               "capacity": 16, "remaining": 12, "last_seen_ms": 4}], "future": true}]}"#,
        )
        .unwrap();
        let view = &live_view(&body, TOP_KEYS)[0];
        assert_eq!(view.algorithm, "gcra");
        assert_eq!(view.allowed_text, "1.5/s");
        assert!(!view.denying);
        assert_eq!(view.funnels[0].remaining, 12);
        assert_eq!(view.funnels[0].level_text, "3.5 / 16");
    }
}
