//! One envoyproxy/ratelimit configuration file, parsed and validated as that service does
//! (`src/config/config_impl.go`): `domain`, nested `descriptors` with `key` and optional `value`,
//! `rate_limit` (`unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`), `shadow_mode`,
//! `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold` and `metadata`; unknown
//! keys refused, as the peer refuses them. sluice adds `algorithm` and `capacity` on a descriptor
//! (the algorithm a limit runs, the peer's being `fixed_window`).
//!
//! Every refusal is collected (not only the first), each naming the file, the path to the field
//! (`descriptors[1].descriptors[0].rate_limit.unit`) and the reason, so `sluice rules check` lists
//! everything wrong with a directory in one run.

use std::fmt;
use std::path::{Path, PathBuf};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use serde_json::{Map, Value};
use sluice_core::Algorithm;

use super::semantics::Semantics;

/// The top-level key of a file that says whose answers its domain gives (sluice's own key; the
/// peer would refuse it).
pub const SEMANTICS_KEY: &str = "sluice_semantics";

/// A limit's length, as the peer names it (any `RateLimitResponse.RateLimit.Unit` but UNKNOWN,
/// case-insensitive, as the peer reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RlsUnit(pub Unit);

impl RlsUnit {
    /// The unit named `text`, as the peer accepts it.
    pub fn parse(text: &str) -> Option<RlsUnit> {
        match Unit::from_str_name(&text.to_ascii_uppercase()) {
            Some(Unit::Unknown) | None => None,
            Some(unit) => Some(RlsUnit(unit)),
        }
    }

    /// Its length in milliseconds (a month 30 days, a year 365, as the peer counts them).
    pub fn millis(self) -> u64 {
        sluice_core::descriptor::unit_millis(self.0 as i32).unwrap_or(1_000)
    }
}

impl fmt::Display for RlsUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.as_str_name().to_ascii_lowercase())
    }
}

/// What a `rate_limit` block sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quota {
    /// `unlimited: true`: always OK, never counted.
    Unlimited,
    /// `requests_per_unit` per `unit` (0: always over the limit).
    PerUnit {
        /// The unit.
        unit: RlsUnit,
        /// Requests per unit.
        requests_per_unit: u32,
    },
}

/// A `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// The quota.
    pub quota: Quota,
    /// `name` (empty when unset, as the peer's).
    pub name: String,
    /// The names of the limits this one replaces when both apply to one request.
    pub replaces: Vec<String>,
}

/// sluice's extension: the algorithm a descriptor's limit runs (default `fixed_window`, the
/// peer's), and its capacity (default `requests_per_unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extension {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The capacity (burst), if set.
    pub capacity: Option<u64>,
}

/// One descriptor of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor {
    /// Its path in the file, for errors: `descriptors[0].descriptors[2]`.
    pub field: String,
    /// `key`.
    pub key: String,
    /// `value`; empty when unset (a key without a value: one bucket per distinct value).
    pub value: String,
    /// `rate_limit`.
    pub rate_limit: Option<RateLimit>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
    /// `detailed_metric` (accepted; sluice's metrics are per action already).
    pub detailed_metric: bool,
    /// `value_to_metric` (accepted; see `detailed_metric`).
    pub value_to_metric: bool,
    /// `share_threshold`: every value a wildcard matches shares one bucket.
    pub share_threshold: bool,
    /// `metadata`, returned in the response's dynamic metadata when this descriptor passes.
    pub metadata: Option<Map<String, Value>>,
    /// sluice's `algorithm` / `capacity`.
    pub extension: Option<Extension>,
    /// `descriptors`.
    pub descriptors: Vec<Descriptor>,
}

impl Descriptor {
    /// `key_value`, or `key` without a value: its identity at its level.
    pub fn composite(&self) -> String {
        if self.value.is_empty() {
            self.key.clone()
        } else {
            format!("{}_{}", self.key, self.value)
        }
    }
}

/// One parsed file: a domain and its descriptors.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainFile {
    /// The file.
    pub file: PathBuf,
    /// `domain`.
    pub domain: String,
    /// `descriptors`.
    pub descriptors: Vec<Descriptor>,
    /// `sluice_semantics` (sluice's own key): whose answers this domain gives, if the file says.
    pub semantics: Option<Semantics>,
}

