//! The model of the rule editor (`app/editor.rs`): what was typed, and its validation glue.
//!
//! The form keeps what the user typed as text, turns it into the rule's JSON form and validates
//! it with sluice-core's [`Rule::from_json`], the same code the backend runs, so a message shown
//! next to a field is the message the server would have sent.

use serde_json::{Map, Number, Value};
use sluice_core::{Algorithm, Limit, Mode, Params, Rule};

use crate::api::ServerError;

/// The editor's inputs, each with its own place for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Action name.
    Action,
    /// Algorithm picker.
    Algorithm,
    /// Capacity.
    Capacity,
    /// Rate count (meters only).
    RateCount,
    /// Rate period (meters only).
    RatePeriod,
    /// Window (window algorithms only).
    Window,
    /// Enforce or shadow.
    Mode,
    /// Free text.
    Description,
    /// The rule as a whole (no single input to blame).
    Rule,
}

impl Field {
    /// The input a sluice-core / backend field path refers to (`rate.period` → rate period).
    /// A missing `rate` is blamed on its count, the first input of the pair.
    pub fn from_path(path: &str) -> Field {
        match path {
            "action" => Field::Action,
            "algorithm" => Field::Algorithm,
            "capacity" => Field::Capacity,
            "rate" | "rate.count" => Field::RateCount,
            "rate.period" => Field::RatePeriod,
            "window" => Field::Window,
            "mode" => Field::Mode,
            "description" => Field::Description,
            _ => Field::Rule,
        }
    }

    /// The id of the input element (and, with `-error`, of its message).
    pub fn id(self) -> &'static str {
        match self {
            Field::Action => "rule-action",
            Field::Algorithm => "rule-algorithm",
            Field::Capacity => "rule-capacity",
            Field::RateCount => "rule-rate-count",
            Field::RatePeriod => "rule-rate-period",
            Field::Window => "rule-window",
            Field::Mode => "rule-mode",
            Field::Description => "rule-description",
            Field::Rule => "rule-form",
        }
    }
}

/// A message for one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Which input.
    pub field: Field,
    /// The reason, without the field name (it is shown next to the field).
    pub message: String,
}

impl FieldError {
    /// The message for a server refusal: next to its field when the server named one.
    pub fn from_server(error: &ServerError) -> FieldError {
        let field = error.field.as_deref().map_or(Field::Rule, Field::from_path);
        let message = match &error.field {
            Some(path) => error
                .message
                .strip_prefix(&format!("{path}: "))
                .unwrap_or(&error.message)
                .to_owned(),
            None => error.message.clone(),
        };
        FieldError { field, message }
    }
}

/// Whether the editor makes a new rule or changes an existing one (whose action is fixed: the
/// action is the rule's identity in the API path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditMode {
    /// A new rule: the action must not be taken yet.
    Create,
    /// An existing rule.
    Edit,
}

/// What the user has typed. Rate and window inputs are both kept, so switching the algorithm
/// back and forth loses nothing; only the ones the algorithm uses are sent.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleForm {
    /// Action name.
    pub action: String,
    /// Chosen algorithm.
    pub algorithm: Algorithm,
    /// Capacity, as typed.
    pub capacity: String,
    /// Rate count, as typed.
    pub rate_count: String,
    /// Rate period, as typed (`"60s"`).
    pub rate_period: String,
    /// Window, as typed.
    pub window: String,
    /// Enforce or shadow.
    pub mode: Mode,
    /// Description.
    pub description: String,
}

impl Default for RuleForm {
    fn default() -> Self {
        RuleForm::blank()
    }
}

impl RuleForm {
    /// A new rule's starting point: the design's example, gcra with capacity 16 and 30 per 60s.
    pub fn blank() -> RuleForm {
        RuleForm {
            action: String::new(),
            algorithm: Algorithm::Gcra,
            capacity: "16".into(),
            rate_count: "30".into(),
            rate_period: "60s".into(),
            window: "60s".into(),
            mode: Mode::Enforce,
            description: String::new(),
        }
    }

    /// The form showing an existing rule.
    pub fn from_rule(rule: &Rule) -> RuleForm {
        let mut form = RuleForm {
            action: rule.action().to_string(),
            algorithm: rule.algorithm(),
            capacity: rule.capacity().to_string(),
            mode: rule.mode(),
            description: rule.description().to_owned(),
            ..RuleForm::blank()
        };
        match rule.limit() {
            Limit::Rate(rate) => {
                form.rate_count = rate.count.to_string();
                form.rate_period = rate.period.to_string();
            }
            Limit::Window(window) => form.window = window.to_string(),
        }
        form
    }

