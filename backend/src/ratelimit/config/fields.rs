//! The YAML readers every field of a ratelimit configuration file goes through: a scalar, a
//! flag, a list, a map with known keys; each refusal names the file and the field.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sluice_core::FieldError;

/// A refusal: the file, then the field and the reason in core's one shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {error}", file.display())]
pub struct ConfigError {
    /// The file at fault (the directory itself when it cannot be listed).
    pub file: PathBuf,
    /// The field (dotted path from the file's root) and the reason.
    pub error: FieldError,
}

impl ConfigError {
    /// A refusal of `field` in `file`.
    pub fn new(file: &Path, field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            error: FieldError::new(field, reason),
        }
    }
}

/// Every key the peer accepts, anywhere in a file (it checks names, not places, and ignores a
/// known key out of place), so a file it loads loads here too.
pub(super) const PEER_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// sluice's own keys, on a descriptor only.
pub(super) const SLUICE_KEYS: [&str; 2] = ["algorithm", "capacity"];

/// Which keys a map may hold besides the peer's ([`PEER_KEYS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeysAllowed {
    /// Only the peer's (the file's root, a `rate_limit`, a `replaces` entry).
    PeerOnly,
    /// The peer's and sluice's own ([`SLUICE_KEYS`]): a descriptor.
    WithSluice,
}

pub(super) fn unknown_keys(
    file: &Path,
    map: &Map<String, Value>,
    at: &str,
    allowed: KeysAllowed,
    errors: &mut Vec<ConfigError>,
) {
    for key in map.keys() {
        let known = PEER_KEYS.contains(&key.as_str())
            || (allowed == KeysAllowed::WithSluice && SLUICE_KEYS.contains(&key.as_str()));
        if !known {
            let field = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            errors.push(ConfigError::new(file, field, "unknown key"));
        }
    }
}

/// `value` as a map (a descriptor, a `rate_limit`), its unknown keys pushed as errors; `None`
/// when it is not a map, with `not_a_map` pushed as the error at `at`.
pub(super) fn checked_map<'v>(
    file: &Path,
    value: &'v Value,
    at: &str,
    not_a_map: &str,
    allowed: KeysAllowed,
    errors: &mut Vec<ConfigError>,
) -> Option<&'v Map<String, Value>> {
    let Value::Object(map) = value else {
        errors.push(ConfigError::new(file, at, not_a_map));
        return None;
    };
    unknown_keys(file, map, at, allowed, errors);
    Some(map)
}

/// A scalar as the peer's YAML library reads it into a string field.
pub(super) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

pub(super) fn flag(
    file: &Path,
    map: &Map<String, Value>,
    key: &str,
    at: &str,
    errors: &mut Vec<ConfigError>,
) -> bool {
    match map.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(ConfigError::new(
                file,
                format!("{at}.{key}"),
                "must be true or false",
            ));
            false
        }
    }
}
