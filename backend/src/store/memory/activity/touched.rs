//! The memory store's index of touched actions (`ActivityStore::touch_actions`): action → last
//! touched (ms), at most a bound of them, the least recently touched dropped first.

use std::collections::HashMap;
use std::sync::Mutex;

use sluice_core::Action;

/// Action → last touched, at most `keep` of them.
pub(crate) struct TouchedIndex {
    keep: usize,
    touched: Mutex<HashMap<Action, u64>>,
}

impl TouchedIndex {
    /// An empty index keeping the `keep` most recently touched actions.
    pub(crate) fn new(keep: usize) -> TouchedIndex {
        TouchedIndex {
            keep,
            touched: Mutex::new(HashMap::new()),
        }
    }

    /// Raises each action's time to `at_ms` (never lowers it, as Redis's `ZADD GT`), then drops
    /// the least recently touched beyond the bound (ties: the greatest name first, as a zset
    /// ordered by score then member keeps the greatest at the top).
    pub(crate) fn touch(&self, actions: &[Action], at_ms: u64) {
        let mut touched = self
            .touched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for action in actions {
            let at = touched.entry(action.clone()).or_insert(at_ms);
            *at = (*at).max(at_ms);
        }
        if touched.len() > self.keep {
            let mut oldest: Vec<(Action, u64)> = touched.drain().collect();
            oldest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
            oldest.truncate(self.keep);
            touched.extend(oldest);
        }
    }

    /// The actions touched at or after `since_ms`.
    pub(crate) fn since(&self, since_ms: u64) -> Vec<Action> {
        self.touched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter(|(_, at)| **at >= since_ms)
            .map(|(action, _)| action.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(name: &str) -> Action {
        Action::parse(name).unwrap()
    }

    fn sorted(mut actions: Vec<Action>) -> Vec<String> {
        actions.sort();
        actions.iter().map(|a| a.as_str().to_owned()).collect()
    }

    #[test]
    fn times_only_rise_and_the_least_recently_touched_go_past_the_bound() {
        let index = TouchedIndex::new(2);
        index.touch(&[action("a"), action("b")], 100);
        index.touch(&[action("a")], 50);
        assert_eq!(
            sorted(index.since(100)),
            ["a", "b"],
            "50 did not lower a's 100"
        );
        assert_eq!(sorted(index.since(101)), Vec::<String>::new());
        index.touch(&[action("c")], 200);
        index.touch(&[action("a")], 300);
        // b (100) was the least recently touched of three: dropped.
        assert_eq!(sorted(index.since(0)), ["a", "c"]);
        assert_eq!(sorted(index.since(250)), ["a"]);
    }
}
