//! Helpers shared by the crate's inline unit tests (compiled only for them).

use sluice_core::Action;

/// `text` as an [`Action`]; the tests name only valid ones.
pub(crate) fn action(text: &str) -> Action {
    Action::parse(text).expect("valid action")
}
