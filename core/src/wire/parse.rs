//! Reading JSON into a wire type so that every refusal names the field at fault and says why.
//!
//! serde's own messages name a line and column, which a client cannot act on; here the JSON path
//! of the fault (`rate.count`, from `serde_path_to_error`) becomes the `field` of the refusal.
//! A document that is not JSON at all, or not an object, is reported against the whole document
//! (`body` for request bodies, `rule` for a rule).

use serde::de::DeserializeOwned;
use serde_json::error::Category;
use serde_json::Value;

use crate::field_error::FieldError;

/// Parses JSON text into `T`. `whole` names the document when the fault is not in one field.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8], whole: &str) -> Result<T, FieldError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                FieldError::new(whole, format!("not valid JSON: {inner}"))
            }
            Category::Data => refusal(&path, &without_position(&inner.to_string()), whole),
        }
    })?;
    de.end()
        .map_err(|e| FieldError::new(whole, format!("not valid JSON: {e}")))?;
    Ok(value)
}

/// Converts an already parsed JSON value into `T` (see [`from_slice`]).
pub fn from_value<T: DeserializeOwned>(value: &Value, whole: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        refusal(&path, &e.into_inner().to_string(), whole)
    })
}

/// serde_json appends ` at line L column C` to data errors; the field already says where.
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// Turns serde's message at `path` into a refusal naming a field. Missing and unknown fields are
/// reported by serde against their parent object, so the field's own name is taken from the
/// message and appended.
fn refusal(path: &str, message: &str, whole: &str) -> FieldError {
    // serde accepts a struct written as an array; sluice's bodies are objects only.
    if path.starts_with('[') || message.contains("expected struct") {
        // A nested object (`rate`, `lease`) of another type names itself, not the document.
        let at = if path.is_empty() || path == "." || path.starts_with('[') {
            whole
        } else {
            path
        };
        return FieldError::new(at, "must be a JSON object");
    }
    let parent = if path == "." { "" } else { path };
    let join = |name: &str| {
        if parent.is_empty() {
            name.to_owned()
        } else if parent == name || parent.ends_with(&format!(".{name}")) {
            parent.to_owned()
        } else {
            format!("{parent}.{name}")
        }
    };
    if let Some(name) = quoted_after(message, "missing field `") {
        return FieldError::new(join(name), "is required");
    }
    if let Some(name) = quoted_after(message, "unknown field `") {
        let expected = message
            .split_once(", expected ")
            .map(|(_, list)| list.replace('`', ""))
            .unwrap_or_else(|| "no fields".to_owned());
        return FieldError::new(join(name), format!("unknown field; expected {expected}"));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (got, expected) = rest.split_once("`, expected ").unwrap_or((rest, ""));
        let expected = expected.trim_start_matches("one of ").replace('`', "");
        return FieldError::new(
            if parent.is_empty() { whole } else { parent },
            format!("must be one of {expected}; got {got:?}"),
        );
    }
    let reason = plain(message, path);
    if parent.is_empty() {
        return FieldError::new(whole, reason);
    }
    FieldError::new(parent, reason)
}

/// serde's type complaints in the words of the API docs: `invalid value: integer `-3`, expected
/// u64` becomes `must be a whole number; got -3`, and a null where a value is needed becomes
/// `is required`. Anything else (a duration's own message, say) is already plain and kept.
fn plain(message: &str, path: &str) -> String {
    let Some((got, wanted)) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    else {
        return message.to_owned();
    };
    if got == "null" {
        return "is required".to_owned();
    }
    let wanted = match wanted {
        "u64" | "u32" | "usize" => whole_number(path),
        w if w.starts_with("struct ") || w.starts_with("a map") => "a JSON object",
        w => w,
    };
    let got = if let Some((_, shown)) = got.split_once('`') {
        shown.trim_end_matches('`').to_owned()
    } else if let Some(shown) = got.strip_prefix("string ") {
        shown.to_owned()
    } else {
        match got {
            "map" => "an object".to_owned(),
            "sequence" => "an array".to_owned(),
            other => other.to_owned(),
        }
    };
    format!("must be {wanted}; got {got}")
}

