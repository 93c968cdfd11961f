//! Every field error of a rule at once, for editors that show them all before a save.
//!
//! [`Rule::from_json`] stops at the first refusal, which is what an API answer needs (one `field`
//! per 400). An editor needs the whole list: three mistakes should not take three saves. The
//! list is found with the very same validation: after each refusal the faulty field is set to a
//! value that is valid on its own (or removed, if that does not help) and the rule is judged
//! again, so every message is one the backend would send for that field.

use serde_json::{Map, Value};

use crate::field_error::FieldError;
use crate::rule::Rule;

/// Most rounds of judging: more than every field of a rule could need.
const MAX_ROUNDS: usize = 32;

/// Every field error of a rule's JSON form, first refusal first, one per field; empty when the
/// rule is valid. A refusal of the whole document (`rule`: not an object) or of the algorithm
/// (which decides what the other fields mean) ends the list.
///
/// A placeholder stands in for a faulty field while the rest is judged, so a check that spans
/// two fields (a capacity too large to drain at the rate) is judged against the placeholder
/// when the other field was wrong too.
pub fn rule_field_errors(value: &Value) -> Vec<FieldError> {
    let mut value = value.clone();
    let mut errors: Vec<FieldError> = Vec::new();
    let mut placeheld: Vec<String> = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let error = match Rule::from_json(&value) {
            Ok(_) => break,
            Err(error) => error,
        };
        let field = error.field.clone();
        if !errors.iter().any(|e| e.field == field) {
            errors.push(error);
        }
        if field == "rule" || field == "algorithm" || !value.is_object() {
            break;
        }
        // First a placeholder; if the same field is refused again, the field goes.
        let placeholder = if placeheld.contains(&field) {
            None
        } else {
            placeheld.push(field.clone());
            placeholder(&field)
        };
        if !set_path(&mut value, &field, placeholder) {
            break;
        }
    }
    errors
}

/// A value valid on its own for a rule field, or `None` where the field is best left out.
fn placeholder(field: &str) -> Option<Value> {
    Some(match field {
        "action" => Value::from("a"),
        "capacity" => Value::from(1u64),
        "rate" => serde_json::json!({"count": 1, "period": "1s"}),
        "rate.count" | "lease.max" => Value::from(1u64),
        "rate.period" | "window" | "lease.ttl" => Value::from("1s"),
        "mode" => Value::from("enforce"),
        "description" => Value::from(""),
        _ => return None,
    })
}

/// Sets (`Some`) or removes (`None`) the dotted `path` in `value`, creating the parent object if
/// needed. Whether anything changed: a removal of what is not there changes nothing.
fn set_path(value: &mut Value, path: &str, new: Option<Value>) -> bool {
    let (parent, name) = match path.rsplit_once('.') {
        Some((parent, name)) => (Some(parent), name),
        None => (None, path),
    };
    let Some(root) = value.as_object_mut() else {
        return false;
    };
    let object: &mut Map<String, Value> = match parent {
        None => root,
        Some(parent) => {
            let slot = root
                .entry(parent.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            match slot.as_object_mut() {
                Some(object) => object,
                None => return false,
            }
        }
    };
    match new {
        Some(new) => {
            object.insert(name.to_owned(), new);
            true
        }
        None => object.remove(name).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(value: Value) -> Vec<String> {
        rule_field_errors(&value)
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn a_valid_rule_has_none() {
        assert!(
            fields(json!({"action": "a", "algorithm": "gcra", "capacity": 16,
            "rate": {"count": 30, "period": "60s"}}))
            .is_empty()
        );
        assert!(fields(
            json!({"action": "a", "algorithm": "fixed_window", "capacity": 5,
            "window": "1m", "lease": {"max": 8, "ttl": "1s"}})
        )
        .is_empty());
    }

    #[test]
    fn three_mistakes_are_three_errors_with_the_messages_one_at_a_time_gives() {
        let rule = json!({"action": "a b", "algorithm": "gcra", "capacity": 0,
            "rate": {"count": 30, "period": "soon"}, "lease": {"max": 0, "ttl": "1s"}});
        let all = rule_field_errors(&rule);
        let got: Vec<&str> = all.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(got, ["rate.period", "action", "capacity", "lease.max"]);
        // The first is exactly what Rule::from_json (the backend) says.
        assert_eq!(all[0], Rule::from_json(&rule).unwrap_err());
        assert_eq!(
            all.iter().find(|e| e.field == "capacity").unwrap().reason,
            "must be at least 1"
        );
    }

    #[test]
    fn missing_misplaced_and_unknown_fields_are_each_reported() {
        assert_eq!(
            fields(json!({"algorithm": "gcra", "capacity": "x", "window": "1s", "surprise": 1})),
            ["capacity", "surprise", "action", "window", "rate"]
        );
        assert_eq!(
            fields(
                json!({"action": "a", "algorithm": "sliding_log", "capacity": 20000,
                "description": "x".repeat(2000)})
            ),
            ["window", "capacity", "description"]
        );
        assert_eq!(
            fields(json!({"action": "a", "algorithm": "gcra", "capacity": 1,
                "rate": {"count": 0, "period": "1s", "x": 1}})),
            ["rate.x", "rate.count"]
        );
    }

    #[test]
    fn a_whole_document_or_algorithm_refusal_ends_the_list() {
        assert_eq!(fields(json!([1])), ["rule"]);
        assert_eq!(
            fields(json!({"action": "", "algorithm": "magic", "capacity": 0})),
            ["algorithm"]
        );
    }
}
