//! The model of the rule editor (`app/editor.rs`): what was typed, and its validation glue.
//!
//! The form keeps what the user typed as text, turns it into the rule's JSON form and validates
//! it with sluice-core's [`Rule::from_json`], the same code the backend runs, so a message shown
//! next to a field is the message the server would have sent.

use serde_json::{Map, Number, Value};
use sluice_core::wire::{check_override_key, rule_field_errors};
use sluice_core::{Algorithm, Limit, Mode, Params, Rule};

use crate::api::ServerError;

/// The editor's inputs, each with its own place for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Action name.
    Action,
    /// The key an override is for (overrides only).
    Key,
    /// Algorithm picker.
    Algorithm,
    /// Capacity.
    Capacity,
    /// Rate count (meters only).
    RateCount,
    /// Rate period (meters only).
    RatePeriod,
    /// Window (window algorithms only; fixed_window without a calendar).
    Window,
    /// Calendar unit (fixed_window only): none (the window), day, week or month.
    Calendar,
    /// The calendar's zone: `UTC`, an offset like `+08:00` or an IANA name like `Europe/Paris`.
    Zone,
    /// Enforce or shadow.
    Mode,
    /// Free text.
    Description,
    /// Lease: most units per grant.
    LeaseMax,
    /// Lease: how long a grant may be spent.
    LeaseTtl,
    /// The rule as a whole (no single input to blame).
    Rule,
}

impl Field {
    /// The input a sluice-core / backend field path refers to (`rate.period` → rate period).
    /// A missing `rate` is blamed on its count, the first input of the pair.
    pub fn from_path(path: &str) -> Field {
        match path {
            "action" => Field::Action,
            "key" => Field::Key,
            "algorithm" => Field::Algorithm,
            "capacity" => Field::Capacity,
            "rate" | "rate.count" => Field::RateCount,
            "rate.period" => Field::RatePeriod,
            "window" => Field::Window,
            "calendar" | "calendar.unit" => Field::Calendar,
            "calendar.zone" => Field::Zone,
            "mode" => Field::Mode,
            "description" => Field::Description,
            "lease" | "lease.max" => Field::LeaseMax,
            "lease.ttl" => Field::LeaseTtl,
            _ => Field::Rule,
        }
    }

    /// The id of the input element (and, with `-error`, of its message).
    pub fn id(self) -> &'static str {
        match self {
            Field::Action => "rule-action",
            Field::Key => "override-key",
            Field::Algorithm => "rule-algorithm",
            Field::Capacity => "rule-capacity",
            Field::RateCount => "rule-rate-count",
            Field::RatePeriod => "rule-rate-period",
            Field::Window => "rule-window",
            Field::Calendar => "rule-calendar",
            Field::Zone => "rule-zone",
            Field::Mode => "rule-mode",
            Field::Description => "rule-description",
            Field::LeaseMax => "rule-lease-max",
            Field::LeaseTtl => "rule-lease-ttl",
            Field::Rule => "rule-form",
        }
    }
}

/// Where the form shows a refusal: a core [`sluice_core::FieldError`] (the one field-error
/// shape of rules, requests and configs) resolved to the input it names, so its message sits next
/// to that input. Not a second error type: its `message` is the core error's `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// Which input.
    pub field: Field,
    /// The reason, without the field name (it is shown next to the field).
    pub message: String,
}

impl InputError {
    /// The message for a server refusal: next to its field when the server named one.
    pub fn from_server(error: &ServerError) -> InputError {
        let field = error.field.as_deref().map_or(Field::Rule, Field::from_path);
        let message = match &error.field {
            Some(path) => error
                .message
                .strip_prefix(&format!("{path}: "))
                .unwrap_or(&error.message)
                .to_owned(),
            None => error.message.clone(),
        };
        InputError { field, message }
    }
}

