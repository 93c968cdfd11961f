//! The rules file of `--rules FILE`: YAML or JSON (JSON is YAML), either a list of rules or
//! `{rules: [...]}`, in the same JSON form as the admin API. Every rule is validated before any
//! is returned, so a bad file imports nothing, and a refusal names the file, the line, the rule
//! (`#N` and its action) and the field: `rules file r.yaml, line 7: rule #2 (login): window: ...`.

use std::path::{Path, PathBuf};

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use sluice_core::{FieldError, Rule};

/// Why a rules file was refused. Every variant names the file; those about one rule name its
/// 1-based position, its action as written, and the line where it starts.
#[derive(Debug, thiserror::Error)]
pub enum RulesFileError {
    /// The file could not be read.
    #[error("cannot read rules file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML or JSON at all.
    #[error("rules file {}{}: not valid YAML or JSON: {message}", path.display(), at_line(*line))]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped, 1-based, if it says.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },
    /// Valid YAML, but not a list of rules or `{rules: [...]}`.
    #[error("rules file {}: {message}", path.display())]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One rule is invalid (nothing is imported then).
    #[error("rules file {}{}: rule #{index} ({action}): {error}", path.display(), at_line(*line))]
    Rule {
        /// The file.
        path: PathBuf,
        /// The line where the rule starts, 1-based.
        line: Option<usize>,
        /// 1-based position in the list.
        index: usize,
        /// The rule's action as written (`?` when it has none).
        action: String,
        /// The field at fault (`error.field`, dotted: `rate.period`) and the reason.
        error: FieldError,
    },
    /// Two rules for one action.
    #[error(
        "rules file {}{}: rule #{index}: action {action:?} appears more than once (first as rule #{first})",
        path.display(),
        at_line(*line)
    )]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The line where the repeated rule starts, 1-based.
        line: Option<usize>,
        /// 1-based position of the repeat.
        index: usize,
        /// 1-based position of the first rule with this action.
        first: usize,
        /// The repeated action.
        action: String,
    },
}

fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(", line {l}")).unwrap_or_default()
}

/// Reads and validates a rules file (see the module docs).
pub fn read(path: &Path) -> Result<Vec<Rule>, RulesFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| RulesFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text)
}

/// Validates the text of a rules file; `path` only names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Rule>, RulesFileError> {
    let value: Value = serde_norway::from_str(text).map_err(|e| RulesFileError::Syntax {
        path: path.to_owned(),
        line: e.location().map(|l| l.line()),
        message: e.to_string(),
    })?;
    let shape = |message: String| RulesFileError::Shape {
        path: path.to_owned(),
        message,
    };
    let expected = || shape("expected a list of rules or {rules: [...]}".into());
    let (list, shape) = match value {
        Value::Array(list) => (list, FileShape::List),
        Value::Object(mut object) => match object.remove("rules") {
            Some(Value::Array(list)) if object.is_empty() => (list, FileShape::Wrapped),
            Some(Value::Array(_)) => {
                let extra: Vec<&String> = object.keys().collect();
                return Err(shape(format!(
                    "unknown top-level keys {extra:?}; expected only \"rules\""
                )));
            }
            Some(Value::Null) if object.is_empty() => (Vec::new(), FileShape::Wrapped),
            _ => return Err(expected()),
        },
        Value::Null => (Vec::new(), FileShape::List),
        _ => return Err(expected()),
    };
    let line = |index: usize| line_of_item(text, shape, index);
    let mut rules: Vec<Rule> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let action = item
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let rule = Rule::from_json(item).map_err(|error| RulesFileError::Rule {
            path: path.to_owned(),
            line: line(i),
            index: i + 1,
            action: action.clone(),
            error,
        })?;
        if let Some(first) = rules.iter().position(|r| r.action() == rule.action()) {
            return Err(RulesFileError::Duplicate {
                path: path.to_owned(),
                line: line(i),
                index: i + 1,
                first: first + 1,
                action,
            });
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// How a rules file holds its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileShape {
    /// A bare list of rules (or nothing).
    List,
    /// `{rules: [...]}`.
    Wrapped,
}

/// The 1-based line where item `index` of the rules list starts (only asked on the error path).
///
/// The YAML is read a second time with a visitor that stops at that item: the parser stamps the
/// refusal with the position of the value it was reading, which is the line wanted.
fn line_of_item(text: &str, shape: FileShape, index: usize) -> Option<usize> {
    let locator = ListLocator { index };
    let stopped = match shape {
        FileShape::Wrapped => {
            serde_norway::Deserializer::from_str(text).deserialize_map(WrappedLocator(locator))
        }
        FileShape::List => serde_norway::Deserializer::from_str(text).deserialize_seq(locator),
    };
    stopped.err()?.location().map(|l| l.line())
}

/// Walks `{rules: [...]}` to the list.
struct WrappedLocator(ListLocator);

