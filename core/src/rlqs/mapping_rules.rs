//! A mapping file's rules (`--rlqs-mapping FILE`): which sluice check a quota filter bucket id
//! stands for when the default mapping ([`super::mapping`]) does not fit the ids an Envoy
//! configuration already builds. Written once by the user, checked at start with every refusal
//! naming its field (`mappings[2].key[0]`).
//!
//! ```yaml
//! mappings:
//!   - when: {route: api}        # entries that must be present with exactly these values
//!     action: api_calls         # the action, or `action_from: <entry>` to take it from an entry
//!     key: [tenant, user]       # entries whose values, in this order, form the key
//! unmatched: default_mapping    # or allow_all, deny_all
//! ```
//!
//! The first rule that applies wins: its `when` entries match and every entry its `key` (and
//! `action_from`) names is present. The key's values are joined as an RLS descriptor's are
//! ([`crate::descriptor::join`]), so `{route: api, tenant: t1, user: alice}` above meters action
//! `api_calls`, key `t1|alice`, the same state an RLS descriptor `(tenant t1, user alice)` of
//! that action would. A bucket id no rule applies to follows `unmatched`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::mapping::{map_bucket, Unmapped};
use crate::descriptor::{join, MAX_ENTRIES};
use crate::field_error::FieldError;
use crate::rule::Action;

/// Most rules in one mapping file: each bucket id is tried against them in order, once per new
/// bucket.
pub const MAX_MAPPING_RULES: usize = 1_000;

/// What a bucket id that no rule applies to gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Unmatched {
    /// The default mapping: `name` names the action, the other entries form the key.
    #[default]
    DefaultMapping,
    /// Admitted by Envoy, metered by nobody.
    AllowAll,
    /// Denied by Envoy: only buckets the file names are admitted.
    DenyAll,
}

/// A mapping file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    mappings: Vec<RawRule>,
    #[serde(default)]
    unmatched: Unmatched,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    when: BTreeMap<String, String>,
    action: Option<String>,
    action_from: Option<String>,
    #[serde(default)]
    key: Vec<String>,
}

/// Where a rule takes its action from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ActionSource {
    Named(Action),
    Entry(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MappingRule {
    when: BTreeMap<String, String>,
    action: ActionSource,
    key: Vec<String>,
}

/// The mapping in force: the file's rules, then what `unmatched` says. The default
/// ([`Mapping::default`]) is the default mapping alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mapping {
    rules: Vec<MappingRule>,
    unmatched: Unmatched,
}

/// What a bucket id stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// A sluice check: (action, key).
    Check(Action, String),
    /// No check: Envoy admits the bucket (unmapped, `unmatched: allow_all`).
    AllowAll,
    /// No check: Envoy denies the bucket (`unmatched: deny_all`).
    DenyAll,
}

impl Mapping {
    /// Reads a mapping file's JSON form (YAML is parsed to it first) and checks every rule.
    pub fn from_value(value: &serde_json::Value) -> Result<Mapping, FieldError> {
        let raw: RawFile = crate::wire::parse::from_value(value, "mapping")?;
        if raw.mappings.len() > MAX_MAPPING_RULES {
            return Err(FieldError::new(
                "mappings",
                format!(
                    "at most {MAX_MAPPING_RULES} rules; got {}",
                    raw.mappings.len()
                ),
            ));
        }
        let rules = raw
            .mappings
            .into_iter()
            .enumerate()
            .map(|(i, r)| checked(i, r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Mapping {
            rules,
            unmatched: raw.unmatched,
        })
    }

    /// How many rules the file holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True for the default mapping alone.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The check one bucket id stands for (entries in any order).
    pub fn map<'a>(&self, entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Mapped {
        let entries: BTreeMap<&str, &str> = entries.into_iter().collect();
        for rule in &self.rules {
            if let Some(mapped) = rule.apply(&entries) {
                return mapped;
            }
        }
        match self.unmatched {
            Unmatched::DefaultMapping => match map_bucket(entries.iter().map(|(k, v)| (*k, *v))) {
                Ok((action, key)) => Mapped::Check(action, key),
                Err(Unmapped::NoName | Unmapped::BadName(_) | Unmapped::TooManyEntries) => {
                    Mapped::AllowAll
                }
            },
            Unmatched::AllowAll => Mapped::AllowAll,
            Unmatched::DenyAll => Mapped::DenyAll,
        }
    }
}

impl MappingRule {
    fn apply(&self, entries: &BTreeMap<&str, &str>) -> Option<Mapped> {
        let matches = self
            .when
            .iter()
            .all(|(k, v)| entries.get(k.as_str()) == Some(&v.as_str()));
        if !matches {
            return None;
        }
        let values: Vec<&str> = self
            .key
            .iter()
            .map(|k| entries.get(k.as_str()).copied())
            .collect::<Option<_>>()?;
        let action = match &self.action {
            ActionSource::Named(a) => a.clone(),
            // An entry whose value is not an action name: the rule does not apply.
            ActionSource::Entry(e) => Action::parse(entries.get(e.as_str())?).ok()?,
        };
        Some(Mapped::Check(action, join(&values)))
    }
}

