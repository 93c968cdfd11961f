//! A `RateLimitResponse` as the peer's `POST /json` writes it: Go's `protojson.Marshal`, compact.
//!
//! envoy-types has no serde, so the proto3 JSON mapping is written here for the messages an RLS
//! answer holds, with protojson's choices: fields in declaration order under their camelCase
//! JSON names, a field at its zero value left out (a code `UNKNOWN`, a `limitRemaining` of 0, an
//! empty list), enums by name (by number when the name is unknown), `Duration` as `"59s"` /
//! `"1.500s"`, `Timestamp` as RFC 3339 in UTC, `bytes` as padded base64, `Struct` keys sorted,
//! and numbers in a `Struct` as Go formats them (`5`, not `5.0`; `1e+21`). Strings are escaped
//! as protojson escapes them (`"`, `\`, control characters; nothing else).

use std::fmt::Write as _;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::quota::ExpirationSpecifier;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, Quota, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::{value::Kind, Duration, Struct, Timestamp, Value};

use crate::http::dashboard::base64;

/// The response's JSON, as the peer writes it.
pub fn response(r: &RateLimitResponse) -> String {
    let mut o = Object::new();
    o.enumeration("overallCode", r.overall_code, code_name);
    o.list("statuses", &r.statuses, status);
    o.list("responseHeadersToAdd", &r.response_headers_to_add, header);
    o.list("requestHeadersToAdd", &r.request_headers_to_add, header);
    o.text("rawBody", &base64(&r.raw_body));
    o.message("dynamicMetadata", r.dynamic_metadata.as_ref(), structure);
    o.message("quota", r.quota.as_ref(), quota);
    o.end()
}

fn status(s: &DescriptorStatus) -> String {
    let mut o = Object::new();
    o.enumeration("code", s.code, code_name);
    o.message("currentLimit", s.current_limit.as_ref(), limit);
    o.uint("limitRemaining", s.limit_remaining);
    o.message("durationUntilReset", s.duration_until_reset.as_ref(), |d| {
        quoted(&duration(d))
    });
    o.message("quota", s.quota.as_ref(), quota);
    o.end()
}

fn limit(l: &RateLimit) -> String {
    let mut o = Object::new();
    o.text("name", &l.name);
    o.uint("requestsPerUnit", l.requests_per_unit);
    o.enumeration("unit", l.unit, |u| {
        Unit::try_from(u).ok().map(|u| u.as_str_name())
    });
    o.end()
}

fn code_name(code: i32) -> Option<&'static str> {
    Code::try_from(code).ok().map(|c| c.as_str_name())
}

fn quota(q: &Quota) -> String {
    let mut o = Object::new();
    o.uint("requests", q.requests);
    if let Some(ExpirationSpecifier::ValidUntil(t)) = &q.expiration_specifier {
        o.raw("validUntil", &quoted(&timestamp(t)));
    }
    o.text("id", &q.id);
    o.end()
}

fn header(h: &HeaderValue) -> String {
    let mut o = Object::new();
    o.text("key", &h.key);
    o.text("value", &h.value);
    o.text("rawValue", &base64(&h.raw_value));
    o.end()
}

/// `google.protobuf.Struct`: a JSON object, keys sorted (as protojson orders map keys).
fn structure(s: &Struct) -> String {
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    let mut o = Object::new();
    for k in keys {
        if let Some(v) = s.fields.get(k) {
            o.raw(k, &value(v));
        }
    }
    o.end()
}

fn value(v: &Value) -> String {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => "null".to_owned(),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => quoted(s),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => {
            let items: Vec<String> = l.values.iter().map(value).collect();
            format!("[{}]", items.join(","))
        }
    }
}

/// A double as Go's protojson writes it: shortest round-trip digits, exponent form only below
/// 1e-6 or from 1e21 (`1e+21`, `1e-7`), and the non-finite values as strings.
fn number(n: f64) -> String {
    if n.is_nan() {
        return quoted("NaN");
    }
    if n.is_infinite() {
        return quoted(if n > 0.0 { "Infinity" } else { "-Infinity" });
    }
    let abs = n.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let e = format!("{n:e}");
        return match e.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => e,
        };
    }
    n.to_string()
}

/// `google.protobuf.Duration`: seconds with 0, 3, 6 or 9 fractional digits and an `s`.
pub fn duration(d: &Duration) -> String {
    let negative = d.seconds < 0 || d.nanos < 0;
    let (secs, nanos) = (d.seconds.unsigned_abs(), d.nanos.unsigned_abs());
    format!(
        "{}{secs}{}s",
        if negative { "-" } else { "" },
        fraction(nanos)
    )
}

/// `google.protobuf.Timestamp`: RFC 3339 in UTC, with 0, 3, 6 or 9 fractional digits.
fn timestamp(t: &Timestamp) -> String {
    let days = t.seconds.div_euclid(86_400);
    let secs = t.seconds.rem_euclid(86_400);
    let (y, m, d) = sluice_core::calendar::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        fraction(t.nanos.unsigned_abs())
    )
}

/// Nanoseconds as protojson's fraction: none, or `.` and 3, 6 or 9 digits.
fn fraction(nanos: u32) -> String {
    let mut digits = format!("{nanos:09}");
    if nanos == 0 {
        return String::new();
    }
    while digits.ends_with("000") {
        digits.truncate(digits.len() - 3);
    }
    format!(".{digits}")
}

/// A JSON string as protojson escapes it (the same escapes as serde_json's).
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A JSON object written field by field, in the order given.
struct Object(String);

