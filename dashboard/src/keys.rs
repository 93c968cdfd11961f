//! The model of the one-user view (`app/keys.rs`): where one key stands on every action
//! (`GET /v1/keys?key=K`, a peek that consumes nothing) and the keys each action denied most over
//! the last 5 minutes (`GET /v1/top-denied`), each a way into the key's view.
//!
//! Keys are untrusted text from the internet: they are kept as they are here, and the view only
//! ever puts them in text nodes and attributes.

use sluice_core::wire::{DeniedMinute, KeyActionState, KeyView, TopDeniedBody};
use sluice_core::Algorithm;

use crate::format::{duration_label, short_number};
use crate::history::clock;
use crate::live_view::Tone;

/// One action's row in the key view.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRow {
    /// The action.
    pub action: String,
    /// `"gcra · enforce"`.
    pub rule_text: String,
    /// `"3.2 / 16"`.
    pub level_text: String,
    /// Level / capacity, clamped to 0..=1.
    pub fill: f64,
    /// The fill's colour.
    pub tone: Tone,
    /// Requests of quantity 1 that could pass now.
    pub remaining: String,
    /// `"now"` or how long until one more would pass (`"2.5s"`).
    pub retry_after: String,
    /// `"12s ago"`, or `"not recently"` when the key is not among the recently active.
    pub last_seen: String,
    /// A per-key override applies (the rule text is the override's; the view marks the row).
    pub overridden: bool,
    /// `"denied 12:03–12:07 UTC, 41 in all"`, or `"not denied in 5 min"`: since when, by the
    /// backend's per-minute counts.
    pub denied_text: String,
    /// The key's own short history: (minute `"12:03"`, denials, height 0..=1), oldest first.
    pub denied_bars: Vec<(String, u64, f64)>,
    /// For a budget (a fixed_window: a quota per window, calendar or not; or any key with cost
    /// reservations or debits), per key: what is spent, what of it is reserved in flight, what is
    /// left, the debt still owed, the overshoot and when it resets:
    /// `"spent 530 of 1000 · 500 reserved in flight (1) · 470 left · overshoot 150 (300 beyond
    /// reservations) · resets in 12d"`, `"spent 1094 of 1000 · 0 left · 94 in debt · ..."`;
    /// empty for other keys, whose level drains continuously.
    pub budget_text: String,
}

/// A key's budget line (see [`KeyRow::budget_text`]). "Spent" is what the limit counts, so it
/// includes the reservations in flight (a reservation is an admission of its units); the parts
/// in flight and the overshoot are the store's per-key budget record (`KeyActionState.budget`).
/// A budget in debt (commits' debits carried above its size) is spent beyond its capacity by
/// the debt, and nothing is left until it is paid back.
pub fn budget_text(a: &KeyActionState) -> String {
    let b = &a.budget;
    let costed = b.reservations_in_flight > 0 || b.debited > 0 || b.debt > 0;
    if a.algorithm != Algorithm::FixedWindow && !costed {
        return String::new();
    }
    let spent = if b.debt > 0 {
        a.capacity.saturating_add(b.debt)
    } else if a.algorithm == Algorithm::FixedWindow {
        a.capacity.saturating_sub(a.remaining)
    } else if a.level.is_finite() {
        a.level.max(0.0).round() as u64
    } else {
        0
    };
    let mut parts = vec![format!("spent {spent} of {}", a.capacity)];
    if b.reservations_in_flight > 0 {
        parts.push(format!(
            "{} reserved in flight ({})",
            b.reserved_in_flight, b.reservations_in_flight
        ));
    }
    parts.push(format!("{} left", a.remaining));
    if b.debt > 0 {
        parts.push(format!("{} in debt", b.debt));
    }
    if b.debited > 0 {
        parts.push(format!(
            "overshoot {} ({} beyond reservations)",
            b.overshoot, b.debited
        ));
    }
    parts.push(if spent == 0 && a.algorithm == Algorithm::FixedWindow {
        "nothing spent this window".to_owned()
    } else if spent == 0 {
        "nothing spent".to_owned()
    } else {
        format!(
            "resets in {}",
            duration_label(a.reset_after_ms as f64 / 1000.0)
        )
    });
    parts.join(" · ")
}

