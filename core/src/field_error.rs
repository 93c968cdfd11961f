//! The one refusal shape of every input a user writes: a rule, a request body, `CL.THROTTLE`
//! arguments, the filter's configuration. Each names the field at fault and the reason, so the
//! backend's 400s, Envoy's refusal of a filter config and the dashboard's inline messages all say
//! the same thing the same way.

/// A refused input: which field, and why. Shown to users as `field: reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// The field at fault as a dotted JSON path (`rate.period`, `routes[0].key.name`), or
    /// `(root)` for the whole input.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub reason: String,
}

impl FieldError {
    /// A refusal of `field` for `reason`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
