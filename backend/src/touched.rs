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

use sluice_core::{Action, Rule};

use crate::activity::ActivityBook;
use crate::store::{ActivityStore, StoreError, TOUCHED_KEEP};

/// How much earlier than a view's own bound an action's last touch may be and still be read:
/// the touch is written by the replica that flushed, by its clock, which may run behind the
/// clock of the replica that answers the view.
pub const CLOCK_MARGIN_MS: u64 = 60_000;

/// Since when a view of what is active must read an action's store entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TouchedSince {
    /// Any action in the index: its keys may hold state for as long as its rule's window.
    Ever,
    /// Actions touched within a span before now (a view that shows nothing older).
    Within {
        /// How far back the view shows anything.
        span_ms: u64,
        /// The view's now.
        now_ms: u64,
    },
}

impl TouchedSince {
    fn since_ms(self) -> u64 {
        match self {
            TouchedSince::Ever => 0,
            TouchedSince::Within { span_ms, now_ms } => {
                now_ms.saturating_sub(span_ms.saturating_add(CLOCK_MARGIN_MS))
            }
        }
    }
}

/// The rules among `rules` whose actions are in the store's index of touched actions (touched
/// as `since` says), not yet flushed to it by this replica (`book`), or named in `also`: what a
/// view of what is active reads, one store read per active action instead of one per rule. The
/// order of `rules` is kept.
pub async fn narrow<S: ActivityStore + ?Sized>(
    store: &S,
    book: &ActivityBook,
    rules: Vec<Rule>,
    since: TouchedSince,
    also: &BTreeSet<&str>,
) -> Result<Vec<Rule>, StoreError> {
    let mut touched: BTreeSet<Action> = store
        .touched_actions(since.since_ms())
        .await?
        .into_iter()
        .collect();
    touched.extend(book.unflushed_actions());
    Ok(rules
        .into_iter()
        .filter(|r| touched.contains(r.action()) || also.contains(r.action().as_str()))
        .collect())
}

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
