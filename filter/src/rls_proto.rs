//! The few Envoy protobuf messages the gRPC callout needs, declared by hand with prost's derive.
//!
//! `envoy-types` (the maintained crate of generated Envoy protos) pulls tonic's transport, which
//! does not build for wasm32-wasip1, so the filter declares just these messages. Only the fields
//! the filter writes or reads are declared; prost skips unknown fields when decoding, so a
//! response carrying more (`response_headers_to_add`, `quota`, ...) decodes fine. Each field
//! names its source: the `.proto` file and the field's number there. The native test
//! `tests::*` encodes with `envoy-types` and decodes with these, and back, so a wrong number or
//! type fails `cargo test`.
//!
//! Sources (envoyproxy/envoy, `api/`):
//! - `envoy/service/ratelimit/v3/rls.proto`: `RateLimitRequest`, `RateLimitResponse`,
//!   `RateLimitResponse.DescriptorStatus`, `RateLimitResponse.RateLimit`, `Code`, `Unit`
//! - `envoy/extensions/common/ratelimit/v3/ratelimit.proto`: `RateLimitDescriptor`, `.Entry`
//! - `envoy/config/core/v3/grpc_service.proto`: `GrpcService`, `GrpcService.EnvoyGrpc`
//! - `google/protobuf/struct.proto`, `duration.proto`, `wrappers.proto`: from `prost-types`

// prost's derive writes the accessors; the fields are documented by their proto source.
#![allow(missing_docs)]

/// The gRPC service the filter calls (`package envoy.service.ratelimit.v3; service
/// RateLimitService`).
pub const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// Its one method (`rpc ShouldRateLimit(RateLimitRequest) returns (RateLimitResponse)`).
pub const METHOD: &str = "ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitRequest` (rls.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    /// `string domain = 1;`
    #[prost(string, tag = "1")]
    pub domain: String,
    /// `repeated envoy.extensions.common.ratelimit.v3.RateLimitDescriptor descriptors = 2;`
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// `uint32 hits_addend = 3;` (0 means 1; a descriptor's own `hits_addend` overrides it)
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor` (ratelimit.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// `repeated Entry entries = 1;`
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// `google.protobuf.UInt64Value hits_addend = 3;` (field 2 is `RateLimitOverride limit`,
    /// not used)
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<u64>,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry` (ratelimit.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Entry {
    /// `string key = 1;`
    #[prost(string, tag = "1")]
    pub key: String,
    /// `string value = 2;`
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse` (rls.proto). Not declared: 3
/// `response_headers_to_add`, 4 `request_headers_to_add`, 5 `raw_body`, 7 `quota`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// `Code overall_code = 1;`
    #[prost(enumeration = "Code", tag = "1")]
    pub overall_code: i32,
    /// `repeated DescriptorStatus statuses = 2;`
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    /// `google.protobuf.Struct dynamic_metadata = 6;`
    #[prost(message, optional, tag = "6")]
    pub dynamic_metadata: Option<prost_types::Struct>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.Code` (rls.proto).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Code {
    /// `UNKNOWN = 0;`
    Unknown = 0,
    /// `OK = 1;`
    Ok = 1,
    /// `OVER_LIMIT = 2;`
    OverLimit = 2,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus` (rls.proto). Not declared: 5
/// `quota`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    /// `Code code = 1;`
    #[prost(enumeration = "Code", tag = "1")]
    pub code: i32,
    /// `RateLimit current_limit = 2;`
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    /// `uint32 limit_remaining = 3;`
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    /// `google.protobuf.Duration duration_until_reset = 4;`
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<prost_types::Duration>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit` (rls.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    /// `string name = 3;`
    #[prost(string, tag = "3")]
    pub name: String,
    /// `uint32 requests_per_unit = 1;`
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// `Unit unit = 2;`
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit` (rls.proto).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Unit {
    /// `UNKNOWN = 0;`
    Unknown = 0,
    /// `SECOND = 1;`
    Second = 1,
    /// `MINUTE = 2;`
    Minute = 2,
    /// `HOUR = 3;`
    Hour = 3,
    /// `DAY = 4;`
    Day = 4,
    /// `MONTH = 5;`
    Month = 5,
    /// `YEAR = 6;`
    Year = 6,
    /// `WEEK = 7;`
    Week = 7,
}

impl Unit {
    /// The unit's length in milliseconds (a month as 30 days, a year as 365), or `None`.
    pub fn millis(self) -> Option<u64> {
        sluice_core::descriptor::unit_millis(self as i32)
    }
}

/// `envoy.config.core.v3.GrpcService` (grpc_service.proto): what proxy-wasm's
/// `dispatch_grpc_call` takes as its "upstream". Envoy also accepts a bare cluster name there,
/// but only after the bytes fail to parse as this message, which some names do not; a serialized
/// `GrpcService` is never ambiguous. Not declared: 2 `google_grpc`, 3 `timeout` (the call's own
/// timeout is passed separately), 5 `initial_metadata`, 6 `retry_policy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GrpcService {
    /// `EnvoyGrpc envoy_grpc = 1;` (in `oneof target_specifier`)
    #[prost(message, optional, tag = "1")]
    pub envoy_grpc: Option<EnvoyGrpc>,
}

/// `envoy.config.core.v3.GrpcService.EnvoyGrpc` (grpc_service.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EnvoyGrpc {
    /// `string cluster_name = 1;`
    #[prost(string, tag = "1")]
    pub cluster_name: String,
    /// `string authority = 2;` (empty: the cluster name)
    #[prost(string, tag = "2")]
    pub authority: String,
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