/// The rows of a key view, sorted by action.
pub fn key_rows(view: &KeyView) -> Vec<KeyRow> {
    let mut rows: Vec<KeyRow> = view
        .actions
        .iter()
        .map(|a| {
            let capacity = a.capacity.max(1) as f64;
            let level = if a.level.is_finite() {
                a.level.max(0.0)
            } else {
                0.0
            };
            let fill = (level / capacity).min(1.0);
            KeyRow {
                action: a.action.clone(),
                rule_text: format!("{} · {}", a.algorithm, a.mode.name()),
                overridden: a.overridden,
                denied_text: denied_text(&a.denied_minutes),
                budget_text: budget_text(a),
                denied_bars: {
                    let most = a
                        .denied_minutes
                        .iter()
                        .map(|m| m.denied)
                        .max()
                        .unwrap_or(1)
                        .max(1);
                    a.denied_minutes
                        .iter()
                        .map(|m| {
                            (
                                clock(m.at_ms)[..5].to_owned(),
                                m.denied,
                                m.denied as f64 / most as f64,
                            )
                        })
                        .collect()
                },
                level_text: format!("{} / {}", short_number(level), a.capacity),
                fill,
                tone: Tone::of(fill, a.remaining),
                remaining: a.remaining.to_string(),
                retry_after: match a.retry_after_ms {
                    None => "now".to_owned(),
                    Some(ms) => duration_label(ms as f64 / 1000.0),
                },
                last_seen: match a.last_seen_ms {
                    None => "not recently".to_owned(),
                    Some(at) => ago(view.at_ms.saturating_sub(at)),
                },
            }
        })
        .collect();
    rows.sort_by(|a, b| a.action.cmp(&b.action));
    rows
}

/// Since when a key is denied, from its per-minute counts (oldest first): the first minute's
/// start to the last minute's end, and the sum.
pub fn denied_text(minutes: &[DeniedMinute]) -> String {
    match (minutes.first(), minutes.last()) {
        (Some(first), Some(last)) => {
            let sum: u64 = minutes.iter().map(|m| m.denied).sum();
            format!(
                "denied {}–{} UTC, {sum} in all",
                &clock(first.at_ms)[..5],
                &clock(last.at_ms + 60_000)[..5]
            )
        }
        _ => "not denied in 5 min".to_owned(),
    }
}

/// `"just now"` under a second, else `"12s ago"`, `"3m ago"`.
pub fn ago(ms: u64) -> String {
    if ms < 1000 {
        "just now".to_owned()
    } else {
        format!("{} ago", duration_label((ms / 1000) as f64))
    }
}

/// One action's most denied keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopDenied {
    /// The action.
    pub action: String,
    /// (key, denials), most denied first.
    pub keys: Vec<(String, u64)>,
}

/// The top-denied lists, sorted by action, each most denied first (ties by key, so the list does
/// not reshuffle between refreshes). Actions without a denial are left out.
pub fn top_denied(body: &TopDeniedBody) -> Vec<TopDenied> {
    let mut lists: Vec<TopDenied> = body
        .actions
        .iter()
        .filter(|a| !a.keys.is_empty())
        .map(|a| {
            let mut keys: Vec<(String, u64)> =
                a.keys.iter().map(|k| (k.key.clone(), k.denied)).collect();
            keys.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
            TopDenied {
                action: a.action.clone(),
                keys,
            }
        })
        .collect();
    lists.sort_by(|a, b| a.action.cmp(&b.action));
    lists
}

