//! Request bodies: read within the size limit and parsed into core's wire types, so every
//! refusal is a 400 naming the field at fault (`sluice_core::wire::parse`).

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use sluice_core::wire::parse;

use super::error::ApiFailure;

pub use sluice_core::limits::MAX_BODY_BYTES;

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

/// Parses a JSON body into `T`; a refusal names the field, or `body` when it is not a JSON object.
pub fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiFailure> {
    parse::from_slice(body, "body").map_err(ApiFailure::from_request_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::wire::{ClThrottleRequest, ThrottleRequest};

    fn field_of<T: DeserializeOwned>(body: &[u8]) -> String {
        json::<T>(body)
            .err()
            .and_then(|f| f.body.field)
            .unwrap_or_default()
    }

    #[test]
    fn each_bad_input_names_its_field() {
        let cases: [(&[u8], &str); 10] = [
            (b"{", "body"),
            (b"[]", "body"),
            (br#"{"key":"k"}"#, "action"),
            (br#"{"action":1,"key":"k"}"#, "action"),
            (br#"{"action":"a"}"#, "key"),
            (br#"{"action":"a","key":"k","quantity":-1}"#, "quantity"),
            (br#"{"action":"a","key":"k","quantity":1.5}"#, "quantity"),
            (br#"{"action":"a","key":"k","quantity":"1"}"#, "quantity"),
            (
                br#"{"action":"a","key":"k","quantity":18446744073709551616}"#,
                "quantity",
            ),
            (br#"{"action":"a","key":"k","extra":1}"#, "extra"),
        ];
        for (body, field) in cases {
            assert_eq!(
                field_of::<ThrottleRequest>(body),
                field,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            field_of::<ClThrottleRequest>(br#"{"key":"k","max_burst":-1,"count":1,"period":1}"#),
            "max_burst"
        );
    }

    #[test]
    fn quantity_defaults_to_one() {
        let r: ThrottleRequest = json(br#"{"action":"a","key":""}"#).unwrap();
        assert_eq!(
            (r.action.as_str(), r.key.as_str(), r.quantity),
            ("a", "", 1)
        );
    }
}
