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
mod tests;
