//! What [`crate::run`] needs, independent of how it was given (flags, environment, tests).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_core::{Rule, RuleError};

use crate::store::redis::RedisConfig;
use crate::store::Store;

/// Which store backs the service.
#[derive(Clone)]
pub enum StoreChoice {
    /// In-process state: one replica only (the embedded default).
    Memory,
    /// Redis, single node or Cluster, shared by every replica.
    Redis(RedisConfig),
    /// A store built by the caller (tests that inspect the store, embedders).
    Custom(Arc<dyn Store>),
}

impl std::fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreChoice::Memory => f.write_str("Memory"),
            StoreChoice::Redis(c) => f.debug_tuple("Redis").field(&c.target).finish(),
            StoreChoice::Custom(s) => write!(f, "Custom({})", s.kind()),
        }
    }
}

/// Background cadences. The defaults meet the "within 1 s" promises; tests keep them.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// How often each replica asks the store for the rules version.
    pub rules_poll: Duration,
    /// How often the batched activity is written to the store (at most 250 ms by contract).
    pub activity_flush: Duration,
    /// How often a level snapshot is pushed to SSE listeners.
    pub levels_push: Duration,
}

impl Default for Intervals {
    fn default() -> Intervals {
        Intervals {
            rules_poll: Duration::from_millis(250),
            activity_flush: Duration::from_millis(200),
            levels_push: Duration::from_millis(500),
        }
    }
}

/// Everything [`crate::run`] needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store.
    pub store: StoreChoice,
    /// Bound on one store call from an HTTP handler, as a backstop to the store's own timeout.
    pub store_deadline: Duration,
    /// The admin token (Bearer, or exchanged for a session cookie).
    pub admin_token: String,
    /// Rules imported into the store at start (from `--rules FILE`), replacing same-named ones.
    pub import_rules: Vec<Rule>,
    /// Directory of the built dashboard (index.html and its assets), if any.
    pub dashboard_dir: Option<PathBuf>,
    /// Background cadences.
    pub intervals: Intervals,
    /// Bound on reading a request's head on both listeners (and its body after the head, and a
    /// keep-alive connection's idle time), so slow clients cannot hold connections forever.
    pub header_read_timeout: Duration,
}

impl Config {
    /// A config over `store` with `admin_token` and defaults for everything else.
    pub fn new(store: StoreChoice, admin_token: impl Into<String>) -> Config {
        Config {
            store,
            store_deadline: Duration::from_secs(1),
            admin_token: admin_token.into(),
            import_rules: Vec::new(),
            dashboard_dir: None,
            intervals: Intervals::default(),
            header_read_timeout: crate::serve::DEFAULT_HEADER_READ_TIMEOUT,
        }
    }
}

/// Why a rules file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RulesFileError {
    /// The file could not be read.
    #[error("cannot read rules file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML/JSON, or not a list of rules / `{rules: [...]}`.
    #[error("rules file {path}: {message}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One rule is invalid (nothing is imported then).
    #[error("rules file {path}: rule #{index} ({action}): {error}")]
    Rule {
        /// The file.
        path: PathBuf,
        /// 1-based position in the list.
        index: usize,
        /// The rule's action, as written.
        action: String,
        /// The field and reason.
        error: RuleError,
    },
    /// Two rules for one action.
    #[error("rules file {path}: action {action:?} appears more than once")]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The repeated action.
        action: String,
    },
}

/// Reads a rules file: YAML or JSON (JSON is YAML), either a list of rules or `{rules: [...]}`.
/// Every rule is validated before any is returned, so a bad file imports nothing.
pub fn read_rules_file(path: &Path) -> Result<Vec<Rule>, RulesFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| RulesFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_rules_text(&text).map_err(|e| e.at(path))
}

