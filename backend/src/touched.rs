//! Actions touched between two flushes of the live activity, for the store's index of touched
//! actions ([`crate::store::ActivityStore::touch_actions`]), which lets the dashboard's views of
//! what is active read the active actions only, not one store read per rule.
//!
//! Every action with a decision in the batch, a history count or a denied key is touched by the
//! flush itself; this set holds the others: the checks of a refused request that still counted
//! (envoyproxy/ratelimit's counting, or a check counted on its own), which the history does not
//! record but whose keys hold state, and touches a flush could not write (retried with the next).

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use sluice_core::Action;

use crate::store::TOUCHED_KEEP;

/// The pending touches, at most [`TOUCHED_KEEP`] actions.
#[derive(Debug, Default)]
pub struct TouchedPending {
    actions: Mutex<BTreeSet<Action>>,
}

impl TouchedPending {
    fn lock(&self) -> MutexGuard<'_, BTreeSet<Action>> {
        self.actions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `action` (a known one costs a lookup, no allocation).
    pub fn touch(&self, action: &Action) {
        let mut actions = self.lock();
        if !actions.contains(action) && actions.len() < TOUCHED_KEEP {
            actions.insert(action.clone());
        }
    }

    /// The pending touches, left pending.
    pub fn actions(&self) -> BTreeSet<Action> {
        self.lock().clone()
    }

    /// Takes the pending touches.
    pub fn take(&self) -> BTreeSet<Action> {
        std::mem::take(&mut *self.lock())
    }

    /// Puts back touches a flush could not write.
    pub fn put_back(&self, actions: impl IntoIterator<Item = Action>) {
        let mut pending = self.lock();
        for action in actions {
            if pending.len() >= TOUCHED_KEEP {
                break;
            }
            pending.insert(action);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_are_taken_once_and_put_back() {
        let pending = TouchedPending::default();
        let a = Action::parse("a").unwrap();
        pending.touch(&a);
        pending.touch(&a);
        assert_eq!(pending.take().len(), 1);
        assert!(pending.take().is_empty());
        pending.put_back([a.clone()]);
        assert_eq!(pending.take().into_iter().collect::<Vec<_>>(), [a]);
    }
}
