//! Request bodies read field by field, so every refusal names the field at fault (serde's own
//! messages name a line and column, which a client cannot act on).

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde_json::{Map, Value};
use sluice_core::limits::MAX_QUANTITY;
use sluice_core::wire::{ClThrottleRequest, ThrottleRequest};

use super::error::ApiFailure;

/// Largest request body on either listener.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A JSON object body.
pub type Object = Map<String, Value>;

/// Maps a body-read failure (too large, broken stream) to a JSON answer.
pub fn body_failure(rejection: BytesRejection) -> ApiFailure {
    let status = rejection.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiFailure {
            status,
            ..ApiFailure::invalid("body", format!("larger than {MAX_BODY_BYTES} bytes"))
        }
    } else {
        ApiFailure::invalid("body", rejection.body_text())
    }
}

/// Parses a body as a JSON object whose keys are all in `allowed`.
pub fn object(body: &[u8], allowed: &[&str]) -> Result<Object, ApiFailure> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiFailure::invalid("body", format!("not valid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(ApiFailure::invalid("body", "must be a JSON object"));
    };
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiFailure::invalid(
            unknown.clone(),
            format!("unknown field; expected one of {}", allowed.join(", ")),
        ));
    }
    Ok(map)
}

/// A required string field.
pub fn string(map: &Object, field: &str) -> Result<String, ApiFailure> {
    match map.get(field) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Err(ApiFailure::invalid(field, "is required")),
        Some(other) => Err(ApiFailure::invalid(
            field,
            format!("must be a string; got {}", kind(other)),
        )),
    }
}

/// A whole-number field in `0..=max`, with a default when absent.
pub fn whole(map: &Object, field: &str, default: Option<u64>, max: u64) -> Result<u64, ApiFailure> {
    match map.get(field) {
        None | Some(Value::Null) => {
            default.ok_or_else(|| ApiFailure::invalid(field, "is required"))
        }
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v <= max => Ok(v),
            _ => Err(ApiFailure::invalid(
                field,
                format!("must be a whole number from 0 to {max}; got {n}"),
            )),
        },
        Some(other) => Err(ApiFailure::invalid(
            field,
            format!("must be a whole number; got {}", kind(other)),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `POST /v1/throttle` body.
pub fn throttle_request(body: &[u8]) -> Result<ThrottleRequest, ApiFailure> {
    let map = object(body, &["action", "key", "quantity"])?;
    Ok(ThrottleRequest {
        action: string(&map, "action")?,
        key: string(&map, "key")?,
        quantity: whole(&map, "quantity", Some(1), MAX_QUANTITY)?,
    })
}

/// `POST /v1/cl.throttle` body.
pub fn cl_throttle_request(body: &[u8]) -> Result<ClThrottleRequest, ApiFailure> {
    let map = object(body, &["key", "max_burst", "count", "period", "quantity"])?;
    Ok(ClThrottleRequest {
        key: string(&map, "key")?,
        max_burst: whole(&map, "max_burst", None, u64::MAX)?,
        count: whole(&map, "count", None, u64::MAX)?,
        period: whole(&map, "period", None, u64::MAX)?,
        quantity: whole(&map, "quantity", Some(1), MAX_QUANTITY)?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn field_of(r: Result<ThrottleRequest, ApiFailure>) -> String {
        r.err().and_then(|f| f.body.field).unwrap_or_default()
    }

    #[test]
    fn each_bad_input_names_its_field() {
        assert_eq!(field_of(throttle_request(b"{")), "body");
        assert_eq!(field_of(throttle_request(b"[]")), "body");
        assert_eq!(field_of(throttle_request(br#"{"key":"k"}"#)), "action");
        assert_eq!(
            field_of(throttle_request(br#"{"action":1,"key":"k"}"#)),
            "action"
        );
        assert_eq!(field_of(throttle_request(br#"{"action":"a"}"#)), "key");
        assert_eq!(
            field_of(throttle_request(
                br#"{"action":"a","key":"k","quantity":-1}"#
            )),
            "quantity"
        );
        assert_eq!(
            field_of(throttle_request(
                br#"{"action":"a","key":"k","quantity":1.5}"#
            )),
            "quantity"
        );
        assert_eq!(
            field_of(throttle_request(
                br#"{"action":"a","key":"k","quantity":1000000001}"#
            )),
            "quantity"
        );
        assert_eq!(
            field_of(throttle_request(
                br#"{"action":"a","key":"k","quantity":"1"}"#
            )),
            "quantity"
        );
        assert_eq!(
            field_of(throttle_request(br#"{"action":"a","key":"k","extra":1}"#)),
            "extra"
        );
    }

    #[test]
    fn quantity_defaults_to_one() {
        let r = throttle_request(br#"{"action":"a","key":""}"#).expect("valid");
        assert_eq!(
            (r.action.as_str(), r.key.as_str(), r.quantity),
            ("a", "", 1)
        );
    }
}
