//! Per-key overrides of an action's rule: `GET/PUT/DELETE /v1/rules/{action}/overrides/{key}` and
//! `GET /v1/rules/{action}/overrides`. An override is a whole rule (any algorithm, validated like
//! every rule) in force for one key of an action that has a rule; every other key keeps the
//! action's rule, and deleting the override (or the rule) gives the key the rule back.

use serde::{Deserialize, Serialize};

use crate::field_error::FieldError;
use crate::limits::MAX_LITERAL_KEY_BYTES;
use crate::rule::Rule;

/// One key's override, as `GET /v1/rules/{action}/overrides` and `GET /v1/rules` list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyOverride {
    /// The key (untrusted text: render it as text only).
    pub key: String,
    /// The rule in force for this key; its `action` is the action's.
    #[cfg_attr(feature = "openapi", schema(value_type = super::RawRule))]
    pub rule: Rule,
}

/// `GET /v1/rules/{action}/overrides` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OverridesBody {
    /// The rules version this list belongs to (the same counter as `GET /v1/rules`).
    #[serde(default)]
    pub version: u64,
    /// The action.
    pub action: String,
    /// Its overrides, sorted by key.
    #[serde(default)]
    pub overrides: Vec<KeyOverride>,
}

/// Checks the `{key}` of an override: 1 to [`MAX_LITERAL_KEY_BYTES`] bytes. Longer keys are
/// refused, not stored by digest: the filter sends a key over that bound as its `sha256:`
/// digest, which is itself short, so that digest is the key to override.
pub fn check_override_key(key: &str) -> Result<(), FieldError> {
    if key.is_empty() {
        return Err(FieldError::new("key", "must not be empty"));
    }
    if key.len() > MAX_LITERAL_KEY_BYTES {
        return Err(FieldError::new(
            "key",
            format!(
                "is {} bytes; an override's key is at most {MAX_LITERAL_KEY_BYTES} bytes (the filter sends a longer key as its `sha256:` digest: override that digest)",
                key.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_the_literal_bound_in_bytes() {
        assert!(check_override_key("vip").is_ok());
        assert!(check_override_key(&"é".repeat(MAX_LITERAL_KEY_BYTES / 2)).is_ok());
        for bad in [
            String::new(),
            "x".repeat(MAX_LITERAL_KEY_BYTES + 1),
            "k".repeat(10_240),
        ] {
            let e = check_override_key(&bad).expect_err("refused");
            assert_eq!(e.field, "key");
        }
    }

    #[test]
    fn an_override_round_trips_as_key_and_rule() {
        let json = r#"{"key":"vip","rule":{"action":"reply","algorithm":"gcra","capacity":160,"rate":{"count":300,"period":"60s"},"mode":"enforce","description":""}}"#;
        let o: KeyOverride = serde_json::from_str(json).expect("parses");
        assert_eq!(o.rule.capacity(), 160);
        let back = serde_json::to_string(&o).expect("serializes");
        assert_eq!(
            serde_json::from_str::<KeyOverride>(&back).expect("again"),
            o
        );
    }
}