/// Whether the editor makes a new rule (or override) or changes an existing one (whose action,
/// and key for an override, are fixed: they are its identity in the API path).
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
    /// fixed_window's calendar unit (`day`, `week`, `month`), empty for the window instead.
    pub calendar: String,
    /// The calendar's zone, as typed (`UTC`, `+08:00`, `Europe/Paris`).
    pub zone: String,
    /// Enforce or shadow.
    pub mode: Mode,
    /// Description.
    pub description: String,
    /// Whether leasing is on (off by default: every request decided exactly).
    pub lease_on: bool,
    /// Lease max, as typed (kept while leasing is off, so switching it back loses nothing).
    pub lease_max: String,
    /// Lease ttl, as typed.
    pub lease_ttl: String,
    /// `Some(key)` when the form is an override of one key of the action (whose rule exists, so
    /// the action is fixed); `None` for a rule.
    pub key: Option<String>,
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
            calendar: String::new(),
            zone: "UTC".into(),
            mode: Mode::Enforce,
            description: String::new(),
            lease_on: false,
            lease_max: "64".into(),
            lease_ttl: "1s".into(),
            key: None,
        }
    }

    /// A new override of `rule`'s action: the rule's own values to start from (the operator
    /// changes what differs for the key), no key yet and no description.
    pub fn new_override(rule: &Rule) -> RuleForm {
        RuleForm {
            key: Some(String::new()),
            description: String::new(),
            ..RuleForm::from_rule(rule)
        }
    }

    /// The form showing the stored override of `key`.
    pub fn from_override(key: &str, rule: &Rule) -> RuleForm {
        RuleForm {
            key: Some(key.to_owned()),
            ..RuleForm::from_rule(rule)
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
            Limit::Calendar(c) => {
                form.calendar = c.unit.name().to_owned();
                form.zone = c.zone();
            }
        }
        if let Some(lease) = rule.lease() {
            form.lease_on = true;
            form.lease_max = lease.max.to_string();
            form.lease_ttl = lease.ttl.to_string();
        }
        form
    }

    /// Which inputs the chosen algorithm uses (the form shows only these).
    pub fn shows(&self, field: Field) -> bool {
        match field {
            Field::RateCount | Field::RatePeriod => self.algorithm.uses_rate(),
            Field::Window => !self.algorithm.uses_rate() && !self.uses_calendar(),
            Field::Calendar => self.algorithm == Algorithm::FixedWindow,
            Field::Zone => self.uses_calendar(),
            Field::LeaseMax | Field::LeaseTtl => self.lease_on,
            Field::Key => self.key.is_some(),
            _ => true,
        }
    }

    /// Whether a calendar replaces the window (fixed_window with a unit chosen).
    pub fn uses_calendar(&self) -> bool {
        self.algorithm == Algorithm::FixedWindow && !self.calendar.is_empty()
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
        } else if self.uses_calendar() {
            let mut calendar = Map::new();
            calendar.insert("unit".into(), Value::from(self.calendar.as_str()));
            insert_typed(&mut calendar, "zone", text(&self.zone));
            object.insert("calendar".into(), Value::Object(calendar));
        } else {
            insert_typed(&mut object, "window", text(&self.window));
        }
        object.insert("mode".into(), Value::from(self.mode.name()));
        object.insert("description".into(), Value::from(self.description.as_str()));
        if self.lease_on {
            let mut lease = Map::new();
            insert_typed(&mut lease, "max", number_or_text(&self.lease_max));
            insert_typed(&mut lease, "ttl", text(&self.lease_ttl));
            object.insert("lease".into(), Value::Object(lease));
        }
        Value::Object(object)
    }

    /// Validates with sluice-core. `existing` lists the actions that already have rules (for an
    /// override: the keys of the action that already have one): a new rule or override may not
    /// take one of them (that would silently overwrite it). On refusal, the first error (see
    /// [`RuleForm::validate_all`] for every one).
    pub fn validate(&self, mode: EditMode, existing: &[String]) -> Result<Rule, InputError> {
        self.validate_all(mode, existing)
            .map_err(|mut all| all.remove(0))
    }

    /// Validates with sluice-core and, on refusal, lists every field's error at once (core's
    /// [`rule_field_errors`]: the messages the server would send, one field at a time), in the
    /// form's order, never empty.
    pub fn validate_all(
        &self,
        mode: EditMode,
        existing: &[String],
    ) -> Result<Rule, Vec<InputError>> {
        let json = self.to_json();
        let mut errors: Vec<InputError> = rule_field_errors(&json)
            .into_iter()
            .map(|e| InputError {
                field: Field::from_path(&e.field),
                message: e.reason,
            })
            .collect();
        match &self.key {
            None => {
                let taken = mode == EditMode::Create
                    && existing.iter().any(|a| a.as_str() == self.action.trim());
                if taken && !errors.iter().any(|e| e.field == Field::Action) {
                    errors.push(InputError {
                        field: Field::Action,
                        message: "a rule for this action already exists; edit it instead".into(),
                    });
                }
            }
            // The key exactly as typed (a key may have spaces at its ends), judged by core.
            Some(key) => {
                if let Err(e) = check_override_key(key) {
                    errors.push(InputError {
                        field: Field::Key,
                        message: e.reason,
                    });
                } else if !crate::overrides::nameable_in_path(key) {
                    errors.push(InputError {
                        field: Field::Key,
                        message: "`.` and `..` cannot be named in a URL path from a browser (it resolves them away); set it with a client that sends the path as is".into(),
                    });
                } else if mode == EditMode::Create && existing.iter().any(|k| k == key) {
                    errors.push(InputError {
                        field: Field::Key,
                        message: "this key already has an override; edit it instead".into(),
                    });
                }
            }
        }
        if errors.is_empty() {
            return Rule::from_json(&json).map_err(|e| {
                vec![InputError {
                    field: Field::from_path(&e.field),
                    message: e.reason,
                }]
            });
        }
        // One message per input (two paths may name one input: `rate` and `rate.count`).
        let mut seen = Vec::new();
        errors.retain(|e| {
            let first = !seen.contains(&e.field);
            seen.push(e.field);
            first
        });
        errors.sort_by_key(|e| FORM_ORDER.iter().position(|f| *f == e.field));
        Err(errors)
    }
}