/// Parses and validates one file's text; `file` only names it in errors. Every refusal is
/// returned.
pub fn parse(file: &Path, text: &str) -> Result<DomainFile, Vec<ConfigError>> {
    let value: Value = match serde_norway::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let at = e
                .location()
                .map(|l| format!("line {}", l.line()))
                .unwrap_or_else(|| "(root)".to_owned());
            return Err(vec![ConfigError::new(
                file,
                at,
                format!("not valid YAML: {e}"),
            )]);
        }
    };
    let mut errors = Vec::new();
    let Value::Object(root) = value else {
        return Err(vec![ConfigError::new(
            file,
            "(root)",
            "expected a map with domain and descriptors",
        )]);
    };
    let mut peer_root = root.clone();
    let semantics = peer_root.remove(SEMANTICS_KEY).and_then(|v| {
        match scalar(&v).map(|text| Semantics::parse(&text)) {
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                errors.push(ConfigError::new(file, SEMANTICS_KEY, e));
                None
            }
            None => {
                errors.push(ConfigError::new(
                    file,
                    SEMANTICS_KEY,
                    "must be a string: peer, sluice, or a comma-separated list of points",
                ));
                None
            }
        }
    });
    unknown_keys(file, &peer_root, "", KeysAllowed::PeerOnly, &mut errors);
    let domain = match root.get("domain") {
        Some(v) => scalar(v).unwrap_or_default(),
        None => String::new(),
    };
    if domain.is_empty() {
        errors.push(ConfigError::new(
            file,
            "domain",
            "is required and must not be empty",
        ));
    }
    let descriptors = list(file, root.get("descriptors"), "descriptors", &mut errors);
    if errors.is_empty() {
        Ok(DomainFile {
            file: file.to_owned(),
            domain,
            descriptors,
            semantics,
        })
    } else {
        Err(errors)
    }
}

fn list(
    file: &Path,
    value: Option<&Value>,
    at: &str,
    errors: &mut Vec<ConfigError>,
) -> Vec<Descriptor> {
    let items = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => {
            errors.push(ConfigError::new(file, at, "must be a list of descriptors"));
            return Vec::new();
        }
    };
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("{at}[{i}]");
        let Some(d) = descriptor(file, item, &field, errors) else {
            continue;
        };
        let composite = d.composite();
        if let Some((_, first)) = seen.iter().find(|(c, _)| *c == composite) {
            errors.push(ConfigError::new(
                file,
                format!("{field}.key"),
                format!("duplicate descriptor composite key '{composite}' (first at {first})"),
            ));
        } else {
            seen.push((composite, field.clone()));
        }
        out.push(d);
    }
    out
}

fn descriptor(
    file: &Path,
    item: &Value,
    at: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Descriptor> {
    let map = checked_map(
        file,
        item,
        at,
        "must be a map (key, value, rate_limit, descriptors, ...)",
        KeysAllowed::WithSluice,
        errors,
    )?;
    let text = |key: &str, errors: &mut Vec<ConfigError>| match map.get(key) {
        None => String::new(),
        Some(v) => scalar(v).unwrap_or_else(|| {
            errors.push(ConfigError::new(
                file,
                format!("{at}.{key}"),
                "must be a string",
            ));
            String::new()
        }),
    };
    let key = text("key", errors);
    if key.is_empty() {
        errors.push(ConfigError::new(
            file,
            format!("{at}.key"),
            "descriptor has empty key",
        ));
    }
    let value = text("value", errors);
    let rate_limit = map
        .get("rate_limit")
        .and_then(|v| rate_limit(file, v, &format!("{at}.rate_limit"), errors));
    let shadow_mode = flag(file, map, "shadow_mode", at, errors);
    let quota_mode = flag(file, map, "quota_mode", at, errors);
    let detailed_metric = flag(file, map, "detailed_metric", at, errors);
    let value_to_metric = flag(file, map, "value_to_metric", at, errors);
    let share_threshold = flag(file, map, "share_threshold", at, errors);
    let composite = if value.is_empty() {
        key.clone()
    } else {
        format!("{key}_{value}")
    };
    if share_threshold && !composite.contains('*') {
        errors.push(ConfigError::new(
            file,
            format!("{at}.share_threshold"),
            format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{composite}'"),
        ));
    }
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => {
            errors.push(ConfigError::new(
                file,
                format!("{at}.metadata"),
                "must be a map",
            ));
            None
        }
    };
    let extension = extension(file, map, at, rate_limit.as_ref(), errors);
    let descriptors = list(
        file,
        map.get("descriptors"),
        &format!("{at}.descriptors"),
        errors,
    );
    Some(Descriptor {
        field: at.to_owned(),
        key,
        value,
        rate_limit,
        shadow_mode,
        quota_mode,
        detailed_metric,
        value_to_metric,
        share_threshold,
        metadata,
        extension,
        descriptors,
    })
}

