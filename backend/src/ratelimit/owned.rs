//! Rules a ratelimit configuration owns are read-only in the admin API: the file is their
//! source of truth, and a change made elsewhere would be undone by the next publish (or, worse,
//! differ between replicas). Their overrides stay editable: an override is sluice's own layer.

use sluice_core::wire::ratelimit::{file_owner, FILE_OWNED_ACTION_PREFIX};
use sluice_core::{Action, FieldError};

use crate::rules::RuleSet;

/// Refuses a rule put or delete of `action` when a ratelimit config owns it (the admin API
/// answers 400 naming the file), or when `action` is in the owned namespace (`rl:`).
pub fn writable(rules: &RuleSet, action: &Action) -> Result<(), FieldError> {
    if let Some(file) = rules
        .rules
        .get(action.as_str())
        .and_then(|r| file_owner(r.description()))
    {
        return Err(FieldError::new(
            "action",
            format!("{action} is owned by the ratelimit config {file}: edit that file (sluice reloads it within a second)"),
        ));
    }
    if action.as_str().starts_with(FILE_OWNED_ACTION_PREFIX) {
        return Err(FieldError::new(
            "action",
            format!("actions starting with {FILE_OWNED_ACTION_PREFIX} are reserved for the rules of a ratelimit config (--ratelimit-config)"),
        ));
    }
    Ok(())
}
