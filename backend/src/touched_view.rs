//! What a view of what is active reads (`?scope=active`, top denied, the SSE levels): the rules
//! whose actions are in the store's index of touched actions ([`crate::touched`]), so that with
//! thousands of rules such a view costs a store read per active action, not one per rule.

use std::collections::BTreeSet;

use sluice_core::{Action, Rule};

use crate::activity::ActivityBook;
use crate::store::{ActivityStore, StoreError};

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