    /// Which inputs the chosen algorithm uses (the form shows only these).
    pub fn shows(&self, field: Field) -> bool {
        match field {
            Field::RateCount | Field::RatePeriod => self.algorithm.uses_rate(),
            Field::Window => !self.algorithm.uses_rate(),
            _ => true,
        }
    }

    /// The rule's JSON form as typed, for sluice-core to judge. An empty input is left out, so
    /// core says the field "is required" (as the server would for a body without it).
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("action".into(), Value::from(self.action.trim()));
        object.insert("algorithm".into(), Value::from(self.algorithm.name()));
        insert_typed(&mut object, "capacity", number_or_text(&self.capacity));
        if self.algorithm.uses_rate() {
            let mut rate = Map::new();
            insert_typed(&mut rate, "count", number_or_text(&self.rate_count));
            insert_typed(&mut rate, "period", text(&self.rate_period));
            object.insert("rate".into(), Value::Object(rate));
        } else {
            insert_typed(&mut object, "window", text(&self.window));
        }
        object.insert("mode".into(), Value::from(self.mode.name()));
        object.insert("description".into(), Value::from(self.description.as_str()));
        Value::Object(object)
    }

    /// Validates with sluice-core. `existing` lists the actions that already have rules: a new
    /// rule may not take one of them (that would silently overwrite it).
    pub fn validate(&self, mode: EditMode, existing: &[String]) -> Result<Rule, FieldError> {
        let rule = Rule::from_json(&self.to_json()).map_err(|e| FieldError {
            field: Field::from_path(&e.field),
            message: e.reason,
        })?;
        if mode == EditMode::Create && existing.iter().any(|a| a == rule.action().as_str()) {
            return Err(FieldError {
                field: Field::Action,
                message: "a rule for this action already exists; edit it instead".into(),
            });
        }
        Ok(rule)
    }
}

impl RuleForm {
    /// The algorithm parameters the what-if plot runs, or `None` while the limit fields are
    /// invalid. The action does not matter to the plot, so a new rule without a name yet (or
    /// with a name that is taken) still gets a plot.
    pub fn plot_params(&self) -> Option<Params> {
        let mut json = self.to_json();
        json["action"] = Value::from(PLOT_ACTION);
        Rule::from_json(&json).ok().map(|rule| rule.params())
    }
}

const PLOT_ACTION: &str = "what-if";

/// A number input's text as JSON: a number when it reads as one (so sluice-core judges its value:
/// `-3`, `1.5`, `0`), otherwise the text itself (so sluice-core says it is not a whole number),
/// and nothing when empty.
fn number_or_text(text: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(n) = text.parse::<u64>() {
        return Some(Value::from(n));
    }
    if let Ok(n) = text.parse::<i64>() {
        return Some(Value::from(n));
    }
    if let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
        return Some(Value::Number(n));
    }
    Some(Value::from(text))
}

/// A text input as JSON, or nothing when empty.
fn text(text: &str) -> Option<Value> {
    let text = text.trim();
    (!text.is_empty()).then(|| Value::from(text))
}

