//! The gRPC callout's codec: one check as a `RateLimitRequest`, and a `ShouldRateLimit` answer as
//! the same [`Answer`] the HTTP callout gives, so the rest of the flow (headers, denial cache,
//! failure mode) is shared.
//!
//! The backend's RLS service puts each descriptor's exact `ThrottleResponse` in the response's
//! `dynamic_metadata` as `{"sluice": [ThrottleResponse | null, ...]}` in descriptor order (`null`:
//! no rule for the action). The filter sends one descriptor, so it reads entry 0. When that
//! metadata is absent (an RLS server that is not sluice), the decision is estimated from the
//! `DescriptorStatus` instead: see [`Answer::Estimated`].

use prost::Message;
use sluice_core::descriptor;
use sluice_core::rule::{Algorithm, Mode};
use sluice_core::wire::ThrottleResponse;
use sluice_core::Action;

use crate::config::Protocol;
use crate::failure::Failure;
use crate::flow::Answer;
use crate::rls_proto::{
    Code, DescriptorStatus, Entry, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, Unit,
};

/// The `domain` of every request the filter sends (sluice's rules are global; the backend
/// requires it non-empty, as Envoy does, and answers it by sluice's rules always).
pub use sluice_core::descriptor::FILTER_DOMAIN as DOMAIN;

/// The dynamic metadata key the backend lists its answers under.
pub use sluice_core::descriptor::METADATA_KEY;

/// gRPC status OK.
pub const GRPC_OK: u32 = 0;

/// The encoded `RateLimitRequest` for one check: domain [`DOMAIN`], one descriptor with core's
/// entries for `(action, key)` (the backend maps them back to exactly this action and key), and
/// the quantity as the request's `hits_addend`. `None` if `quantity` does not fit a `uint32`
/// (the configuration allows at most 10^9, so never).
pub fn request(action: &Action, key: &str, quantity: u64) -> Option<Vec<u8>> {
    let hits_addend = u32::try_from(quantity).ok()?;
    let entries = descriptor::from_check(action, key)
        .into_iter()
        .map(|(key, value)| Entry {
            key: key.to_owned(),
            value,
        })
        .collect();
    let request = RateLimitRequest {
        domain: DOMAIN.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries,
            hits_addend: None,
        }],
        hits_addend,
    };
    Some(request.encode_to_vec())
}

/// Classifies a `ShouldRateLimit` answer: `status` is the gRPC status (0 = OK), `message` the
/// response message. A status other than OK is a failure named `grpc_<code>` (14 UNAVAILABLE:
/// the backend is down; 4 DEADLINE_EXCEEDED: the timeout passed; 3 INVALID_ARGUMENT: the backend
/// refused the request).
pub fn classify(status: u32, message: &[u8]) -> Answer {
    if status != GRPC_OK {
        return Answer::Failure(Failure::of_grpc(Protocol::Grpc, status, None));
    }
    let Ok(response) = RateLimitResponse::decode(message) else {
        return Answer::Failure(Failure::bad_response(
            "a message that is not a RateLimitResponse",
        ));
    };
    if let Some(metadata) = &response.dynamic_metadata {
        if let Some(list) = metadata.fields.get(METADATA_KEY) {
            return from_metadata(list);
        }
    }
    match response.statuses.first() {
        Some(status) => estimated(status),
        None => Answer::Failure(Failure::bad_response(
            "a RateLimitResponse with neither sluice's metadata nor a status",
        )),
    }
}

/// Entry 0 of the backend's list: the exact `ThrottleResponse`, or `null` for no rule.
fn from_metadata(list: &prost_types::Value) -> Answer {
    use prost_types::value::Kind;
    let first = match &list.kind {
        Some(Kind::ListValue(l)) => l.values.first(),
        _ => None,
    };
    match first.and_then(|v| v.kind.as_ref()) {
        Some(Kind::NullValue(_)) => Answer::UnknownAction,
        Some(Kind::StructValue(s)) => {
            match serde_json::from_value::<ThrottleResponse>(json_of_struct(s)) {
                Ok(r) => Answer::Decision(r),
                Err(_) => Answer::Failure(Failure::bad_response(
                    "sluice's metadata that is not a ThrottleResponse",
                )),
            }
        }
        _ => Answer::Failure(Failure::bad_response(
            "sluice's metadata that is neither a decision nor null",
        )),
    }
}

fn json_of_struct(s: &prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), json_of(v)))
            .collect(),
    )
}

/// A protobuf `Value` as JSON. Numbers are doubles there; a whole one (every count sluice sends
/// is below 2^53) becomes an integer again, so it reads back into the `u64` fields.
fn json_of(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    use serde_json::Value as J;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => J::Null,
        Some(Kind::BoolValue(b)) => J::Bool(*b),
        Some(Kind::StringValue(s)) => J::String(s.clone()),
        Some(Kind::NumberValue(n)) => {
            if n.fract() == 0.0 && *n >= 0.0 && *n < 9_007_199_254_740_992.0 {
                // Whole, non-negative and below 2^53: exact as an integer.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                J::from(*n as u64)
            } else {
                serde_json::Number::from_f64(*n).map_or(J::Null, J::Number)
            }
        }
        Some(Kind::StructValue(s)) => json_of_struct(s),
        Some(Kind::ListValue(l)) => J::Array(l.values.iter().map(json_of).collect()),
    }
}

