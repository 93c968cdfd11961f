//! `POST /json`: a `RateLimitRequest` as JSON, answered by the RLS front door itself
//! ([`crate::grpc::rls::Rls`], the same call Envoy's gRPC request makes), as the peer's handler
//! answers (`NewJsonHandler` in its `src/server/server_impl.go`):
//!
//! - `200` with the response's JSON when the overall code is `OK`, `429` when `OVER_LIMIT`,
//!   `500` (with the JSON) when `UNKNOWN`;
//! - `400` when the body is not a request ([`super::decode`] names the field) and when the service
//!   refuses it (an empty domain, no descriptors, a store failure: the peer sends 400 for every
//!   error of its service); the body says why, after the peer's `Bad Request`;
//! - `413` past [`MAX_BODY_BYTES`] (the peer reads any size).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

use super::text::text_error;
use super::{decode, encode};
use crate::grpc::rls::Rls;
use crate::http::input::MAX_BODY_BYTES;
use crate::state::App;

/// The answer to one `POST /json`.
pub async fn json(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return text_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the body is larger than {MAX_BODY_BYTES} bytes"),
            );
        }
        Err(rejection) => return text_error(StatusCode::BAD_REQUEST, &rejection.body_text()),
    };
    let request = match decode::request(&body) {
        Ok(request) => request,
        Err(e) => {
            return text_error(
                StatusCode::BAD_REQUEST,
                &format!("{}: {}", e.field, e.reason),
            )
        }
    };
    let answer = match Rls::new(app)
        .should_rate_limit(tonic::Request::new(request))
        .await
    {
        Ok(answer) => as_the_peer_defaults(answer.into_inner()),
        Err(status) => return text_error(StatusCode::BAD_REQUEST, status.message()),
    };
    let status = match Code::try_from(answer.overall_code) {
        Ok(Code::Ok) => StatusCode::OK,
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        encode::response(&answer),
    )
        .into_response()
}

/// The answer as the peer writes it with its defaults: without the rate-limit headers and the
/// dynamic metadata it adds only under `LIMIT_RESPONSE_HEADERS_ENABLED` and
/// `RESPONSE_DYNAMIC_METADATA` (Envoy gets both from sluice's gRPC answer; a script reading
/// `/json` gets the peer's shape, byte for byte).
pub fn as_the_peer_defaults(answer: RateLimitResponse) -> RateLimitResponse {
    RateLimitResponse {
        response_headers_to_add: Vec::new(),
        dynamic_metadata: None,
        ..answer
    }
}