impl Object {
    fn new() -> Object {
        Object(String::from("{"))
    }

    fn raw(&mut self, name: &str, json: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        let _ = write!(self.0, "{}:{json}", quoted(name));
    }

    /// A `string` (or base64 `bytes`), left out when empty.
    fn text(&mut self, name: &str, value: &str) {
        if !value.is_empty() {
            self.raw(name, &quoted(value));
        }
    }

    /// An enum, left out at 0; by name, or by number when the name is unknown.
    fn enumeration(&mut self, name: &str, value: i32, named: impl Fn(i32) -> Option<&'static str>) {
        if value != 0 {
            self.raw(
                name,
                &named(value).map_or_else(|| value.to_string(), quoted),
            );
        }
    }

    /// A message field, left out when unset.
    fn message<T>(&mut self, name: &str, value: Option<&T>, json: impl Fn(&T) -> String) {
        if let Some(v) = value {
            self.raw(name, &json(v));
        }
    }

    /// A `uint32`, left out at 0.
    fn uint(&mut self, name: &str, value: u32) {
        if value != 0 {
            self.raw(name, &value.to_string());
        }
    }

    fn list<T>(&mut self, name: &str, items: &[T], each: fn(&T) -> String) {
        if !items.is_empty() {
            let items: Vec<String> = items.iter().map(each).collect();
            self.raw(name, &format!("[{}]", items.join(",")));
        }
    }

    fn end(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::quota;
    use envoy_types::pb::google::protobuf::ListValue;

    fn limit_of(rpu: u32, unit: Unit) -> Option<RateLimit> {
        Some(RateLimit {
            name: String::new(),
            requests_per_unit: rpu,
            unit: unit as i32,
        })
    }

    /// The README's example answer, with the `durationUntilReset` the peer adds today.
    #[test]
    fn the_readme_example_byte_for_byte() {
        let reset = Some(Duration {
            seconds: 59,
            nanos: 0,
        });
        let r = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: limit_of(1, Unit::Minute),
                    limit_remaining: 0,
                    duration_until_reset: reset,
                    quota: None,
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: limit_of(2, Unit::Minute),
                    limit_remaining: 1,
                    duration_until_reset: reset,
                    quota: None,
                },
            ],
            ..RateLimitResponse::default()
        };
        assert_eq!(
            response(&r),
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"59s"},{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"59s"}]}"#
        );
    }

    #[test]
    fn zero_values_are_left_out_and_unknown_enums_are_numbers() {
        assert_eq!(response(&RateLimitResponse::default()), "{}");
        let r = RateLimitResponse {
            overall_code: 7,
            statuses: vec![DescriptorStatus::default()],
            ..RateLimitResponse::default()
        };
        assert_eq!(response(&r), r#"{"overallCode":7,"statuses":[{}]}"#);
        let named = RateLimit {
            name: "a\"b\\c\n\u{1}<&>é".into(),
            requests_per_unit: 0,
            unit: 99,
        };
        assert_eq!(limit(&named), r#"{"name":"a\"b\\c\n\u0001<&>é","unit":99}"#);
    }

    #[test]
    fn every_other_field_as_protojson_writes_it() {
        let mut fields = std::collections::HashMap::new();
        let num = |n| Value {
            kind: Some(Kind::NumberValue(n)),
        };
        fields.insert("z".to_owned(), num(5.0));
        fields.insert(
            "a".to_owned(),
            Value {
                kind: Some(Kind::ListValue(ListValue {
                    values: vec![
                        num(1.5),
                        num(1e21),
                        num(1e-7),
                        num(-0.25),
                        num(f64::NAN),
                        Value {
                            kind: Some(Kind::BoolValue(true)),
                        },
                        Value { kind: None },
                    ],
                })),
            },
        );
        let r = RateLimitResponse {
            overall_code: Code::Ok as i32,
            response_headers_to_add: vec![HeaderValue {
                key: "k".into(),
                value: "v".into(),
                raw_value: b"fo".to_vec(),
            }],
            request_headers_to_add: vec![HeaderValue::default()],
            raw_body: b"foo".to_vec(),
            dynamic_metadata: Some(Struct { fields }),
            quota: Some(Quota {
                requests: 3,
                id: "q".into(),
                expiration_specifier: Some(quota::ExpirationSpecifier::ValidUntil(Timestamp {
                    seconds: 1_709_251_199,
                    nanos: 500_000_000,
                })),
            }),
            ..RateLimitResponse::default()
        };
        assert_eq!(
            response(&r),
            r#"{"overallCode":"OK","responseHeadersToAdd":[{"key":"k","value":"v","rawValue":"Zm8="}],"requestHeadersToAdd":[{}],"rawBody":"Zm9v","dynamicMetadata":{"a":[1.5,1e+21,1e-7,-0.25,"NaN",true,null],"z":5},"quota":{"requests":3,"validUntil":"2024-02-29T23:59:59.500Z","id":"q"}}"#
        );
    }

    #[test]
    fn durations_have_zero_three_six_or_nine_digits() {
        let d = |seconds, nanos| duration(&Duration { seconds, nanos });
        assert_eq!(d(0, 0), "0s");
        assert_eq!(d(59, 0), "59s");
        assert_eq!(d(1, 500_000_000), "1.500s");
        assert_eq!(d(0, 1_000), "0.000001s");
        assert_eq!(d(0, 1), "0.000000001s");
        assert_eq!(d(-1, -500_000_000), "-1.500s");
    }
}
