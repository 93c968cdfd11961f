//! `GET /v1/history`: the stored steps of every action with a rule, every step of the range
//! present (zeros included), with totals.

use sluice_core::wire::{ActionHistory, ActionScope, HistoryBody, HistoryRange, HISTORY_STEP_MS};
use sluice_core::Rule;

use super::{step_start, StoredHistory, Tally};
use crate::store::{HistoryStore, StoreError};

/// The first step and the number of steps of `range` read at `now_ms` (the last step is the one
/// holding `now_ms`, still filling).
pub fn range_steps(range: HistoryRange, now_ms: u64) -> (u64, usize) {
    let last = step_start(now_ms);
    let wanted = range.millis() / HISTORY_STEP_MS;
    let steps = wanted.min(last / HISTORY_STEP_MS + 1);
    (last - (steps - 1) * HISTORY_STEP_MS, steps as usize)
}

/// One action's history over `steps` steps from `first_step_ms`: every step present, oldest
/// first; stored steps outside the range are ignored.
pub fn assemble(
    action: &str,
    first_step_ms: u64,
    steps: usize,
    stored: StoredHistory,
) -> ActionHistory {
    let mut slots = vec![Tally::default(); steps];
    for (at, tally) in stored.steps {
        if at < first_step_ms || at % HISTORY_STEP_MS != 0 {
            continue;
        }
        let index = ((at - first_step_ms) / HISTORY_STEP_MS) as usize;
        if let Some(slot) = slots.get_mut(index) {
            slot.add(&tally);
        }
    }
    let mut totals = Tally::default();
    for slot in &slots {
        totals.add(slot);
    }
    ActionHistory {
        action: action.to_owned(),
        last_seen_ms: stored.last_seen_ms,
        totals: Tally { at_ms: 0, ..totals },
        steps: slots
            .iter()
            .enumerate()
            .map(|(i, t)| Tally {
                at_ms: first_step_ms + i as u64 * HISTORY_STEP_MS,
                ..*t
            })
            .collect(),
    }
}

/// The history of `rules` (sorted by action) over `range`, read at `now_ms`: of every rule's
/// action, or of the active ones only ([`ActionScope::Active`]: an action with nothing stored
/// is never laid out, so thousands of idle rules cost one read each and no steps).
pub async fn history(
    store: &dyn HistoryStore,
    rules: &[Rule],
    range: HistoryRange,
    scope: ActionScope,
    now_ms: u64,
) -> Result<HistoryBody, StoreError> {
    let (first, steps) = range_steps(range, now_ms);
    let reads = rules.iter().map(|rule| async move {
        let stored = store
            .read_history(rule.action(), first, steps, now_ms)
            .await?;
        let idle = stored.steps.is_empty() && stored.last_seen_ms.is_none();
        if scope == ActionScope::Active && idle {
            return Ok(None);
        }
        let history = assemble(rule.action().as_str(), first, steps, stored);
        let shown = scope == ActionScope::All || history.is_active();
        Ok::<_, StoreError>(shown.then_some(history))
    });
    let mut actions: Vec<ActionHistory> = crate::fanout::per_rule(reads.collect())
        .await?
        .into_iter()
        .flatten()
        .collect();
    actions.sort_by(|a, b| a.action.cmp(&b.action));
    Ok(HistoryBody {
        at_ms: now_ms,
        step_ms: HISTORY_STEP_MS,
        range,
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_012_345;

    #[test]
    fn ranges_end_at_the_step_holding_now() {
        assert_eq!(
            range_steps(HistoryRange::FiveMinutes, NOW),
            (1_700_000_010_000 - 29 * 10_000, 30)
        );
        assert_eq!(
            range_steps(HistoryRange::OneHour, NOW),
            (1_700_000_010_000 - 359 * 10_000, 360)
        );
        assert_eq!(range_steps(HistoryRange::OneHour, 25_000), (0, 3));
    }

    #[test]
    fn every_step_is_present_and_totals_add_up() {
        let (first, steps) = range_steps(HistoryRange::FiveMinutes, NOW);
        let t = |allowed, denied| Tally {
            allowed,
            denied,
            ..Tally::default()
        };
        let stored = StoredHistory {
            steps: vec![
                (first, t(1, 0)),
                (first + 290_000, t(5, 2)),
                (first - 10_000, t(100, 100)),  // before the range
                (first + 300_000, t(100, 100)), // after it
                (first + 5, t(100, 100)),       // not a step start
            ],
            last_seen_ms: Some(NOW - 1),
        };
        let h = assemble("reply", first, steps, stored);
        assert_eq!(h.steps.len(), 30);
        assert_eq!(h.steps[0].at_ms, first);
        assert_eq!(h.steps[0].allowed, 1);
        assert_eq!(h.steps[29].at_ms, 1_700_000_010_000);
        assert_eq!((h.steps[29].allowed, h.steps[29].denied), (5, 2));
        assert!(h.steps[1..29]
            .iter()
            .all(|s| s.allowed == 0 && s.denied == 0));
        assert_eq!(
            (h.totals.at_ms, h.totals.allowed, h.totals.denied),
            (0, 6, 2)
        );
        assert_eq!(h.last_seen_ms, Some(NOW - 1));
    }
}