/// The inputs top to bottom, so messages (and focus on a refused save) follow the page.
const FORM_ORDER: [Field; 14] = [
    Field::Action,
    Field::Key,
    Field::Algorithm,
    Field::Capacity,
    Field::RateCount,
    Field::RatePeriod,
    Field::Window,
    Field::Calendar,
    Field::Zone,
    Field::Mode,
    Field::Description,
    Field::LeaseMax,
    Field::LeaseTtl,
    Field::Rule,
];

impl RuleForm {
    /// The algorithm parameters the what-if plot runs, or `None` while the limit fields are
    /// invalid. The action does not matter to the plot, so a new rule without a name yet (or
    /// with a name that is taken) still gets a plot.
    /// The lease is left out too: the plot shows the rule's exact decisions, and a lease only
    /// moves when debited units are spent (docs/algorithms.md).
    pub fn plot_params(&self) -> Option<Params> {
        let mut json = self.to_json();
        json["action"] = Value::from(PLOT_ACTION);
        if let Some(object) = json.as_object_mut() {
            object.remove("lease");
        }
        Rule::from_json(&json).ok().map(|rule| rule.params())
    }
}

const PLOT_ACTION: &str = "what-if";

/// A number input's text as JSON: a number when it reads as one and prints back as typed (so
/// sluice-core judges its value and quotes it as typed: `-3`, `1.5`, `0`), otherwise the text
/// itself (so sluice-core says it is not a whole number, quoting the text: `1e3` would otherwise
/// come back as `got 1000.0`, a number nobody typed), and nothing when empty.
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
        if n.to_string() == text {
            return Some(Value::Number(n));
        }
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

    fn error_of(f: &RuleForm) -> InputError {
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
    fn a_calendar_budget_round_trips_and_its_zone_is_judged() {
        let f = RuleForm {
            algorithm: Algorithm::FixedWindow,
            capacity: "1000000".into(),
            calendar: "month".into(),
            zone: "+08:00".into(),
            ..form()
        };
        assert!(!f.shows(Field::Window) && f.shows(Field::Zone));
        let rule = f.validate(EditMode::Create, &[]).unwrap();
        assert_eq!(
            rule.to_json()["calendar"],
            json!({"unit": "month", "zone": "+08:00"})
        );
        let back = RuleForm::from_rule(&rule);
        assert_eq!(
            (back.calendar.as_str(), back.zone.as_str()),
            ("month", "+08:00")
        );
        // A named zone (the dashboard's core carries the tz database, as the backend's does) is
        // kept as the database spells it; an unknown one is refused next to Zone.
        let paris = RuleForm {
            zone: "europe/paris".into(),
            ..f.clone()
        };
        let rule = paris.validate(EditMode::Create, &[]).unwrap();
        assert_eq!(RuleForm::from_rule(&rule).zone, "Europe/Paris");
        let e = error_of(&RuleForm {
            zone: "Europe/Pariss".into(),
            ..f.clone()
        });
        assert_eq!(e.field, Field::Zone);
        assert!(e.message.contains("Europe/Paris"), "{}", e.message);
        // Another algorithm keeps its window and ignores the calendar typed.
        let sliding = RuleForm {
            algorithm: Algorithm::SlidingWindow,
            ..f
        };
        assert!(sliding.to_json().get("calendar").is_none());
        assert!(sliding.shows(Field::Window) && !sliding.shows(Field::Calendar));
    }

    #[test]
    fn messages_land_next_to_the_right_input() {
        let e = error_of(&RuleForm {
            capacity: "0".into(),
            ..form()
        });
        assert_eq!(
            e,
            InputError {
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
        // Each message is true for the field and quotes what was typed.
        let says = |capacity: &str| {
            error_of(&RuleForm {
                capacity: capacity.into(),
                ..form()
            })
            .message
        };
        assert_eq!(says("-1"), "must be a whole number (1 or more); got -1");
        assert_eq!(
            says("1e3"),
            r#"must be a whole number (1 or more); got "1e3""#
        );
        assert_eq!(says("1.5"), "must be a whole number (1 or more); got 1.5");
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
    fn every_mistake_is_shown_at_once_in_form_order() {
        let f = RuleForm {
            action: "a b".into(),
            capacity: "0".into(),
            rate_period: "soon".into(),
            lease_on: true,
            lease_max: "0".into(),
            ..form()
        };
        let all = f.validate_all(EditMode::Create, &[]).unwrap_err();
        let fields: Vec<Field> = all.iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                Field::Action,
                Field::Capacity,
                Field::RatePeriod,
                Field::LeaseMax
            ]
        );
        assert_eq!(all[1].message, "must be at least 1");
        // A taken action joins the others.
        let taken = RuleForm {
            capacity: "0".into(),
            ..form()
        }
        .validate_all(EditMode::Create, &["reply".to_owned()])
        .unwrap_err();
        assert_eq!(
            taken.iter().map(|e| e.field).collect::<Vec<_>>(),
            [Field::Action, Field::Capacity]
        );
    }

    #[test]
    fn the_lease_is_off_by_default_sent_when_on_and_ignored_by_the_plot() {
        let off = form();
        assert!(off.to_json().get("lease").is_none());
        assert!(!off.shows(Field::LeaseMax));
        let on = RuleForm {
            lease_on: true,
            lease_max: "32".into(),
            lease_ttl: "500ms".into(),
            ..form()
        };
        assert!(on.shows(Field::LeaseTtl));
        let rule = on.validate(EditMode::Create, &[]).unwrap();
        let lease = rule.lease().unwrap();
        assert_eq!((lease.max, lease.ttl.millis()), (32, 500));
        let reopened = RuleForm::from_rule(&rule);
        assert!(reopened.lease_on);
        assert_eq!(
            (reopened.lease_max.as_str(), reopened.lease_ttl.as_str()),
            ("32", "500ms")
        );
        assert_eq!(on.plot_params(), off.plot_params());
        let bad = RuleForm {
            lease_ttl: "2m".into(),
            ..on
        };
        assert_eq!(
            bad.validate(EditMode::Create, &[]).unwrap_err().field,
            Field::LeaseTtl
        );
        // A wrong lease does not take the plot away.
        assert!(bad.plot_params().is_some());
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
        let f = InputError::from_server(&e);
        assert_eq!(f.field, Field::RatePeriod);
        assert_eq!(f.message, "must be at most 7d; got \"8d\"");
        let other = InputError::from_server(&ServerError::from_response(500, "boom"));
        assert_eq!(other.field, Field::Rule);
        assert!(other.message.contains("boom"));
    }

    #[test]
    fn an_override_is_judged_like_a_rule_and_its_key_by_core() {
        let rule = form().validate(EditMode::Create, &[]).unwrap();
        let fresh = RuleForm::new_override(&rule);
        assert!(fresh.shows(Field::Key));
        assert!(!form().shows(Field::Key));
        // No key yet: the key's message, next to every other field's, in form order.
        let all = RuleForm {
            capacity: "0".into(),
            ..fresh.clone()
        }
        .validate_all(EditMode::Create, &[])
        .unwrap_err();
        assert_eq!(
            all.iter().map(|e| e.field).collect::<Vec<_>>(),
            [Field::Key, Field::Capacity]
        );
        assert_eq!(all[0].message, "must not be empty");
        let long = RuleForm {
            key: Some("k".repeat(129)),
            ..fresh.clone()
        };
        assert_eq!(error_of(&long).field, Field::Key);
        let dots = RuleForm {
            key: Some("..".into()),
            ..fresh.clone()
        };
        assert!(error_of(&dots).message.contains("URL path"));
        // A key with an override already is taken for a new one, not for its own edit.
        let vip = RuleForm {
            key: Some("v/i p%".into()),
            capacity: "160".into(),
            ..fresh
        };
        let taken = vip
            .validate_all(EditMode::Create, &["v/i p%".to_owned()])
            .unwrap_err();
        assert_eq!(taken[0].field, Field::Key);
        let saved = vip
            .validate(EditMode::Edit, &["v/i p%".to_owned()])
            .unwrap();
        assert_eq!(saved.capacity(), 160);
        assert_eq!(saved.action().as_str(), "reply");
        // The key is the path's, never part of the body.
        assert!(vip.to_json().get("key").is_none());
        assert_eq!(
            RuleForm::from_override("v/i p%", &saved).key.as_deref(),
            Some("v/i p%")
        );
        // The server's refusal of the key lands on the key.
        let server = ServerError::from_response(
            400,
            r#"{"error":"invalid_request","field":"key","message":"key: is 200 bytes"}"#,
        );
        assert_eq!(
            InputError::from_server(&server),
            InputError {
                field: Field::Key,
                message: "is 200 bytes".into()
            }
        );
    }
}
