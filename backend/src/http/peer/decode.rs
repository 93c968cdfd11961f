//! The peer's `POST /json` body as a `RateLimitRequest`: Go's `protojson.Unmarshal`, by hand
//! (envoy-types has no serde), with every refusal naming its field.
//!
//! As protojson reads it: each field by its JSON name or its proto name (`hitsAddend` or
//! `hits_addend`), a field given twice (under either name) refused, an unknown field refused,
//! `null` as the field's zero value, integers as JSON numbers or strings (`1`, `"1"`, `1.0`,
//! `1e2`; not `1.5`, not negative, within the field's range), enums by name or number,
//! `google.protobuf.UInt64Value` as its bare number. The JSON itself must be UTF-8 and at most
//! 128 levels deep (serde_json's bound), so no body can exhaust the stack.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use sluice_core::FieldError;

/// Parses `body` into a request, or names the field at fault (`body` when it is no JSON).
pub fn request(body: &[u8]) -> Result<RateLimitRequest, FieldError> {
    let json: Json = serde_json::from_slice(body).map_err(|e| {
        let reason = if body.is_empty() {
            "is empty; send a RateLimitRequest as JSON, e.g. {\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"value\":\"v\"}]}]}".to_owned()
        } else {
            format!("is not JSON: {e}")
        };
        FieldError::new("body", reason)
    })?;
    let mut out = RateLimitRequest::default();
    for (name, value, path) in fields(&json, "", "body", &REQUEST)? {
        match name {
            "domain" => out.domain = string(value, &path)?,
            "descriptors" => out.descriptors = each(value, &path, descriptor)?,
            _ => out.hits_addend = uint32(value, &path)?,
        }
    }
    Ok(out)
}

/// A message's fields: (proto name, JSON name).
type Fields = [(&'static str, &'static str)];

const REQUEST: [(&str, &str); 3] = [
    ("domain", "domain"),
    ("descriptors", "descriptors"),
    ("hits_addend", "hitsAddend"),
];
const DESCRIPTOR: [(&str, &str); 4] = [
    ("entries", "entries"),
    ("limit", "limit"),
    ("hits_addend", "hitsAddend"),
    ("is_negative_hits", "isNegativeHits"),
];
const ENTRY: [(&str, &str); 2] = [("key", "key"), ("value", "value")];
const OVERRIDE: [(&str, &str); 2] = [("requests_per_unit", "requestsPerUnit"), ("unit", "unit")];

fn descriptor(json: &Json, at: &str) -> Result<RateLimitDescriptor, FieldError> {
    let mut out = RateLimitDescriptor::default();
    for (name, value, path) in fields(json, at, at, &DESCRIPTOR)? {
        match name {
            "entries" => out.entries = each(value, &path, entry)?,
            "limit" => out.limit = limit_override(value, &path)?,
            "hits_addend" => {
                out.hits_addend = match value {
                    Json::Null => None,
                    v => Some(UInt64Value {
                        value: uint(v, &path, u64::MAX)?,
                    }),
                }
            }
            _ => out.is_negative_hits = boolean(value, &path)?,
        }
    }
    Ok(out)
}

fn entry(json: &Json, at: &str) -> Result<Entry, FieldError> {
    let mut out = Entry::default();
    for (name, value, path) in fields(json, at, at, &ENTRY)? {
        match name {
            "key" => out.key = string(value, &path)?,
            _ => out.value = string(value, &path)?,
        }
    }
    Ok(out)
}

fn limit_override(json: &Json, at: &str) -> Result<Option<RateLimitOverride>, FieldError> {
    if matches!(json, Json::Null) {
        return Ok(None);
    }
    let mut out = RateLimitOverride::default();
    for (name, value, path) in fields(json, at, at, &OVERRIDE)? {
        match name {
            "requests_per_unit" => out.requests_per_unit = uint32(value, &path)?,
            _ => out.unit = unit(value, &path)?,
        }
    }
    Ok(Some(out))
}