/// What a whole-number field takes, in words true for that field: the fields that refuse 0 say
/// so (a `-1` told "0 or more" would try 0 next and be refused again); the rest take 0.
fn whole_number(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or(path) {
        "capacity" | "count" | "period" | "timeout_ms" => "a whole number (1 or more)",
        _ => "a whole number (0 or more)",
    }
}

fn quoted_after<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{RawRule, ThrottleRequest};

    fn field<T: DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
        from_slice::<T>(json.as_bytes(), "body").unwrap_err().field
    }

    #[test]
    fn syntax_errors_blame_the_whole_document() {
        assert_eq!(field::<ThrottleRequest>("{"), "body");
        assert_eq!(field::<ThrottleRequest>("[]"), "body");
        assert_eq!(
            field::<ThrottleRequest>(r#"{"action":"a","key":"\ud800"}"#),
            "body"
        );
        assert_eq!(
            field::<ThrottleRequest>(r#"{"action":"a","key":"k"} x"#),
            "body"
        );
    }

    #[test]
    fn data_errors_name_the_field_without_a_position() {
        let e = from_slice::<ThrottleRequest>(br#"{"action":7,"key":"k"}"#, "body").unwrap_err();
        assert_eq!(e.field, "action");
        assert!(!e.reason.contains("line"), "{}", e.reason);
        assert_eq!(field::<ThrottleRequest>(r#"{"key":"k"}"#), "action");
        assert_eq!(
            field::<ThrottleRequest>(r#"{"action":"a","key":"k","priority":9}"#),
            "priority"
        );
        let e = from_slice::<ThrottleRequest>(br#"{"action":"a","key":"k","x":9}"#, "body")
            .unwrap_err();
        assert!(
            e.reason.contains("expected one of action, key, quantity"),
            "{}",
            e.reason
        );
    }

    #[test]
    fn type_complaints_read_like_the_docs() {
        let reason = |json: &str| {
            from_slice::<RawRule>(json.as_bytes(), "rule")
                .unwrap_err()
                .reason
        };
        let rule = |capacity: &str| {
            format!(r#"{{"action":"a","algorithm":"gcra","capacity":{capacity}}}"#)
        };
        assert_eq!(
            reason(&rule("-3")),
            "must be a whole number (1 or more); got -3"
        );
        assert_eq!(
            reason(&rule("1.5")),
            "must be a whole number (1 or more); got 1.5"
        );
        assert_eq!(
            reason(&rule(r#""16""#)),
            r#"must be a whole number (1 or more); got "16""#
        );
        // A field that takes 0 says so.
        let e = from_slice::<ThrottleRequest>(br#"{"action":"a","key":"k","quantity":-1}"#, "body")
            .unwrap_err();
        assert_eq!(e.reason, "must be a whole number (0 or more); got -1");
        assert_eq!(reason(&rule("null")), "is required");
        assert_eq!(
            reason(r#"{"action":"a","algorithm":"magic","capacity":1}"#),
            "must be one of fixed_window, sliding_log, sliding_window, leaky_bucket, gcra, token_bucket; got \"magic\""
        );
        assert_eq!(
            reason(r#"{"action":{"x":1},"algorithm":"gcra","capacity":1}"#),
            "must be a string; got an object"
        );
    }

    #[test]
    fn nested_fields_are_dotted() {
        let rule = |rate: &str| {
            format!(r#"{{"action":"a","algorithm":"gcra","capacity":1,"rate":{rate}}}"#)
        };
        assert_eq!(
            field::<RawRule>(&rule(r#"{"count":1,"period":"1s","x":1}"#)),
            "rate.x"
        );
        assert_eq!(field::<RawRule>(&rule(r#"{"period":"1s"}"#)), "rate.count");
        assert_eq!(
            field::<RawRule>(&rule(r#"{"count":1,"period":"0s"}"#)),
            "rate.period"
        );
        assert_eq!(
            field::<RawRule>(&rule(r#"{"count":-1,"period":"1s"}"#)),
            "rate.count"
        );
        assert_eq!(field::<RawRule>(&rule("8")), "rate");
        assert_eq!(field::<RawRule>("[1]"), "body");
    }
}