/// Milliseconds of a protobuf `Duration`, rounded up (negative: 0).
fn millis_of(d: &prost_types::Duration) -> u64 {
    let seconds = u64::try_from(d.seconds).unwrap_or(0);
    let nanos = u64::try_from(d.nanos).unwrap_or(0);
    seconds
        .saturating_mul(1_000)
        .saturating_add(nanos.div_ceil(1_000_000))
}

/// A decision from a `DescriptorStatus` alone (no sluice metadata): what any RLS server says.
/// What degrades: the algorithm is unknown (reported as `fixed_window`, the only one such
/// servers have), the policy window is the limit's unit, the retry time of a denial is the
/// reset time (exact for a fixed window, an upper bound otherwise), and the denial is not
/// cached (its retry time is not known to be exact). No limit and OK means no rule applies.
fn estimated(status: &DescriptorStatus) -> Answer {
    let over = status.code == Code::OverLimit as i32;
    let Some(limit) = &status.current_limit else {
        if over {
            return Answer::Failure(Failure::bad_response("OVER_LIMIT without a current_limit"));
        }
        return Answer::UnknownAction;
    };
    let capacity = u64::from(limit.requests_per_unit);
    let remaining = u64::from(status.limit_remaining);
    let reset_after_ms = status.duration_until_reset.as_ref().map_or(0, millis_of);
    let window_ms = Unit::try_from(limit.unit)
        .ok()
        .and_then(Unit::millis)
        .unwrap_or(0);
    #[allow(clippy::cast_precision_loss)]
    let level = capacity.saturating_sub(remaining) as f64;
    Answer::Estimated(ThrottleResponse {
        allowed: !over,
        algorithm: Algorithm::FixedWindow,
        mode: Mode::Enforce,
        capacity,
        remaining,
        retry_after_ms: over.then_some(reset_after_ms.max(1)),
        reset_after_ms,
        level,
        window_ms,
        would_deny: false,
        lease: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rls_proto::RateLimit;
    use prost_types::value::Kind;

    fn value(kind: Kind) -> prost_types::Value {
        prost_types::Value { kind: Some(kind) }
    }

    fn metadata(first: prost_types::Value) -> prost_types::Struct {
        prost_types::Struct {
            fields: [(
                METADATA_KEY.to_owned(),
                value(Kind::ListValue(prost_types::ListValue {
                    values: vec![first],
                })),
            )]
            .into_iter()
            .collect(),
        }
    }

    /// A `ThrottleResponse` as the backend's metadata carries it (numbers as doubles).
    pub(crate) fn throttle_struct(r: &ThrottleResponse) -> prost_types::Value {
        fn proto(v: &serde_json::Value) -> prost_types::Value {
            use serde_json::Value as J;
            value(match v {
                J::Null => Kind::NullValue(0),
                J::Bool(b) => Kind::BoolValue(*b),
                J::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
                J::String(s) => Kind::StringValue(s.clone()),
                J::Array(a) => Kind::ListValue(prost_types::ListValue {
                    values: a.iter().map(proto).collect(),
                }),
                J::Object(o) => Kind::StructValue(prost_types::Struct {
                    fields: o.iter().map(|(k, v)| (k.clone(), proto(v))).collect(),
                }),
            })
        }
        proto(&serde_json::to_value(r).unwrap())
    }

    fn sample(allowed: bool) -> ThrottleResponse {
        ThrottleResponse {
            allowed,
            algorithm: Algorithm::SlidingLog,
            mode: Mode::Enforce,
            capacity: 5,
            remaining: if allowed { 4 } else { 0 },
            retry_after_ms: (!allowed).then_some(59_001),
            reset_after_ms: 60_000,
            level: 4.25,
            window_ms: 60_000,
            would_deny: false,
            lease: None,
        }
    }

    fn status(
        code: Code,
        limit: Option<(u32, Unit)>,
        remaining: u32,
        reset_ms: i64,
    ) -> DescriptorStatus {
        DescriptorStatus {
            code: code as i32,
            current_limit: limit.map(|(n, unit)| RateLimit {
                name: String::new(),
                requests_per_unit: n,
                unit: unit as i32,
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(prost_types::Duration {
                seconds: reset_ms / 1000,
                nanos: i32::try_from(reset_ms % 1000 * 1_000_000).unwrap(),
            }),
        }
    }

    fn response(
        code: Code,
        statuses: Vec<DescriptorStatus>,
        md: Option<prost_types::Struct>,
    ) -> Vec<u8> {
        RateLimitResponse {
            overall_code: code as i32,
            statuses,
            dynamic_metadata: md,
        }
        .encode_to_vec()
    }

    #[test]
    fn the_request_is_one_descriptor_of_cores_entries() {
        let action = Action::parse("reply").unwrap();
        let bytes = request(&action, "alice|x", 7).unwrap();
        let r = RateLimitRequest::decode(&*bytes).unwrap();
        assert_eq!(r.domain, "sluice");
        assert_eq!(r.hits_addend, 7);
        assert_eq!(r.descriptors.len(), 1);
        let entries: Vec<(&str, &str)> = r.descriptors[0]
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let (a, k) = descriptor::to_check(0, entries).unwrap();
        assert_eq!((a.as_str(), k.as_str()), ("reply", "alice|x"));
        assert_eq!(request(&action, "k", u64::from(u32::MAX) + 1), None);
    }

    #[test]
    fn the_metadata_gives_the_exact_answer() {
        for allowed in [true, false] {
            let r = sample(allowed);
            let code = if allowed { Code::Ok } else { Code::OverLimit };
            // The DescriptorStatus says something else: the metadata wins.
            let wrong = status(code, Some((1, Unit::Second)), 0, 1);
            let bytes = response(code, vec![wrong], Some(metadata(throttle_struct(&r))));
            assert_eq!(classify(GRPC_OK, &bytes), Answer::Decision(r));
        }
    }

    #[test]
    fn null_metadata_is_an_unknown_action() {
        let bytes = response(
            Code::Ok,
            vec![status(Code::Ok, None, 0, 0)],
            Some(metadata(value(Kind::NullValue(0)))),
        );
        assert_eq!(classify(GRPC_OK, &bytes), Answer::UnknownAction);
    }

    #[test]
    fn without_metadata_the_status_is_estimated() {
        let bytes = response(
            Code::OverLimit,
            vec![status(Code::OverLimit, Some((5, Unit::Minute)), 0, 12_345)],
            None,
        );
        let Answer::Estimated(r) = classify(GRPC_OK, &bytes) else {
            panic!()
        };
        assert!(!r.allowed);
        assert_eq!((r.capacity, r.remaining, r.window_ms), (5, 0, 60_000));
        assert_eq!((r.reset_after_ms, r.retry_after_ms), (12_345, Some(12_345)));
        let bytes = response(
            Code::Ok,
            vec![status(Code::Ok, Some((5, Unit::Hour)), 3, 1_000)],
            None,
        );
        let Answer::Estimated(r) = classify(GRPC_OK, &bytes) else {
            panic!()
        };
        assert!(r.allowed);
        assert_eq!(
            (r.remaining, r.window_ms, r.retry_after_ms),
            (3, 3_600_000, None)
        );
        let no_limit = response(Code::Ok, vec![status(Code::Ok, None, 0, 0)], None);
        assert_eq!(classify(GRPC_OK, &no_limit), Answer::UnknownAction);
    }

    #[test]
    fn errors_and_garbage_are_failures() {
        let ok = response(
            Code::Ok,
            vec![],
            Some(metadata(throttle_struct(&sample(true)))),
        );
        let header = |a: Answer| match a {
            Answer::Failure(f) => f.header,
            other => panic!("a failure: {other:?}"),
        };
        assert_eq!(header(classify(14, &ok)), "grpc_14");
        assert_eq!(header(classify(4, b"")), "grpc_4");
        assert_eq!(header(classify(GRPC_OK, b"\xff\xff\xff")), "bad_response");
        assert_eq!(
            header(classify(GRPC_OK, b"")),
            "bad_response",
            "no statuses, no metadata"
        );
        let not_a_decision = value(Kind::StringValue("nope".into()));
        assert_eq!(
            header(classify(
                GRPC_OK,
                &response(Code::Ok, vec![], Some(metadata(not_a_decision)))
            )),
            "bad_response"
        );
        let over_without_limit = response(
            Code::OverLimit,
            vec![status(Code::OverLimit, None, 0, 0)],
            None,
        );
        assert_eq!(
            header(classify(GRPC_OK, &over_without_limit)),
            "bad_response"
        );
    }

    #[test]
    fn whole_doubles_read_back_as_integers() {
        assert_eq!(
            json_of(&value(Kind::NumberValue(5.0))),
            serde_json::json!(5)
        );
        assert_eq!(
            json_of(&value(Kind::NumberValue(4.5))),
            serde_json::json!(4.5)
        );
        assert_eq!(
            json_of(&value(Kind::NumberValue(-1.0))),
            serde_json::json!(-1.0)
        );
        assert_eq!(
            millis_of(&prost_types::Duration {
                seconds: 1,
                nanos: 1
            }),
            1_001
        );
        assert_eq!(
            millis_of(&prost_types::Duration {
                seconds: -1,
                nanos: 0
            }),
            0
        );
    }
}