impl<'de> Visitor<'de> for WrappedLocator {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("{rules: [...]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "rules" {
                return map.next_value_seed(ListSeed(self.0));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

struct ListSeed(ListLocator);

impl<'de> DeserializeSeed<'de> for ListSeed {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self.0)
    }
}

/// Skips list items up to `index`, then refuses that item so the parser stamps its position.
struct ListLocator {
    index: usize,
}

impl<'de> Visitor<'de> for ListLocator {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of rules")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for _ in 0..self.index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(StopHere).map(|_| ())
    }
}

/// Refuses whatever value it meets, from inside the parser's reading of it.
struct StopHere;

impl<'de> DeserializeSeed<'de> for StopHere {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StopHere {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("nothing (this reading only locates a rule)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Vec<Rule>, RulesFileError> {
        parse(Path::new("r.yaml"), text)
    }

    #[test]
    fn yaml_with_rules_key_and_json_list_both_parse() {
        let yaml = "rules:\n  - action: post\n    algorithm: gcra\n    capacity: 5\n    rate: { count: 10, period: 1m }\n";
        let rules = parse_text(yaml).expect("yaml");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].action().as_str(), "post");
        let json =
            r#"[{"action": "login", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}]"#;
        assert_eq!(parse_text(json).expect("json")[0].capacity(), 5);
        assert!(parse_text("").expect("empty file").is_empty());
        assert!(parse_text("rules:\n").expect("no rules").is_empty());
    }

    #[test]
    fn one_bad_rule_names_the_file_its_line_position_action_and_field() {
        let yaml = "- action: a\n  algorithm: gcra\n  capacity: 5\n  rate: {count: 1, period: 1s}\n\n- action: b\n  algorithm: gcra\n  capacity: 0\n  rate: {count: 1, period: 1s}\n";
        let e = parse_text(yaml).expect_err("capacity 0");
        match &e {
            RulesFileError::Rule {
                path,
                line,
                index,
                action,
                error,
            } => {
                assert_eq!(path, Path::new("r.yaml"));
                assert_eq!(*line, Some(6));
                assert_eq!((*index, action.as_str()), (2, "b"));
                assert_eq!(error.field, "capacity");
            }
            other => panic!("expected rule #2 refused, got {other:?}"),
        }
        let text = e.to_string();
        assert!(
            text.starts_with("rules file r.yaml, line 6: rule #2 (b): capacity: "),
            "{text}"
        );
    }

    #[test]
    fn lines_are_found_under_a_rules_key_in_flow_style_and_in_json() {
        let wrapped = "# comment\nrules:\n  - {action: a, algorithm: gcra, capacity: 1, rate: {count: 1, period: 1s}}\n  - {action: b, algorithm: gcra, capacity: 1, rate: {count: 1, period: fortnight}}\n";
        assert!(matches!(
            parse_text(wrapped),
            Err(RulesFileError::Rule { line: Some(4), index: 2, ref error, .. }) if error.field == "rate.period"
        ));
        let json = "[\n {\"action\": \"a\", \"algorithm\": \"gcra\", \"capacity\": 1, \"rate\": {\"count\": 1, \"period\": \"1s\"}},\n\n {\"action\": \"c\", \"algorithm\": \"nope\", \"capacity\": 1}\n]";
        assert!(matches!(
            parse_text(json),
            Err(RulesFileError::Rule { line: Some(4), index: 2, ref error, .. }) if error.field == "algorithm"
        ));
    }

    #[test]
    fn duplicate_actions_name_both_positions() {
        let dup = "- {action: a, algorithm: gcra, capacity: 1, rate: {count: 1, period: 1s}}\n- {action: a, algorithm: gcra, capacity: 2, rate: {count: 1, period: 1s}}\n";
        let e = parse_text(dup).expect_err("duplicate");
        assert!(
            matches!(&e, RulesFileError::Duplicate { line: Some(2), index: 2, first: 1, action, .. } if action == "a"),
            "{e:?}"
        );
    }

    #[test]
    fn odd_shapes_and_broken_yaml_are_refused_with_a_line() {
        assert!(matches!(
            parse_text("42"),
            Err(RulesFileError::Shape { .. })
        ));
        assert!(matches!(
            parse_text("{rules: [], extra: 1}"),
            Err(RulesFileError::Shape { .. })
        ));
        match parse_text("- action: a\n  algorithm: [gcra\n") {
            Err(RulesFileError::Syntax {
                line: Some(line), ..
            }) => assert!(line >= 2, "{line}"),
            other => panic!("expected a syntax error with a line, got {other:?}"),
        }
    }

    #[test]
    fn an_unreadable_file_names_its_path() {
        let e = read(Path::new("/nonexistent/sluice-rules.yaml")).expect_err("missing");
        assert!(matches!(e, RulesFileError::Read { .. }));
        assert!(
            e.to_string()
                .starts_with("cannot read rules file /nonexistent/sluice-rules.yaml: "),
            "{e}"
        );
    }
}