fn checked(i: usize, raw: RawRule) -> Result<MappingRule, FieldError> {
    let at = |field: &str| format!("mappings[{i}].{field}");
    let action =
        match (raw.action, raw.action_from) {
            (Some(a), None) => ActionSource::Named(
                Action::parse(&a).map_err(|e| FieldError::new(at("action"), e.to_string()))?,
            ),
            (None, Some(e)) if !e.is_empty() => ActionSource::Entry(e),
            (None, Some(_)) => {
                return Err(FieldError::new(at("action_from"), "must name an entry"));
            }
            (None, None) => return Err(FieldError::new(
                at("action"),
                "required: `action: <name>`, or `action_from: <entry>` to take it from an entry",
            )),
            (Some(_), Some(_)) => {
                return Err(FieldError::new(
                    at("action_from"),
                    "give `action` or `action_from`, not both",
                ))
            }
        };
    if raw.key.len() > MAX_ENTRIES {
        return Err(FieldError::new(
            at("key"),
            format!(
                "at most {MAX_ENTRIES} entries (an RLS descriptor's bound); got {}",
                raw.key.len()
            ),
        ));
    }
    for (j, k) in raw.key.iter().enumerate() {
        if k.is_empty() {
            return Err(FieldError::new(
                format!("mappings[{i}].key[{j}]"),
                "must name an entry",
            ));
        }
        if raw.key[..j].contains(k) {
            return Err(FieldError::new(
                format!("mappings[{i}].key[{j}]"),
                format!("entry {k:?} is named twice"),
            ));
        }
    }
    Ok(MappingRule {
        when: raw.when,
        action,
        key: raw.key,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mapping(v: serde_json::Value) -> Mapping {
        Mapping::from_value(&v).unwrap()
    }

    fn refusal(v: serde_json::Value) -> (String, String) {
        let e = Mapping::from_value(&v).unwrap_err();
        (e.field, e.reason)
    }

    fn check(a: &str, k: &str) -> Mapped {
        Mapped::Check(Action::parse(a).unwrap(), k.to_owned())
    }

    #[test]
    fn the_documented_example() {
        let m = mapping(json!({"mappings": [
            {"when": {"route": "api"}, "action": "api_calls", "key": ["tenant", "user"]}
        ]}));
        assert_eq!(
            m.map([("route", "api"), ("user", "alice"), ("tenant", "t1")]),
            check("api_calls", "t1|alice")
        );
        // No rule applies (no tenant): the default mapping.
        assert_eq!(
            m.map([("route", "api"), ("user", "alice"), ("name", "u")]),
            check("u", "api|alice")
        );
        assert_eq!(m.map([("route", "api")]), Mapped::AllowAll);
    }

    #[test]
    fn the_first_rule_that_applies_wins_and_action_from_reads_an_entry() {
        let m = mapping(json!({"mappings": [
            {"when": {"tier": "free"}, "action": "free", "key": ["user"]},
            {"action_from": "kind", "key": ["user"]},
        ], "unmatched": "deny_all"}));
        assert_eq!(
            m.map([("tier", "free"), ("kind", "paid"), ("user", "a")]),
            check("free", "a")
        );
        assert_eq!(m.map([("kind", "paid"), ("user", "a")]), check("paid", "a"));
        // `kind` is not an action name: the rule does not apply; unmatched denies.
        assert_eq!(m.map([("kind", "a b"), ("user", "a")]), Mapped::DenyAll);
        assert_eq!(m.map([("user", "a")]), Mapped::DenyAll);
    }

    #[test]
    fn no_file_is_the_default_mapping() {
        let m = Mapping::default();
        assert!(m.is_empty());
        assert_eq!(
            m.map([("name", "user"), ("user", "alice")]),
            check("user", "alice")
        );
        assert_eq!(m.map([("user", "alice")]), Mapped::AllowAll);
        assert_eq!(mapping(json!({})), m);
    }

    #[test]
    fn every_refusal_names_its_field() {
        let cases = [
            (json!({"mappings": [{"key": ["u"]}]}), "mappings[0].action"),
            (
                json!({"mappings": [{"action": "a", "action_from": "x"}]}),
                "mappings[0].action_from",
            ),
            (
                json!({"mappings": [{"action": "a b"}]}),
                "mappings[0].action",
            ),
            (
                json!({"mappings": [{"action": "a"}, {"action": "b", "key": ["u", "u"]}]}),
                "mappings[1].key[1]",
            ),
            (
                json!({"mappings": [{"action": "a", "key": [""]}]}),
                "mappings[0].key[0]",
            ),
            (
                json!({"mappings": [{"action": "a", "extra": 1}]}),
                "mappings[0].extra",
            ),
            (json!({"unmatched": "sometimes"}), "unmatched"),
            (
                json!({"mappings": [{"action": "a", "when": {"k": 1}}]}),
                "mappings[0].when.k",
            ),
        ];
        for (input, field) in cases {
            let (got, reason) = refusal(input.clone());
            assert_eq!(got, field, "{input}: {reason}");
            assert!(!reason.is_empty());
        }
        let many: Vec<_> = (0..=MAX_MAPPING_RULES)
            .map(|_| json!({"action": "a"}))
            .collect();
        assert_eq!(refusal(json!({ "mappings": many })).0, "mappings");
        let keys: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("k{i}")).collect();
        assert_eq!(
            refusal(json!({"mappings": [{"action": "a", "key": keys}]})).0,
            "mappings[0].key"
        );
    }
}
