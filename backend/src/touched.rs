//! Actions touched between two flushes of the live activity, for the store's index of touched
//! actions ([`crate::store::ActivityStore::touch_actions`]), which lets the dashboard's views of
//! what is active read the active actions only, not one store read per rule.
//!
//! Every action with a decision in the batch, a history count or a denied key is touched by the
//! flush itself; this set holds the others: the checks of a refused request that still counted
//! (envoyproxy/ratelimit's counting, or a check counted on its own), which the history does not
//! record but whose keys hold state, and touches a flush could not write (retried with the next).
//!
//! A flush's touches stay visible ([`TouchedPending::actions`]) until its write has landed in the
//! store: taken from the pending set but not yet in the index, a view read in between would miss
//! them (a browser test caught the dashboard's key view dropping an action that way).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use sluice_core::Action;

use crate::store::TOUCHED_KEEP;

#[derive(Debug, Default)]
struct State {
    /// Touched since the last flush took them.
    pending: BTreeSet<Action>,
    /// Taken by a flush whose write has not ended, with how many such flushes carry each.
    in_flight: BTreeMap<Action, usize>,
}

/// The pending touches, at most [`TOUCHED_KEEP`] actions, and those of flushes in flight.
#[derive(Debug, Default)]
pub struct TouchedPending {
    state: Mutex<State>,
}

impl TouchedPending {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `action` (a known one costs a lookup, no allocation).
    pub fn touch(&self, action: &Action) {
        let mut state = self.lock();
        if !state.pending.contains(action) && state.pending.len() < TOUCHED_KEEP {
            state.pending.insert(action.clone());
        }
    }

    /// The touches not yet in the store: pending, or taken by a flush still writing.
    pub fn actions(&self) -> BTreeSet<Action> {
        let state = self.lock();
        let mut actions = state.pending.clone();
        actions.extend(state.in_flight.keys().cloned());
        actions
    }

    /// Takes the pending touches, with `also` (what the flush writes anything of), for a flush
    /// that must end with [`TouchedPending::flush_ended`].
    pub fn begin_flush(&self, also: impl IntoIterator<Item = Action>) -> BTreeSet<Action> {
        let mut state = self.lock();
        let mut taken = std::mem::take(&mut state.pending);
        taken.extend(also);
        for action in &taken {
            *state.in_flight.entry(action.clone()).or_default() += 1;
        }
        taken
    }

    /// Ends a flush begun with [`TouchedPending::begin_flush`]: its touches are in the store, or
    /// (`written` false) pending again for the next flush.
    pub fn flush_ended(&self, taken: &BTreeSet<Action>, written: bool) {
        let mut state = self.lock();
        for action in taken {
            if let Some(count) = state.in_flight.get_mut(action) {
                *count -= 1;
                if *count == 0 {
                    state.in_flight.remove(action);
                }
            }
            if !written && state.pending.len() < TOUCHED_KEEP {
                state.pending.insert(action.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str) -> Action {
        Action::parse(name).unwrap()
    }

    #[test]
    fn touches_are_taken_once_and_put_back_when_not_written() {
        let pending = TouchedPending::default();
        pending.touch(&a("a"));
        pending.touch(&a("a"));
        let taken = pending.begin_flush([]);
        assert_eq!(taken.len(), 1);
        pending.flush_ended(&taken, false);
        let again = pending.begin_flush([]);
        assert_eq!(again.into_iter().collect::<Vec<_>>(), [a("a")]);
    }

    #[test]
    fn a_flush_in_flight_keeps_its_touches_visible_until_written() {
        let pending = TouchedPending::default();
        pending.touch(&a("a"));
        let first = pending.begin_flush([a("b")]);
        assert_eq!(pending.actions(), first, "taken, not yet in the store");
        let second = pending.begin_flush([a("b")]);
        pending.flush_ended(&first, true);
        assert_eq!(
            pending.actions(),
            [a("b")].into(),
            "the second flush still carries b"
        );
        pending.flush_ended(&second, true);
        assert!(pending.actions().is_empty());
        assert!(
            pending.begin_flush([]).is_empty(),
            "written: nothing pending"
        );
    }
}
