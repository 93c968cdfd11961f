//! The hand-declared messages against the real protos (`envoy-types`): encode with one, decode
//! with the other, both ways, with every declared field set to a value that is not its default.

use prost::Message;

use super::*;
use envoy_types::pb::envoy::config::core::v3 as core_pb;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3 as common_pb;
use envoy_types::pb::envoy::service::ratelimit::v3 as rls_pb;
use envoy_types::pb::google::protobuf as google_pb;

fn ours_request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "sluice".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "generic_key".into(),
                    value: "reply".into(),
                },
                Entry {
                    key: "key".into(),
                    value: "alice|%".into(),
                },
            ],
            hits_addend: Some(7),
        }],
        hits_addend: 7,
    }
}

fn real_request() -> rls_pb::RateLimitRequest {
    rls_pb::RateLimitRequest {
        domain: "sluice".into(),
        descriptors: vec![common_pb::RateLimitDescriptor {
            entries: vec![
                common_pb::rate_limit_descriptor::Entry {
                    key: "generic_key".into(),
                    value: "reply".into(),
                },
                common_pb::rate_limit_descriptor::Entry {
                    key: "key".into(),
                    value: "alice|%".into(),
                },
            ],
            limit: None,
            hits_addend: Some(google_pb::UInt64Value { value: 7 }),
            is_negative_hits: false,
        }],
        hits_addend: 7,
    }
}

#[test]
fn the_request_is_the_real_rate_limit_request() {
    let bytes = ours_request().encode_to_vec();
    assert_eq!(
        rls_pb::RateLimitRequest::decode(&*bytes).unwrap(),
        real_request()
    );
    let back = real_request().encode_to_vec();
    assert_eq!(RateLimitRequest::decode(&*back).unwrap(), ours_request());
    assert_eq!(bytes, back, "byte for byte");
}

fn real_struct() -> google_pb::Struct {
    use google_pb::value::Kind;
    let v = |kind| google_pb::Value { kind: Some(kind) };
    let entry = google_pb::Struct {
        fields: [
            ("allowed".to_owned(), v(Kind::BoolValue(false))),
            ("algorithm".to_owned(), v(Kind::StringValue("gcra".into()))),
            ("capacity".to_owned(), v(Kind::NumberValue(5.0))),
            ("retry_after_ms".to_owned(), v(Kind::NumberValue(1500.0))),
            ("level".to_owned(), v(Kind::NumberValue(4.5))),
        ]
        .into_iter()
        .collect(),
    };
    google_pb::Struct {
        fields: [(
            "sluice".to_owned(),
            v(Kind::ListValue(google_pb::ListValue {
                values: vec![v(Kind::StructValue(entry)), v(Kind::NullValue(0))],
            })),
        )]
        .into_iter()
        .collect(),
    }
}

fn real_response() -> rls_pb::RateLimitResponse {
    use rls_pb::rate_limit_response::{rate_limit::Unit as RealUnit, Code as RealCode};
    rls_pb::RateLimitResponse {
        overall_code: RealCode::OverLimit as i32,
        statuses: vec![rls_pb::rate_limit_response::DescriptorStatus {
            code: RealCode::OverLimit as i32,
            current_limit: Some(rls_pb::rate_limit_response::RateLimit {
                name: "reply".into(),
                requests_per_unit: 5,
                unit: RealUnit::Week as i32,
            }),
            limit_remaining: 3,
            duration_until_reset: Some(google_pb::Duration {
                seconds: 12,
                nanos: 500_000_000,
            }),
            quota: None,
        }],
        response_headers_to_add: vec![],
        request_headers_to_add: vec![],
        raw_body: vec![],
        dynamic_metadata: Some(real_struct()),
        quota: None,
    }
}

fn ours_response() -> RateLimitResponse {
    use prost_types::value::Kind;
    let v = |kind| prost_types::Value { kind: Some(kind) };
    let entry = prost_types::Struct {
        fields: [
            ("allowed".to_owned(), v(Kind::BoolValue(false))),
            ("algorithm".to_owned(), v(Kind::StringValue("gcra".into()))),
            ("capacity".to_owned(), v(Kind::NumberValue(5.0))),
            ("retry_after_ms".to_owned(), v(Kind::NumberValue(1500.0))),
            ("level".to_owned(), v(Kind::NumberValue(4.5))),
        ]
        .into_iter()
        .collect(),
    };
    RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![DescriptorStatus {
            code: Code::OverLimit as i32,
            current_limit: Some(RateLimit {
                name: "reply".into(),
                requests_per_unit: 5,
                unit: Unit::Week as i32,
            }),
            limit_remaining: 3,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 12,
                nanos: 500_000_000,
            }),
        }],
        dynamic_metadata: Some(prost_types::Struct {
            fields: [(
                "sluice".to_owned(),
                v(Kind::ListValue(prost_types::ListValue {
                    values: vec![v(Kind::StructValue(entry)), v(Kind::NullValue(0))],
                })),
            )]
            .into_iter()
            .collect(),
        }),
    }
}

#[test]
fn the_response_is_the_real_rate_limit_response() {
    let bytes = real_response().encode_to_vec();
    assert_eq!(RateLimitResponse::decode(&*bytes).unwrap(), ours_response());
    let back = ours_response().encode_to_vec();
    assert_eq!(
        rls_pb::RateLimitResponse::decode(&*back).unwrap(),
        real_response()
    );
}

#[test]
fn fields_the_filter_does_not_read_are_skipped() {
    let mut real = real_response();
    real.response_headers_to_add = vec![core_pb::HeaderValue {
        key: "ratelimit".into(),
        value: "x".into(),
        raw_value: vec![],
    }];
    real.raw_body = b"body".to_vec();
    let ours = RateLimitResponse::decode(&*real.encode_to_vec()).unwrap();
    assert_eq!(ours, ours_response());
}

#[test]
fn every_enum_value_matches() {
    use rls_pb::rate_limit_response::{rate_limit::Unit as RealUnit, Code as RealCode};
    for (ours, real) in [
        (Code::Unknown, RealCode::Unknown),
        (Code::Ok, RealCode::Ok),
        (Code::OverLimit, RealCode::OverLimit),
    ] {
        assert_eq!(ours as i32, real as i32);
    }
    for (ours, real) in [
        (Unit::Unknown, RealUnit::Unknown),
        (Unit::Second, RealUnit::Second),
        (Unit::Minute, RealUnit::Minute),
        (Unit::Hour, RealUnit::Hour),
        (Unit::Day, RealUnit::Day),
        (Unit::Week, RealUnit::Week),
        (Unit::Month, RealUnit::Month),
        (Unit::Year, RealUnit::Year),
    ] {
        assert_eq!(ours as i32, real as i32);
    }
}

#[test]
fn the_grpc_service_is_the_real_one() {
    let ours = GrpcService {
        envoy_grpc: Some(EnvoyGrpc {
            cluster_name: "sluice_rls".into(),
            authority: "sluice".into(),
        }),
    };
    let real = core_pb::GrpcService {
        target_specifier: Some(core_pb::grpc_service::TargetSpecifier::EnvoyGrpc(
            core_pb::grpc_service::EnvoyGrpc {
                cluster_name: "sluice_rls".into(),
                authority: "sluice".into(),
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    assert_eq!(
        core_pb::GrpcService::decode(&*ours.encode_to_vec()).unwrap(),
        real
    );
    assert_eq!(GrpcService::decode(&*real.encode_to_vec()).unwrap(), ours);
    assert_eq!(ours.encode_to_vec(), real.encode_to_vec());
}