/// The object's fields as (proto name, value, path), each known and given once. `prefix` is
/// the path's start for the fields (empty at the top), `at` names the object itself.
fn fields<'j>(
    json: &'j Json,
    prefix: &str,
    at: &str,
    known: &Fields,
) -> Result<Vec<(&'static str, &'j Json, String)>, FieldError> {
    let Json::Object(members) = json else {
        return Err(FieldError::new(
            at,
            format!("expected an object, got {}", json.kind()),
        ));
    };
    let mut out: Vec<(&'static str, &'j Json, String)> = Vec::with_capacity(members.len());
    for (name, value) in members {
        let Some(&(proto, _)) = known
            .iter()
            .find(|(proto, json)| name == proto || name == json)
        else {
            let names: Vec<&str> = known.iter().map(|(_, json)| *json).collect();
            let path = join(prefix, name);
            return Err(FieldError::new(
                path,
                format!("unknown field; known: {}", names.join(", ")),
            ));
        };
        let path = join(prefix, proto);
        if out.iter().any(|(seen, _, _)| *seen == proto) {
            return Err(FieldError::new(path, "given twice"));
        }
        out.push((proto, value, path));
    }
    Ok(out)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

fn string(json: &Json, path: &str) -> Result<String, FieldError> {
    match json {
        Json::Null => Ok(String::new()),
        Json::String(s) => Ok(s.clone()),
        other => Err(expected(path, "a string", other)),
    }
}

fn boolean(json: &Json, path: &str) -> Result<bool, FieldError> {
    match json {
        Json::Null => Ok(false),
        Json::Bool(b) => Ok(*b),
        other => Err(expected(path, "true or false", other)),
    }
}

fn list<'j>(json: &'j Json, path: &str) -> Result<&'j [Json], FieldError> {
    match json {
        Json::Null => Ok(&[]),
        Json::Array(items) => Ok(items),
        other => Err(expected(path, "a list", other)),
    }
}

/// A repeated message: each item read by `read` at `path[i]`.
fn each<T>(
    json: &Json,
    path: &str,
    read: fn(&Json, &str) -> Result<T, FieldError>,
) -> Result<Vec<T>, FieldError> {
    list(json, path)?
        .iter()
        .enumerate()
        .map(|(i, item)| read(item, &format!("{path}[{i}]")))
        .collect()
}

fn uint32(json: &Json, path: &str) -> Result<u32, FieldError> {
    let n = uint(json, path, u64::from(u32::MAX))?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// An unsigned integer at most `max`, as a number or a string holding one.
fn uint(json: &Json, path: &str, max: u64) -> Result<u64, FieldError> {
    let text = match json {
        Json::Null => return Ok(0),
        Json::Number(n) => n.to_string(),
        Json::String(s) => s.clone(),
        other => return Err(expected(path, "an unsigned integer", other)),
    };
    let too_big = || FieldError::new(path, format!("must be at most {max}; got {text}"));
    let negative = || FieldError::new(path, format!("must not be negative; got {text}"));
    if let Ok(n) = text.parse::<u64>() {
        return if n <= max { Ok(n) } else { Err(too_big()) };
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f.fract() == 0.0 => {
            if f < 0.0 {
                Err(negative())
            } else if f >= TWO_TO_THE_64 || f > max as f64 {
                Err(too_big())
            } else {
                Ok(f as u64)
            }
        }
        _ if text.starts_with('-') => Err(negative()),
        _ => Err(FieldError::new(
            path,
            format!("expected an unsigned integer, got {text}"),
        )),
    }
}

/// 2^64, the first float no `u64` holds.
const TWO_TO_THE_64: f64 = 18_446_744_073_709_551_616.0;

/// `envoy.type.v3.RateLimitUnit` by name (`MINUTE`) or number.
fn unit(json: &Json, path: &str) -> Result<i32, FieldError> {
    match json {
        Json::Null => Ok(0),
        Json::String(name) => RateLimitUnit::from_str_name(name)
            .map(|u| u as i32)
            .ok_or_else(|| {
                FieldError::new(
                    path,
                    format!("unknown unit {name:?}; one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR"),
                )
            }),
        Json::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| FieldError::new(path, format!("expected a unit's name or number, got {n}"))),
        other => Err(expected(path, "a unit's name", other)),
    }
}

fn expected(path: &str, what: &str, got: &Json) -> FieldError {
    FieldError::new(path, format!("expected {what}, got {}", got.kind()))
}

