//! The `RateLimitResponse` for a request's answers: the overall code, one `DescriptorStatus` per
//! descriptor, sluice's rate-limit headers and each descriptor's [`ThrottleResponse`] as dynamic
//! metadata.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as LimitProto,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::{self as pb, value::Kind};
use sluice_core::descriptor::closest_unit;
use sluice_core::headers::{self, HeaderFamilies, RateLimit};
use sluice_core::time::{MILLIS_PER_SEC, NANOS_PER_MILLI};
use sluice_core::wire::ThrottleResponse;
use sluice_core::Action;

/// The dynamic metadata key under which each descriptor's answer is listed.
pub use sluice_core::descriptor::METADATA_KEY;

/// The header a shadow rule's would-be denial adds.
pub const SHADOW_HEADER: &str = "x-sluice-shadow";

/// One descriptor's answer: its rule's decision, or `None` when no rule names its action.
pub type Answer<'a> = Option<(&'a Action, ThrottleResponse)>;

/// The RLS unit closest to a policy window (`core::descriptor::closest_unit`).
pub fn unit_of(window_ms: u64) -> Unit {
    Unit::try_from(closest_unit(window_ms)).unwrap_or(Unit::Second)
}

fn status(answer: &Answer<'_>) -> DescriptorStatus {
    let Some((action, r)) = answer else {
        return DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        };
    };
    DescriptorStatus {
        code: if r.allowed { Code::Ok } else { Code::OverLimit } as i32,
        current_limit: Some(LimitProto {
            name: action.as_str().to_owned(),
            requests_per_unit: u32::try_from(r.capacity).unwrap_or(u32::MAX),
            unit: unit_of(r.window_ms) as i32,
        }),
        limit_remaining: u32::try_from(r.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration_of_ms(r.reset_after_ms)),
        quota: None,
    }
}

/// A duration in milliseconds as protobuf's.
pub fn duration_of_ms(ms: u64) -> pb::Duration {
    pb::Duration {
        seconds: i64::try_from(ms / MILLIS_PER_SEC).unwrap_or(i64::MAX),
        // Below 1e9: fits.
        nanos: i32::try_from((ms % MILLIS_PER_SEC) * NANOS_PER_MILLI).unwrap_or(0),
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}

/// The headers for the answers: `RateLimit-Policy` and `RateLimit` (draft-10; one list item per
/// descriptor with a rule, in order), `Retry-After` when refused (the longest wait of the refusing
/// descriptors), and `x-sluice-shadow: would-deny` when a shadow rule would have refused.
/// Envoy's own `enable_x_ratelimit_headers` renders the draft-03 `X-RateLimit-*` from the
/// statuses, so they are not repeated here.
pub fn headers(answers: &[Answer<'_>]) -> Vec<HeaderValue> {
    let ietf = HeaderFamilies {
        ietf: true,
        x_ratelimit: false,
    };
    let (mut policy, mut limit) = (Vec::new(), Vec::new());
    let mut retry_ms: Option<u64> = None;
    let mut shadow = false;
    for (action, r) in answers.iter().flatten() {
        let numbers = RateLimit::of(r);
        for (name, value) in headers::render(action.as_str(), &numbers, ietf) {
            match name {
                "ratelimit-policy" => policy.push(value),
                "ratelimit" => limit.push(value),
                _ => {}
            }
        }
        if let Some(ms) = numbers.retry_after_ms {
            retry_ms = Some(retry_ms.map_or(ms, |m| m.max(ms)));
        }
        shadow |= r.would_deny;
    }
    let mut out = Vec::with_capacity(4);
    if !policy.is_empty() {
        out.push(header("ratelimit-policy", policy.join(", ")));
        out.push(header("ratelimit", limit.join(", ")));
    }
    if let Some(ms) = retry_ms {
        out.push(header(
            "retry-after",
            headers::retry_after_secs(ms).to_string(),
        ));
    }
    if shadow {
        out.push(header(SHADOW_HEADER, "would-deny".to_owned()));
    }
    out
}

/// `{"sluice": [ThrottleResponse | null, ...]}` in descriptor order.
pub fn metadata(answers: &[Answer<'_>]) -> pb::Struct {
    let list = answers
        .iter()
        .map(|a| match a {
            Some((_, r)) => serde_json::to_value(r)
                .map(|v| to_proto(&v))
                .unwrap_or_else(|_| null()),
            None => null(),
        })
        .collect();
    let mut fields = std::collections::HashMap::new();
    fields.insert(
        METADATA_KEY.to_owned(),
        pb::Value {
            kind: Some(Kind::ListValue(pb::ListValue { values: list })),
        },
    );
    pb::Struct { fields }
}

fn null() -> pb::Value {
    pb::Value {
        kind: Some(Kind::NullValue(pb::NullValue::NullValue as i32)),
    }
}

/// A JSON value as protobuf's `Value` (for metadata).
pub fn to_proto(v: &serde_json::Value) -> pb::Value {
    use serde_json::Value as J;
    let kind = match v {
        J::Null => return null(),
        J::Bool(b) => Kind::BoolValue(*b),
        // Every number sluice sends is below 2^53, so exact as a double.
        J::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        J::String(s) => Kind::StringValue(s.clone()),
        J::Array(a) => Kind::ListValue(pb::ListValue {
            values: a.iter().map(to_proto).collect(),
        }),
        J::Object(o) => Kind::StructValue(pb::Struct {
            fields: o.iter().map(|(k, v)| (k.clone(), to_proto(v))).collect(),
        }),
    };
    pb::Value { kind: Some(kind) }
}

/// The whole response: OVER_LIMIT when any descriptor is refused under an enforced rule.
pub fn response(answers: &[Answer<'_>]) -> RateLimitResponse {
    let over = answers.iter().flatten().any(|(_, r)| !r.allowed);
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses: answers.iter().map(status).collect(),
        response_headers_to_add: headers(answers),
        dynamic_metadata: Some(metadata(answers)),
        ..RateLimitResponse::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS_PER_MINUTE: u64 = 60 * MILLIS_PER_SEC;
    const MS_PER_HOUR: u64 = 60 * MS_PER_MINUTE;
    const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;

    #[test]
    fn windows_report_as_the_closest_unit() {
        assert_eq!(unit_of(0), Unit::Second);
        assert_eq!(unit_of(500), Unit::Second);
        assert_eq!(unit_of(1_000), Unit::Second);
        assert_eq!(unit_of(7_000), Unit::Second);
        assert_eq!(unit_of(8_000), Unit::Minute);
        assert_eq!(unit_of(30_000), Unit::Minute);
        assert_eq!(unit_of(60_000), Unit::Minute);
        assert_eq!(unit_of(MS_PER_HOUR), Unit::Hour);
        assert_eq!(unit_of(MS_PER_DAY), Unit::Day);
        assert_eq!(unit_of(7 * MS_PER_DAY), Unit::Week);
    }

    #[test]
    fn reset_durations_keep_milliseconds() {
        let d = duration_of_ms(1_250);
        assert_eq!((d.seconds, d.nanos), (1, 250_000_000));
    }
}