/// A rules-file error before the path is known (see [`read_rules_file`]).
#[derive(Debug)]
pub enum RulesTextError {
    /// Not the expected shape.
    Shape(String),
    /// One rule is invalid.
    Rule(usize, String, RuleError),
    /// Two rules for one action.
    Duplicate(String),
}

impl RulesTextError {
    fn at(self, path: &Path) -> RulesFileError {
        let path = path.to_owned();
        match self {
            RulesTextError::Shape(message) => RulesFileError::Shape { path, message },
            RulesTextError::Rule(index, action, error) => RulesFileError::Rule {
                path,
                index,
                action,
                error,
            },
            RulesTextError::Duplicate(action) => RulesFileError::Duplicate { path, action },
        }
    }
}

/// Parses the text of a rules file (see [`read_rules_file`]).
pub fn parse_rules_text(text: &str) -> Result<Vec<Rule>, RulesTextError> {
    let value: Value = serde_norway::from_str(text)
        .map_err(|e| RulesTextError::Shape(format!("not valid YAML or JSON: {e}")))?;
    let list = match value {
        Value::Array(list) => list,
        Value::Object(mut object) => match object.remove("rules") {
            Some(Value::Array(list)) if object.is_empty() => list,
            Some(Value::Array(_)) => {
                let extra: Vec<&String> = object.keys().collect();
                return Err(RulesTextError::Shape(format!(
                    "unknown top-level keys {extra:?}; expected only \"rules\""
                )));
            }
            Some(Value::Null) if object.is_empty() => Vec::new(),
            _ => {
                return Err(RulesTextError::Shape(
                    "expected a list of rules or {rules: [...]}".into(),
                ))
            }
        },
        Value::Null => Vec::new(),
        _ => {
            return Err(RulesTextError::Shape(
                "expected a list of rules or {rules: [...]}".into(),
            ))
        }
    };
    let mut rules: Vec<Rule> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let action = item
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let rule =
            Rule::from_json(item).map_err(|e| RulesTextError::Rule(i + 1, action.clone(), e))?;
        if rules.iter().any(|r| r.action() == rule.action()) {
            return Err(RulesTextError::Duplicate(action));
        }
        rules.push(rule);
    }
    Ok(rules)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn yaml_with_rules_key_and_json_list_both_parse() {
        let yaml = "rules:\n  - action: post\n    algorithm: gcra\n    capacity: 5\n    rate: { count: 10, period: 1m }\n";
        let rules = parse_rules_text(yaml).expect("yaml");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].action().as_str(), "post");
        let json =
            r#"[{"action": "login", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}]"#;
        assert_eq!(parse_rules_text(json).expect("json")[0].capacity(), 5);
    }

    #[test]
    fn one_bad_rule_names_its_position_and_field() {
        let yaml = "- action: a\n  algorithm: gcra\n  capacity: 5\n  rate: {count: 1, period: 1s}\n- action: b\n  algorithm: gcra\n  capacity: 0\n  rate: {count: 1, period: 1s}\n";
        match parse_rules_text(yaml) {
            Err(RulesTextError::Rule(2, action, e)) => {
                assert_eq!(action, "b");
                assert_eq!(e.field, "capacity");
            }
            other => panic!("expected rule #2 refused, got {other:?}"),
        }
    }

    #[test]
    fn duplicate_actions_and_odd_shapes_are_refused() {
        let dup = "- {action: a, algorithm: gcra, capacity: 1, rate: {count: 1, period: 1s}}\n- {action: a, algorithm: gcra, capacity: 2, rate: {count: 1, period: 1s}}\n";
        assert!(matches!(parse_rules_text(dup), Err(RulesTextError::Duplicate(a)) if a == "a"));
        assert!(matches!(
            parse_rules_text("42"),
            Err(RulesTextError::Shape(_))
        ));
        assert!(matches!(
            parse_rules_text("{rules: [], extra: 1}"),
            Err(RulesTextError::Shape(_))
        ));
        assert!(parse_rules_text("").expect("empty file").is_empty());
    }
}