/// A JSON document as written, duplicate object keys kept (protojson refuses them; a map would
/// hide them).
#[derive(Debug)]
enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "a list",
            Json::Object(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Json, E> {
        // serde_json never hands a non-finite number; null if it ever did.
        Ok(serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            members.push((k, v));
        }
        Ok(Json::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> String {
        match request(body.as_bytes()) {
            Ok(r) => panic!("{body} was accepted as {r:?}"),
            Err(e) => format!("{}: {}", e.field, e.reason),
        }
    }

    #[test]
    fn the_readme_example_and_both_field_names() {
        let r = request(br#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "one_per_day", "value": "something"}]}]}"#).unwrap();
        assert_eq!(r.domain, "dummy");
        assert_eq!(r.hits_addend, 0);
        assert_eq!(r.descriptors.len(), 1);
        assert_eq!(r.descriptors[0].entries[0].key, "one_per_day");
        assert_eq!(r.descriptors[0].entries[0].value, "something");
        assert_eq!(r.descriptors[0].hits_addend, None);
        let camel = request(br#"{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k"}],"hitsAddend":0,"limit":{"requestsPerUnit":5,"unit":"MINUTE"},"isNegativeHits":false}]}"#).unwrap();
        let snake = request(br#"{"domain":"d","hits_addend":3,"descriptors":[{"entries":[{"key":"k","value":null}],"hits_addend":"0","limit":{"requests_per_unit":5.0,"unit":2},"is_negative_hits":null}]}"#).unwrap();
        assert_eq!(camel, snake);
        assert_eq!(camel.hits_addend, 3);
        assert_eq!(
            camel.descriptors[0].hits_addend,
            Some(UInt64Value { value: 0 })
        );
        let limit = camel.descriptors[0].limit.unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (5, RateLimitUnit::Minute as i32)
        );
        let nulls = request(br#"{"domain":"d","descriptors":null,"hitsAddend":null}"#).unwrap();
        assert!(nulls.descriptors.is_empty());
        assert_eq!(request(b"{}").unwrap(), RateLimitRequest::default());
        assert_eq!(request(br#"{"hitsAddend":1e2}"#).unwrap().hits_addend, 100);
    }

    #[test]
    fn each_refusal_names_its_field() {
        let cases = [
            ("", "body: is empty; send a RateLimitRequest as JSON"),
            (
                "{",
                "body: is not JSON: EOF while parsing an object at line 1 column 1",
            ),
            ("\"", "body: is not JSON"),
            ("\\", "body: is not JSON: expected value at line 1 column 1"),
            ("[]", "body: expected an object, got a list"),
            ("null", "body: expected an object, got null"),
            (r#"{"domain":1}"#, "domain: expected a string, got a number"),
            (r#"{"domain":"a","domain":"b"}"#, "domain: given twice"),
            (
                r#"{"hitsAddend":1,"hits_addend":1}"#,
                "hits_addend: given twice",
            ),
            (
                r#"{"domian":"a"}"#,
                "domian: unknown field; known: domain, descriptors, hitsAddend",
            ),
            (
                r#"{"descriptors":{}}"#,
                "descriptors: expected a list, got an object",
            ),
            (
                r#"{"descriptors":[1]}"#,
                "descriptors[0]: expected an object, got a number",
            ),
            (
                r#"{"descriptors":[{"entries":[{"key":"k","val":"v"}]}]}"#,
                "descriptors[0].entries[0].val: unknown field; known: key, value",
            ),
            (
                r#"{"descriptors":[{"entries":[{},{"key":true}]}]}"#,
                "descriptors[0].entries[1].key: expected a string, got a boolean",
            ),
            (
                r#"{"hitsAddend":-1}"#,
                "hits_addend: must not be negative; got -1",
            ),
            (
                r#"{"hitsAddend":1.5}"#,
                "hits_addend: expected an unsigned integer, got 1.5",
            ),
            (
                r#"{"hitsAddend":4294967296}"#,
                "hits_addend: must be at most 4294967295; got 4294967296",
            ),
            (
                r#"{"hitsAddend":"x"}"#,
                "hits_addend: expected an unsigned integer, got x",
            ),
            (r#"{"hitsAddend":1e400}"#, "body: is not JSON"),
            (
                r#"{"descriptors":[{"hitsAddend":18446744073709551616}]}"#,
                "descriptors[0].hits_addend: must be at most 18446744073709551615",
            ),
            (
                r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
                "descriptors[0].limit.unit: unknown unit \"FORTNIGHT\"",
            ),
            (
                r#"{"descriptors":[{"limit":[]}]}"#,
                "descriptors[0].limit: expected an object, got a list",
            ),
            (
                r#"{"descriptors":[{"isNegativeHits":"yes"}]}"#,
                "descriptors[0].is_negative_hits: expected true or false, got a string",
            ),
        ];
        for (body, starts) in cases {
            let got = refused(body);
            assert!(got.starts_with(starts), "{body}: {got}");
        }
    }

    #[test]
    fn hostile_bytes_are_refused_not_panicked_on() {
        for body in [
            &b"\xff"[..],
            b"{\"domain\":\"\xc3\"}",
            b"{\"domain\":\"\\ud800\"}",
            b"\0",
        ] {
            assert!(request(body).is_err(), "{body:?}");
        }
        let deep = "[".repeat(100_000);
        assert!(refused(&deep).starts_with("body: is not JSON: recursion limit exceeded"));
        let quoted = request(br#"{"domain":"a\"b\\c\u00e9\n"}"#).unwrap();
        assert_eq!(quoted.domain, "a\"b\\c\u{e9}\n");
    }
}
