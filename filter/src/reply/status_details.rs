//! `grpc-status-details-bin`: the rich error model's `google.rpc.Status` carrying a
//! `google.rpc.RetryInfo`, so that gRPC clients that read error details (grpc-go's
//! `status.FromError(..).Details()`, grpc-java's `StatusProto.fromThrowable`, Python's
//! `grpc_status.rpc_status.from_call`, Google's client libraries) get a denial's retry delay as a
//! typed value, not only as `retry-after` text.
//!
//! Declared by hand with prost's derive, as `rls_proto.rs` declares its messages (the filter
//! builds for wasm32-wasip1 and pulls no generated crate). Sources (googleapis, `google/rpc/`):
//! `status.proto` (`Status`), `error_details.proto` (`RetryInfo`); `google.protobuf.Any` and
//! `Duration` from `prost-types`.

// prost's derive writes the accessors; the fields are documented by their proto source.
#![allow(missing_docs)]

/// The `Any` type URL of a `google.rpc.RetryInfo`.
pub const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// `google.rpc.Status` (status.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    /// `int32 code = 1;` (must equal the answer's `grpc-status`)
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// `string message = 2;` (the answer's `grpc-message`, unencoded)
    #[prost(string, tag = "2")]
    pub message: String,
    /// `repeated google.protobuf.Any details = 3;`
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<prost_types::Any>,
}

/// `google.rpc.RetryInfo` (error_details.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RetryInfo {
    /// `google.protobuf.Duration retry_delay = 1;`
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<prost_types::Duration>,
}

/// The header's value for a denial answered `code`/`message` that may be retried after
/// `retry_after_ms`: a `Status` with one `RetryInfo` detail, base64 without padding (what gRPC
/// sends for `-bin` metadata; every implementation accepts it).
pub fn retry(code: u32, message: &str, retry_after_ms: u64) -> String {
    let delay = prost_types::Duration {
        seconds: i64::try_from(retry_after_ms / 1000).unwrap_or(i64::MAX),
        // Below 10^9: fits.
        nanos: i32::try_from((retry_after_ms % 1000) * 1_000_000).unwrap_or(0),
    };
    let info = RetryInfo {
        retry_delay: Some(delay),
    };
    let status = RpcStatus {
        code: i32::try_from(code).unwrap_or(i32::MAX),
        message: message.to_owned(),
        details: vec![prost_types::Any {
            type_url: RETRY_INFO_TYPE.to_owned(),
            value: prost::Message::encode_to_vec(&info),
        }],
    };
    base64(&prost::Message::encode_to_vec(&status))
}

/// Standard base64 (RFC 4648 section 4), no padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextet = |n: u32, shift: u32| char::from(ALPHABET[((n >> shift) & 63) as usize]);
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (b(0) << 16) | (b(1) << 8) | b(2);
        out.push(sextet(n, 18));
        out.push(sextet(n, 12));
        if chunk.len() > 1 {
            out.push(sextet(n, 6));
        }
        if chunk.len() > 2 {
            out.push(sextet(n, 0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_rfc_4648_without_padding() {
        // RFC 4648 section 10's vectors, padding dropped.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xfb, 0xff]), "+/8");
    }

    #[test]
    fn the_status_is_the_wire_bytes_of_status_and_retry_info() {
        // Written out by hand from the .proto field numbers: a decoder that is not prost's
        // (the e2e test's, in Python) reads the same.
        let value = retry(8, "m", 1_500);
        let mut retry_info = vec![0x0a, 5, 0x08, 1, 0x10];
        retry_info.extend([0x80, 0xca, 0xb5, 0xee, 0x01]); // 500,000,000 as a varint
        retry_info[1] = 2 + 1 + 5; // Duration: seconds (2 bytes) + nanos (1 + 5)
        let mut any = vec![0x0a, RETRY_INFO_TYPE.len() as u8];
        any.extend(RETRY_INFO_TYPE.as_bytes());
        any.extend([0x12, retry_info.len() as u8]);
        any.extend(&retry_info);
        let mut want = vec![0x08, 8, 0x12, 1, b'm', 0x1a, any.len() as u8];
        want.extend(&any);
        assert_eq!(value, base64(&want));
        let decoded: RpcStatus = prost::Message::decode(want.as_slice()).unwrap();
        assert_eq!((decoded.code, decoded.message.as_str()), (8, "m"));
        let info: RetryInfo = prost::Message::decode(decoded.details[0].value.as_slice()).unwrap();
        let delay = info.retry_delay.unwrap();
        assert_eq!((delay.seconds, delay.nanos), (1, 500_000_000));
    }
}
