//! The descriptor tree of one domain and the peer's lookup (`GetLimit` in its
//! `config_impl.go`): at each level the entry's `key_value` first, then the level's wildcard
//! patterns in file order, then the bare `key`; a limit applies only when it sits at the level of
//! the descriptor's last entry (a descriptor with more entries than the tree is deep matches
//! nothing), and the walk stops at a level without nested descriptors.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};
use sluice_core::Algorithm;

use super::config::{Quota, RlsUnit};

/// A limit as the rate limit service applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The sluice action its buckets live under (`rl:...`); `None` for `unlimited` and for
    /// `requests_per_unit: 0`, which need no state.
    pub action: Option<String>,
    /// The peer's quota.
    pub quota: Quota,
    /// `name` (for `replaces`, and `current_limit.name`).
    pub name: String,
    /// Names this limit replaces.
    pub replaces: Vec<String>,
    /// `shadow_mode`: never over.
    pub shadow_mode: bool,
    /// `quota_mode`: over only when every quota-mode descriptor of the request is.
    pub quota_mode: bool,
    /// `metadata`, for the response when this descriptor passes.
    pub metadata: Option<Map<String, Value>>,
    /// The algorithm its rule runs.
    pub algorithm: Algorithm,
    /// The descriptor path in the peer's notation (`domain.key_value.key`), for logs.
    pub path: String,
}

impl Limit {
    /// The unit and requests per unit, unless unlimited.
    pub fn per_unit(&self) -> Option<(RlsUnit, u32)> {
        match self.quota {
            Quota::PerUnit {
                unit,
                requests_per_unit,
            } => Some((unit, requests_per_unit)),
            Quota::Unlimited => None,
        }
    }
}

/// One level of the tree: the descriptors under a parent (or a domain's top level).
#[derive(Debug, Clone, Default)]
pub struct Level {
    /// By composite key: `key_value`, or `key` for a descriptor without a value.
    pub children: HashMap<String, Node>,
    /// Composite keys holding `*`, in file order, split on `*` once here.
    pub wildcards: Vec<(String, Vec<String>)>,
}

/// One descriptor of the tree.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// Its limit, if it has a `rate_limit`.
    pub limit: Option<Arc<Limit>>,
    /// `share_threshold` on a wildcard: every matching value shares one bucket.
    pub share_threshold: bool,
    /// The nested descriptors.
    pub level: Level,
}

impl Level {
    /// Puts `other`'s children beside these (wildcards after these); returns the composite keys
    /// both held (this level's child is kept).
    pub fn merge(&mut self, other: Level) -> Vec<String> {
        let mut repeated = Vec::new();
        let Level {
            children,
            wildcards,
        } = other;
        for (key, parts) in wildcards {
            if !self.children.contains_key(&key) {
                self.wildcards.push((key, parts));
            }
        }
        for (key, node) in children {
            match self.children.entry(key) {
                Entry::Occupied(taken) => repeated.push(taken.key().clone()),
                Entry::Vacant(free) => {
                    free.insert(node);
                }
            }
        }
        repeated.sort();
        repeated
    }

    /// Adds a child under its composite key.
    pub fn insert(&mut self, composite: String, node: Node) {
        if composite.contains('*') {
            let parts = composite.split('*').map(str::to_owned).collect();
            self.wildcards.push((composite.clone(), parts));
        }
        self.children.insert(composite, node);
    }
}

/// A descriptor's limit and the bucket it counts in.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched {
    /// The limit.
    pub limit: Arc<Limit>,
    /// The bucket within the limit's action: the entries' values (a shared wildcard's pattern in
    /// place of its value), joined as core joins descriptor values.
    pub key: String,
}

/// Whether `value` matches a pattern split on `*` (each `*` any run of characters, possibly
/// empty), as the peer's `wildcardMatch`.
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == value);
    };
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The limit for a descriptor's entries under a domain's top `level`, as the peer finds it.
pub fn lookup<'a>(
    level: &Level,
    entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Option<Matched> {
    let last = entries.len().checked_sub(1)?;
    let mut level = level;
    let mut values: Vec<String> = Vec::with_capacity(last + 1);
    let mut found = None;
    for (i, (key, value)) in entries.enumerate() {
        let composite = format!("{key}_{value}");
        let mut value_used = value.to_owned();
        let mut next = level.children.get(&composite);
        if next.is_none() {
            if let Some((pattern, node)) = level
                .wildcards
                .iter()
                .find(|(_, parts)| wildcard_match(parts, &composite))
                .and_then(|(pattern, _)| level.children.get(pattern).map(|n| (pattern, n)))
            {
                if node.share_threshold {
                    let prefix = format!("{key}_");
                    value_used = pattern.strip_prefix(&prefix).unwrap_or(pattern).to_owned();
                }
                next = Some(node);
            }
        }
        let next = next.or_else(|| level.children.get(key));
        values.push(value_used);
        let Some(node) = next else { break };
        if i == last {
            found = node.limit.clone();
        }
        if node.level.children.is_empty() {
            break;
        }
        level = &node.level;
    }
    let limit = found?;
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    Some(Matched {
        limit,
        key: sluice_core::descriptor::join(&refs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards_as_the_peer_matches_them() {
        assert!(wildcard_match(&parts("key1_value*"), "key1_value1"));
        assert!(wildcard_match(&parts("key1_value*"), "key1_value"));
        assert!(!wildcard_match(&parts("key1_value*"), "key1_valu"));
        assert!(wildcard_match(
            &parts("path_/api/*/action"),
            "path_/api/123/action"
        ));
        assert!(!wildcard_match(
            &parts("path_/api/*/action"),
            "path_/api/123/other"
        ));
        assert!(wildcard_match(
            &parts("route_/api/*/resource/*/action"),
            "route_/api/v1/resource/123/action"
        ));
        assert!(!wildcard_match(&parts("a_x*x"), "a_x"));
        assert!(wildcard_match(&parts("exact"), "exact"));
    }
}