fn insert_typed(object: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        object.insert(key.into(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form() -> RuleForm {
        RuleForm {
            action: "reply".into(),
            ..RuleForm::blank()
        }
    }

    fn error_of(f: &RuleForm) -> FieldError {
        f.validate(EditMode::Create, &[]).unwrap_err()
    }

    #[test]
    fn the_blank_form_is_the_design_example() {
        let rule = form().validate(EditMode::Create, &[]).unwrap();
        assert_eq!(
            rule.to_json(),
            json!({"action": "reply", "algorithm": "gcra", "capacity": 16,
                   "rate": {"count": 30, "period": "1m"}, "mode": "enforce", "description": ""})
        );
    }

    #[test]
    fn messages_land_next_to_the_right_input() {
        let e = error_of(&RuleForm {
            capacity: "0".into(),
            ..form()
        });
        assert_eq!(
            e,
            FieldError {
                field: Field::Capacity,
                message: "must be at least 1".into()
            }
        );
        let e = error_of(&RuleForm {
            capacity: "abc".into(),
            ..form()
        });
        assert_eq!(e.field, Field::Capacity);
        // The words are core's (the server's); they quote what was typed.
        assert!(e.message.contains("\"abc\""), "{}", e.message);
        assert_eq!(
            error_of(&RuleForm {
                capacity: "-3".into(),
                ..form()
            })
            .field,
            Field::Capacity
        );
        assert_eq!(
            error_of(&RuleForm {
                capacity: "1.5".into(),
                ..form()
            })
            .field,
            Field::Capacity
        );
        assert_eq!(
            error_of(&RuleForm {
                capacity: " ".into(),
                ..form()
            })
            .message,
            "is required"
        );
        assert_eq!(
            error_of(&RuleForm {
                rate_count: "0".into(),
                ..form()
            })
            .field,
            Field::RateCount
        );
        assert_eq!(
            error_of(&RuleForm {
                rate_period: "soon".into(),
                ..form()
            })
            .field,
            Field::RatePeriod
        );
        let empty_period = error_of(&RuleForm {
            rate_period: "".into(),
            ..form()
        });
        assert_eq!(empty_period.field, Field::RatePeriod);
        assert_eq!(empty_period.message, "is required");
        let empty_count = error_of(&RuleForm {
            rate_count: " ".into(),
            ..form()
        });
        assert_eq!(empty_count.field, Field::RateCount);
        assert_eq!(empty_count.message, "is required");
        assert_eq!(
            error_of(&RuleForm {
                action: "a b".into(),
                ..form()
            })
            .field,
            Field::Action
        );
        let windowed = RuleForm {
            algorithm: Algorithm::FixedWindow,
            window: "1x".into(),
            ..form()
        };
        assert_eq!(error_of(&windowed).field, Field::Window);
        let no_window = RuleForm {
            window: "".into(),
            ..windowed
        };
        assert_eq!(error_of(&no_window).field, Field::Window);
        assert!(
            error_of(&no_window).message.starts_with("is required"),
            "{}",
            error_of(&no_window).message
        );
        let long = RuleForm {
            description: "x".repeat(2000),
            ..form()
        };
        assert_eq!(error_of(&long).field, Field::Description);
    }

    #[test]
    fn only_the_limit_the_algorithm_uses_is_sent() {
        let f = RuleForm {
            algorithm: Algorithm::SlidingLog,
            capacity: "5".into(),
            ..form()
        };
        let json = f.to_json();
        assert_eq!(json["window"], json!("60s"));
        assert!(json.get("rate").is_none());
        assert!(f.shows(Field::Window) && !f.shows(Field::RateCount));
        let rule = f.validate(EditMode::Create, &[]).unwrap();
        assert_eq!(RuleForm::from_rule(&rule).window, "1m");
    }

    #[test]
    fn the_plot_ignores_the_action_but_not_the_limits() {
        let unnamed = RuleForm::blank();
        assert!(unnamed.validate(EditMode::Create, &[]).is_err());
        let params = unnamed.plot_params().unwrap();
        assert_eq!(params.capacity(), 16);
        assert!(RuleForm {
            capacity: "0".into(),
            ..RuleForm::blank()
        }
        .plot_params()
        .is_none());
        assert!(RuleForm {
            rate_period: "x".into(),
            ..RuleForm::blank()
        }
        .plot_params()
        .is_none());
    }

    #[test]
    fn a_new_rule_may_not_take_an_existing_action() {
        let taken = vec!["reply".to_owned()];
        assert_eq!(
            form().validate(EditMode::Create, &taken).unwrap_err().field,
            Field::Action
        );
        assert!(form().validate(EditMode::Edit, &taken).is_ok());
    }

    #[test]
    fn editing_round_trips_a_rule() {
        let rule = Rule::from_json(&json!({"action": "login", "algorithm": "token_bucket",
            "capacity": 10, "rate": {"count": 5, "period": "1s"}, "mode": "shadow",
            "description": "logins"}))
        .unwrap();
        let f = RuleForm::from_rule(&rule);
        assert_eq!(f.validate(EditMode::Edit, &[]).unwrap(), rule);
    }

    #[test]
    fn server_refusals_go_next_to_the_named_field() {
        let e = ServerError::from_response(
            400,
            r#"{"error":"invalid_rule","field":"rate.period","message":"rate.period: must be at most 7d; got \"8d\""}"#,
        );
        let f = FieldError::from_server(&e);
        assert_eq!(f.field, Field::RatePeriod);
        assert_eq!(f.message, "must be at most 7d; got \"8d\"");
        let other = FieldError::from_server(&ServerError::from_response(500, "boom"));
        assert_eq!(other.field, Field::Rule);
        assert!(other.message.contains("boom"));
    }
}
