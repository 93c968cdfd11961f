//! The decision exchange: the filter's gRPC transport for the decision API.
//!
//! An HTTP callout per request costs Envoy a new upstream stream each time (headers, a router,
//! a connection-pool pick). The exchange carries the same request instead as one message on a
//! long-lived gRPC stream per Envoy worker: the decision API's path and JSON body go out, its
//! HTTP status and JSON body come back, matched by `id`. The backend answers it with the very
//! same handlers as its decision listener, so the two transports cannot disagree; the filter
//! reads the answer with the same code as an HTTP callout's.
//!
//! ```proto
//! package sluice.v1;
//! service DecisionExchange {
//!   // One message per decision; answers come back in any order, matched by id.
//!   rpc Stream(stream ExchangeRequest) returns (stream ExchangeReply);
//!   // The same exchange as one call (the filter's fallback while its stream is down).
//!   rpc Call(ExchangeRequest) returns (ExchangeReply);
//! }
//! message ExchangeRequest { uint64 id = 1; string path = 2; bytes body = 3; }
//! message ExchangeReply { uint64 id = 1; uint32 status = 2; bytes body = 3; }
//! ```

/// The gRPC service (`package sluice.v1; service DecisionExchange`).
pub const SERVICE: &str = "sluice.v1.DecisionExchange";
/// The bidirectional streaming method: many exchanges on one stream.
pub const STREAM_METHOD: &str = "Stream";
/// The unary method: one exchange per call.
pub const CALL_METHOD: &str = "Call";
/// The stream method's HTTP/2 path, as a gRPC server routes it.
pub const STREAM_PATH: &str = "/sluice.v1.DecisionExchange/Stream";
/// The unary method's HTTP/2 path.
pub const CALL_PATH: &str = "/sluice.v1.DecisionExchange/Call";

/// One request of the decision API: `POST {path}` with the JSON `body`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ExchangeRequest {
    /// Chosen by the sender, unique among its requests in flight on one stream; echoed back.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The decision API's path (`/v1/throttle`, `/v1/throttle/all`, `/v1/report`).
    #[prost(string, tag = "2")]
    pub path: String,
    /// The JSON body, exactly as the HTTP route takes it.
    #[prost(bytes = "vec", tag = "3")]
    pub body: Vec<u8>,
}

/// The answer to one [`ExchangeRequest`]: the HTTP status and JSON body the route answered.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ExchangeReply {
    /// The request's `id`.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The HTTP status the route answered (200, 400, 404, 413, 503, ...).
    #[prost(uint32, tag = "2")]
    pub status: u32,
    /// The JSON body the route answered.
    #[prost(bytes = "vec", tag = "3")]
    pub body: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn messages_round_trip_and_match_their_proto_field_numbers() {
        let request = ExchangeRequest {
            id: 300,
            path: "/v1/throttle".to_owned(),
            body: b"{}".to_vec(),
        };
        let bytes = request.encode_to_vec();
        // id = 1 (varint 300 = ac 02), path = 2 (len 12), body = 3 (len 2).
        let mut want = vec![0x08, 0xac, 0x02, 0x12, 12];
        want.extend_from_slice(b"/v1/throttle");
        want.extend_from_slice(&[0x1a, 2, b'{', b'}']);
        assert_eq!(bytes, want);
        assert_eq!(ExchangeRequest::decode(&bytes[..]).unwrap(), request);

        let reply = ExchangeReply {
            id: 7,
            status: 429,
            body: vec![0xff, 0],
        };
        let bytes = reply.encode_to_vec();
        assert_eq!(bytes, [0x08, 7, 0x10, 0xad, 0x03, 0x1a, 2, 0xff, 0]);
        assert_eq!(ExchangeReply::decode(&bytes[..]).unwrap(), reply);
    }

    #[test]
    fn unknown_fields_are_skipped_and_truncated_messages_refused() {
        // Field 9 (varint 5) before the known ones: a newer sender's field is ignored.
        let bytes = [0x48, 5, 0x08, 3, 0x10, 200, 1];
        let reply = ExchangeReply::decode(&bytes[..]).unwrap();
        assert_eq!((reply.id, reply.status), (3, 200));
        // A body whose length runs past the end.
        assert!(ExchangeReply::decode(&[0x1a, 5, b'x'][..]).is_err());
        // A path that is not UTF-8.
        assert!(ExchangeRequest::decode(&[0x12, 1, 0xff][..]).is_err());
    }

    #[test]
    fn paths_are_the_service_and_method_names() {
        assert_eq!(STREAM_PATH, format!("/{SERVICE}/{STREAM_METHOD}"));
        assert_eq!(CALL_PATH, format!("/{SERVICE}/{CALL_METHOD}"));
    }
}
