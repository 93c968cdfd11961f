//! What the views show of thousands of rules (an envoyproxy/ratelimit configuration directory
//! loads as one rule per descriptor): the rules table's search and pages, and the actions with
//! nothing to show, which the history, key and live views ask the backend to leave out
//! (`?scope=active`, [`ActionScope`]) and fill in here from the rules, a few by name and the rest
//! counted. Below a few dozen rules every view looks as it always did.
//!
//! Shared by `app/rules_view.rs`, `app/history.rs`, `app/keys.rs` and `app/live_view.rs`.

use std::collections::HashSet;

use sluice_core::wire::{
    ActionHistory, ActionScope, HistoryBody, KeyActionState, KeyBudget, KeyView, LevelsBody,
    RulesBody, StepCounts,
};

use crate::format::short_count;
use crate::rules_view::RuleRow;

/// Rows of the rules table per page: a page draws in a few milliseconds whatever the rule count.
pub const PAGE_ROWS: usize = 50;

/// Actions with nothing to show that a view still draws by name (as quiet history cards, as
/// full-capacity rows of a key); the others are counted in a line.
pub const IDLE_SHOWN: usize = 12;

/// The scope the views ask for: only what is active (the rest is filled in here).
pub const VIEW_SCOPE: ActionScope = ActionScope::Active;

/// One page of the rules table.
#[derive(Debug, Clone, PartialEq)]
pub struct RulesPage {
    /// The rows of this page.
    pub rows: Vec<RuleRow>,
    /// The page shown (0-based), clamped to the last page.
    pub page: usize,
    /// Pages of matching rows (at least 1).
    pub pages: usize,
    /// Rules matching the search.
    pub matching: usize,
    /// `"1–50 of 10,000 rules"`, `"3 of 10,000 rules match “t42”"`, `"No rule matches “x”"`.
    pub text: String,
}

/// Whether a row matches the search: every word of it, case-insensitive, somewhere in the
/// action or the description (a ratelimit rule's description names its file and descriptor).
pub fn matches(row: &RuleRow, words: &[String]) -> bool {
    words.iter().all(|w| {
        row.action.to_lowercase().contains(w) || row.description.to_lowercase().contains(w)
    })
}

/// The search box's words, lowercased.
pub fn words(query: &str) -> Vec<String> {
    query.split_whitespace().map(str::to_lowercase).collect()
}

/// Page `page` of the rows that match `query` (rows already sorted by action).
pub fn page(rows: &[RuleRow], query: &str, page: usize) -> RulesPage {
    let words = words(query);
    let found: Vec<&RuleRow> = rows.iter().filter(|r| matches(r, &words)).collect();
    let matching = found.len();
    let pages = matching.div_ceil(PAGE_ROWS).max(1);
    let page = page.min(pages - 1);
    let from = page * PAGE_ROWS;
    let shown: Vec<RuleRow> = found
        .into_iter()
        .skip(from)
        .take(PAGE_ROWS)
        .cloned()
        .collect();
    let total = short_count(rows.len());
    let quoted = query.trim();
    let text = if matching == 0 {
        format!("No rule matches “{quoted}”")
    } else if pages == 1 && words.is_empty() {
        format!("{total} {}", plural(rows.len(), "rule", "rules"))
    } else {
        let range = format!("{}–{}", from + 1, from + shown.len());
        let range = if pages == 1 {
            short_count(matching)
        } else {
            range
        };
        if words.is_empty() {
            format!("{range} of {total} rules")
        } else {
            format!(
                "{range} of {} {} matching “{quoted}” (of {total})",
                short_count(matching),
                plural(matching, "rule", "rules")
            )
        }
    };
    RulesPage {
        rows: shown,
        page,
        pages,
        matching,
        text,
    }
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// The actions seen within 24 h, from a history of either scope: a rule whose action is not
/// among them is quiet (likely no route).
pub fn seen_actions(body: &HistoryBody) -> HashSet<String> {
    body.actions
        .iter()
        .filter(|a| a.last_seen_ms.is_some())
        .map(|a| a.action.clone())
        .collect()
}

/// The rule actions a list of either scope left out, sorted: what has nothing to show.
fn idle<'a>(rules: &'a RulesBody, listed: &HashSet<&str>) -> Vec<&'a str> {
    let mut idle: Vec<&str> = rules
        .rules
        .iter()
        .map(|r| r.action().as_str())
        .filter(|a| !listed.contains(a))
        .collect();
    idle.sort_unstable();
    idle
}