fn rate_limit(
    file: &Path,
    v: &Value,
    at: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<RateLimit> {
    let map = checked_map(
        file,
        v,
        at,
        "must be a map (unit, requests_per_unit, ...)",
        KeysAllowed::PeerOnly,
        errors,
    )?;
    let unlimited = flag(file, map, "unlimited", at, errors);
    let unit_text = map.get("unit").and_then(scalar).unwrap_or_default();
    let unit = RlsUnit::parse(&unit_text);
    let requests_per_unit = match map.get("requests_per_unit") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => n,
            None => {
                errors.push(ConfigError::new(
                    file,
                    format!("{at}.requests_per_unit"),
                    format!("must be a whole number from 0 to {}; got {n}", u32::MAX),
                ));
                0
            }
        },
        Some(_) => {
            errors.push(ConfigError::new(
                file,
                format!("{at}.requests_per_unit"),
                "must be a whole number",
            ));
            0
        }
    };
    let quota = if unlimited {
        if unit.is_some() {
            errors.push(ConfigError::new(
                file,
                format!("{at}.unit"),
                "should not specify rate limit unit when unlimited",
            ));
        }
        Quota::Unlimited
    } else {
        let Some(unit) = unit else {
            errors.push(ConfigError::new(
                file,
                format!("{at}.unit"),
                format!("invalid rate limit unit '{unit_text}' (second, minute, hour, day, week, month or year)"),
            ));
            return None;
        };
        Quota::PerUnit {
            unit,
            requests_per_unit,
        }
    };
    let name = map.get("name").and_then(scalar).unwrap_or_default();
    let mut replaces = Vec::new();
    match map.get("replaces") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let field = format!("{at}.replaces[{i}]");
                let Value::Object(r) = item else {
                    errors.push(ConfigError::new(file, field, "must be a map with name"));
                    continue;
                };
                unknown_keys(file, r, &field, KeysAllowed::PeerOnly, errors);
                let n = r.get("name").and_then(scalar).unwrap_or_default();
                if n.is_empty() {
                    errors.push(ConfigError::new(
                        file,
                        format!("{field}.name"),
                        "should not have an empty replaces entry",
                    ));
                } else if n == name {
                    errors.push(ConfigError::new(
                        file,
                        format!("{field}.name"),
                        "replaces should not contain name of same descriptor",
                    ));
                } else {
                    replaces.push(n);
                }
            }
        }
        Some(_) => errors.push(ConfigError::new(
            file,
            format!("{at}.replaces"),
            "must be a list of {name: ...}",
        )),
    }
    Some(RateLimit {
        quota,
        name,
        replaces,
    })
}

fn extension(
    file: &Path,
    map: &Map<String, Value>,
    at: &str,
    rate_limit: Option<&RateLimit>,
    errors: &mut Vec<ConfigError>,
) -> Option<Extension> {
    let algorithm = map.get("algorithm");
    let capacity = map.get("capacity");
    if algorithm.is_none() && capacity.is_none() {
        return None;
    }
    if !matches!(
        rate_limit,
        Some(RateLimit {
            quota: Quota::PerUnit { .. },
            ..
        })
    ) {
        errors.push(ConfigError::new(
            file,
            format!("{at}.algorithm"),
            "algorithm and capacity go beside a rate_limit with a unit and requests_per_unit",
        ));
        return None;
    }
    let algorithm = match algorithm.map(scalar) {
        None => Algorithm::FixedWindow,
        Some(Some(name)) => match Algorithm::parse(&name) {
            Some(a) => a,
            None => {
                errors.push(ConfigError::new(
                    file,
                    format!("{at}.algorithm"),
                    format!("unknown algorithm {name:?} (fixed_window, sliding_log, sliding_window, leaky_bucket, gcra, token_bucket)"),
                ));
                return None;
            }
        },
        Some(None) => {
            errors.push(ConfigError::new(
                file,
                format!("{at}.algorithm"),
                "must be an algorithm name",
            ));
            return None;
        }
    };
    let capacity = match capacity {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n) => Some(n),
            None => {
                errors.push(ConfigError::new(
                    file,
                    format!("{at}.capacity"),
                    "must be a whole number",
                ));
                return None;
            }
        },
    };
    Some(Extension {
        algorithm,
        capacity,
    })
}

mod fields;
pub use fields::ConfigError;
use fields::{checked_map, flag, scalar, unknown_keys, KeysAllowed};

#[cfg(test)]
mod tests;