/// What the search box holds, as a key to look up: exactly as typed (a key may have spaces at
/// its ends), refused only when empty.
pub fn key_query(typed: &str) -> Result<String, &'static str> {
    if typed.is_empty() {
        Err("Type a key to look up.")
    } else {
        Ok(typed.to_owned())
    }
}

/// `GET /v1/keys?key=…&scope=active` for `key`, with every byte outside the unreserved set
/// percent-encoded (as `encodeURIComponent` would), so any key, `&`, `#`, `%` and non-ASCII
/// included, arrives whole. Only the actions where the key has state are asked for; the view
/// fills in the others ([`crate::scope::key_view_with_rest`]).
pub fn key_url(key: &str) -> String {
    format!(
        "/v1/keys?key={}&{}",
        crate::overrides::percent_encode(key),
        crate::scope::VIEW_SCOPE.query()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::wire::{ActionTopDenied, DeniedKey, KeyActionState, KeyBudget};
    use sluice_core::{Algorithm, Mode};

    fn state(action: &str, level: f64, remaining: u64, retry: Option<u64>) -> KeyActionState {
        KeyActionState {
            action: action.into(),
            algorithm: Algorithm::Gcra,
            mode: Mode::Enforce,
            capacity: 16,
            level,
            remaining,
            retry_after_ms: retry,
            reset_after_ms: 0,
            last_seen_ms: Some(1_000_000 - 12_000),
            overridden: false,
            denied_minutes: Vec::new(),
            budget: KeyBudget::default(),
        }
    }

    #[test]
    fn a_budget_reads_spent_left_and_reset() {
        let month = KeyActionState {
            algorithm: Algorithm::FixedWindow,
            capacity: 1000,
            remaining: 970,
            level: 30.0,
            reset_after_ms: 12 * 86_400_000,
            ..state("tokens", 30.0, 970, None)
        };
        assert_eq!(
            budget_text(&month),
            "spent 30 of 1000 · 970 left · resets in 12d"
        );
        let fresh = KeyActionState {
            remaining: 1000,
            ..month.clone()
        };
        assert_eq!(
            budget_text(&fresh),
            "spent 0 of 1000 · 1000 left · nothing spent this window"
        );
        assert_eq!(budget_text(&state("g", 1.0, 15, None)), "");
        // Reservations in flight and a commit's overshoot, on a fixed window and on a meter.
        let held = KeyActionState {
            remaining: 470,
            budget: KeyBudget {
                reserved_in_flight: 500,
                reservations_in_flight: 1,
                overshoot: 150,
                debited: 300,
                overshoot_until_ms: Some(1),
                ..KeyBudget::default()
            },
            ..month.clone()
        };
        assert_eq!(
            budget_text(&held),
            "spent 530 of 1000 · 500 reserved in flight (1) · 470 left · overshoot 150 \
             (300 beyond reservations) · resets in 12d"
        );
        let meter = KeyActionState {
            reset_after_ms: 90_000,
            budget: KeyBudget {
                reserved_in_flight: 4,
                reservations_in_flight: 2,
                ..KeyBudget::default()
            },
            ..state("tokens", 9.6, 6, None)
        };
        assert_eq!(
            budget_text(&meter),
            "spent 10 of 16 · 4 reserved in flight (2) · 6 left · resets in 90s"
        );
        // A budget in debt: spent beyond its size, nothing left, the debt shown.
        let owed = KeyActionState {
            remaining: 0,
            budget: KeyBudget {
                overshoot: 94,
                debited: 300,
                debt: 94,
                overshoot_until_ms: Some(1),
                ..KeyBudget::default()
            },
            ..month.clone()
        };
        assert_eq!(
            budget_text(&owed),
            "spent 1094 of 1000 · 0 left · 94 in debt · overshoot 94 (300 beyond \
             reservations) · resets in 12d"
        );
    }

    #[test]
    fn a_key_reads_per_action() {
        let view = KeyView {
            key: "mallory".into(),
            at_ms: 1_000_000,
            actions: vec![
                state("reply", 16.0, 0, Some(2500)),
                KeyActionState {
                    last_seen_ms: None,
                    ..state("login", 0.0, 16, None)
                },
            ],
        };
        let rows = key_rows(&view);
        assert_eq!(rows[0].action, "login");
        assert_eq!(rows[0].retry_after, "now");
        assert_eq!(rows[0].last_seen, "not recently");
        assert_eq!(rows[0].tone, Tone::Calm);
        assert_eq!(rows[1].level_text, "16 / 16");
        assert_eq!(rows[1].retry_after, "2.5s");
        assert_eq!(rows[1].last_seen, "12s ago");
        assert_eq!(rows[1].tone, Tone::Full);
        assert_eq!(rows[1].rule_text, "gcra · enforce");
        assert!(!rows[1].overridden);
        let marked = key_rows(&KeyView {
            actions: vec![KeyActionState {
                overridden: true,
                ..state("reply", 0.0, 16, None)
            }],
            ..view.clone()
        });
        assert!(marked[0].overridden);
        assert_eq!(marked[0].denied_text, "not denied in 5 min");
        let noon = 43_200_000;
        let minutes = vec![
            DeniedMinute {
                at_ms: noon + 180_000,
                denied: 4,
            },
            DeniedMinute {
                at_ms: noon + 420_000,
                denied: 8,
            },
        ];
        let denied = key_rows(&KeyView {
            actions: vec![KeyActionState {
                denied_minutes: minutes,
                ..state("reply", 0.0, 16, None)
            }],
            ..view.clone()
        });
        assert_eq!(denied[0].denied_text, "denied 12:03–12:08 UTC, 12 in all");
        assert_eq!(denied[0].denied_bars[0], ("12:03".to_owned(), 4, 0.5));
        assert_eq!(marked[0].rule_text, "gcra · enforce", "the override's rule");
        // A level out of range (or not a number) never draws outside the bar.
        let odd = key_rows(&KeyView {
            actions: vec![state("x", f64::NAN, 16, None), state("y", 99.0, 0, Some(1))],
            ..view
        });
        assert_eq!(odd[0].fill, 0.0);
        assert_eq!(odd[1].fill, 1.0);
    }

    #[test]
    fn top_denied_is_most_first_and_stable() {
        let body = TopDeniedBody {
            at_ms: 0,
            span_ms: 300_000,
            actions: vec![
                ActionTopDenied {
                    action: "reply".into(),
                    keys: vec![
                        DeniedKey {
                            key: "b".into(),
                            denied: 3,
                        },
                        DeniedKey {
                            key: "<script>".into(),
                            denied: 9,
                        },
                        DeniedKey {
                            key: "a".into(),
                            denied: 3,
                        },
                    ],
                },
                ActionTopDenied {
                    action: "calm".into(),
                    keys: vec![],
                },
            ],
        };
        let lists = top_denied(&body);
        assert_eq!(lists.len(), 1);
        assert_eq!(
            lists[0].keys,
            [("<script>".into(), 9), ("a".into(), 3), ("b".into(), 3)]
        );
    }

    #[test]
    fn any_key_is_looked_up_whole() {
        assert_eq!(key_url("alice"), "/v1/keys?key=alice&scope=active");
        assert_eq!(
            key_url("a b&c=d#e%\"<'é"),
            "/v1/keys?key=a%20b%26c%3Dd%23e%25%22%3C%27%C3%A9&scope=active"
        );
        assert!(key_query("").is_err());
        assert_eq!(key_query(" x ").unwrap(), " x ");
    }

    #[test]
    fn ages_read_short() {
        assert_eq!(ago(0), "just now");
        assert_eq!(ago(12_400), "12s ago");
        assert_eq!(ago(180_000), "3m ago");
    }
}