/// A history of active actions with the first [`IDLE_SHOWN`] quiet rules added back (all zero,
/// never seen: drawn as quiet cards), and how many more quiet rules there are.
pub fn history_with_quiet(body: &HistoryBody, rules: &RulesBody) -> (HistoryBody, usize) {
    let listed: HashSet<&str> = body.actions.iter().map(|a| a.action.as_str()).collect();
    let idle = idle(rules, &listed);
    let steps = zero_steps(body);
    let mut out = body.clone();
    out.actions
        .extend(idle.iter().take(IDLE_SHOWN).map(|action| ActionHistory {
            action: (*action).to_owned(),
            last_seen_ms: None,
            totals: StepCounts::default(),
            steps: steps.clone(),
        }));
    out.actions.sort_by(|a, b| a.action.cmp(&b.action));
    (out, idle.len().saturating_sub(IDLE_SHOWN))
}

/// Every step of the body's range, all zero: the steps of a listed action if there is one, else
/// computed as the backend does (the last step holds `at_ms`).
fn zero_steps(body: &HistoryBody) -> Vec<StepCounts> {
    if let Some(a) = body.actions.first() {
        return a
            .steps
            .iter()
            .map(|s| StepCounts {
                at_ms: s.at_ms,
                ..StepCounts::default()
            })
            .collect();
    }
    let step = body.step_ms.max(1);
    let last = body.at_ms - body.at_ms % step;
    let count = (body.range.millis() / step).min(last / step + 1);
    (0..count)
        .map(|i| StepCounts {
            at_ms: last - (count - 1 - i) * step,
            ..StepCounts::default()
        })
        .collect()
}

/// A key view of active actions with the first [`IDLE_SHOWN`] others added back as a key never
/// seen there reads (level 0, the rule's whole capacity, nothing to wait for), and how many more
/// there are.
pub fn key_view_with_rest(view: &KeyView, rules: &RulesBody) -> (KeyView, usize) {
    let listed: HashSet<&str> = view.actions.iter().map(|a| a.action.as_str()).collect();
    let idle = idle(rules, &listed);
    let mut out = view.clone();
    out.actions.extend(
        rules
            .rules
            .iter()
            .filter(|r| {
                idle.iter()
                    .take(IDLE_SHOWN)
                    .any(|a| *a == r.action().as_str())
            })
            .map(|r| KeyActionState {
                action: r.action().as_str().to_owned(),
                algorithm: r.algorithm(),
                mode: r.mode(),
                capacity: r.capacity(),
                level: 0.0,
                remaining: r.capacity(),
                retry_after_ms: None,
                reset_after_ms: 0,
                last_seen_ms: None,
                overridden: false,
                denied_minutes: Vec::new(),
                budget: KeyBudget::default(),
            }),
    );
    out.actions.sort_by(|a, b| a.action.cmp(&b.action));
    (out, idle.len().saturating_sub(IDLE_SHOWN))
}

/// How many rules the live snapshot (active actions only) leaves out, in words; empty when none.
pub fn idle_live_text(levels: &LevelsBody, rules: &RulesBody) -> String {
    let listed: HashSet<&str> = levels.actions.iter().map(|a| a.action.as_str()).collect();
    match idle(rules, &listed).len() {
        0 => String::new(),
        1 => "1 more rule has no active key.".to_owned(),
        n => format!("{} more rules have no active key.", short_count(n)),
    }
}

/// `"and 9,988 more"` lines under a view that drew [`IDLE_SHOWN`] idle actions by name.
pub fn more_text(more: usize, what: &str) -> String {
    if more == 0 {
        String::new()
    } else {
        format!("and {} more {what}", short_count(more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules_view::rows;
    use crate::test_support::body;
    use sluice_core::wire::HistoryRange;

    fn many(n: usize) -> RulesBody {
        let rules: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"action": "rl:big.tenant_t{i}", "algorithm": "fixed_window", "capacity": {}, "window": "60s", "description": "from ratelimit config big.yaml | big.tenant_t{i}"}}"#,
                    100 + i
                )
            })
            .collect();
        body(&format!(
            r#"{{"version": 1, "rules": [{}]}}"#,
            rules.join(",")
        ))
    }

    #[test]
    fn pages_hold_fifty_rows_and_the_search_finds_by_word() {
        let all = rows(&many(10_000));
        let first = page(&all, "", 0);
        assert_eq!(first.rows.len(), PAGE_ROWS);
        assert_eq!(first.pages, 200);
        assert_eq!(first.text, "1–50 of 10,000 rules");
        let last = page(&all, "", 500);
        assert_eq!(last.page, 199, "clamped to the last page");
        assert_eq!(last.text, "9951–10000 of 10,000 rules");
        let found = page(&all, "  TENANT_T4242 ", 0);
        assert_eq!(found.matching, 1);
        assert_eq!(found.rows[0].action, "rl:big.tenant_t4242");
        assert_eq!(
            found.text,
            "1 of 1 rule matching “TENANT_T4242” (of 10,000)"
        );
        let some = page(&all, "big t999", 0);
        assert_eq!(some.matching, 11, "t999 and t9990..t9999");
        assert_eq!(page(&all, "nothing", 3).text, "No rule matches “nothing”");
        assert_eq!(page(&all, "nothing", 3).pages, 1);
        let few = rows(&many(3));
        assert_eq!(page(&few, "", 0).text, "3 rules");
        assert_eq!(page(&few, "", 0).rows.len(), 3);
    }

    #[test]
    fn idle_counts_read_with_separators() {
        assert_eq!(more_text(0, "quiet rules"), "");
        assert_eq!(
            more_text(9_988, "quiet rules"),
            "and 9,988 more quiet rules"
        );
    }

    #[test]
    fn quiet_rules_come_back_as_zero_histories_a_few_by_name() {
        let rules = many(20);
        let seen = ActionHistory {
            action: "rl:big.tenant_t3".into(),
            last_seen_ms: Some(1_000_000_000),
            totals: StepCounts {
                allowed: 2,
                ..StepCounts::default()
            },
            steps: (0..30)
                .map(|i| StepCounts {
                    at_ms: 1_000_000_000 + i * 10_000,
                    ..StepCounts::default()
                })
                .collect(),
        };
        let active = HistoryBody {
            at_ms: 1_000_295_000,
            step_ms: 10_000,
            range: HistoryRange::FiveMinutes,
            actions: vec![seen],
        };
        let (full, more) = history_with_quiet(&active, &rules);
        assert_eq!(full.actions.len(), 1 + IDLE_SHOWN);
        assert_eq!(more, 20 - 1 - IDLE_SHOWN);
        let quiet = full.actions.iter().find(|a| a.action == "rl:big.tenant_t0");
        let quiet = quiet.expect("the first quiet rule by name");
        assert_eq!(quiet.last_seen_ms, None);
        assert_eq!(quiet.steps.len(), 30);
        assert_eq!(quiet.steps[29].at_ms, 1_000_290_000);
        assert!(full.actions.windows(2).all(|w| w[0].action < w[1].action));
        let seen = seen_actions(&full);
        assert!(seen.contains("rl:big.tenant_t3") && seen.len() == 1);

        // Nothing active: the steps are the backend's, ending with the step holding at_ms.
        let empty = HistoryBody {
            actions: Vec::new(),
            ..active
        };
        let (full, _) = history_with_quiet(&empty, &rules);
        let steps = &full.actions[0].steps;
        assert_eq!(steps.len(), 30);
        assert_eq!(steps[29].at_ms, 1_000_290_000);
        assert_eq!(steps[0].at_ms, 1_000_000_000);
    }

    #[test]
    fn a_key_reads_full_where_it_has_no_state() {
        let rules = many(3);
        let view = KeyView {
            key: "alice".into(),
            at_ms: 5,
            actions: Vec::new(),
        };
        let (full, more) = key_view_with_rest(&view, &rules);
        assert_eq!(more, 0);
        assert_eq!(full.actions.len(), 3);
        let t1 = &full.actions[1];
        assert_eq!(t1.action, "rl:big.tenant_t1");
        assert_eq!((t1.remaining, t1.capacity, t1.level), (101, 101, 0.0));
        assert!(!t1.is_active(), "exactly what the backend leaves out");
        let (_, more) = key_view_with_rest(&view, &many(30));
        assert_eq!(more, 30 - IDLE_SHOWN);
    }

    #[test]
    fn the_live_view_counts_the_rules_it_leaves_out() {
        let rules = many(3);
        assert_eq!(
            idle_live_text(&LevelsBody::default(), &rules),
            "3 more rules have no active key."
        );
        assert_eq!(
            idle_live_text(&LevelsBody::default(), &many(1)),
            "1 more rule has no active key."
        );
        assert_eq!(
            idle_live_text(&LevelsBody::default(), &RulesBody::default()),
            ""
        );
    }
}
