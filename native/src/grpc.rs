//! gRPC unary calls over Envoy's HTTP callout, framed by hand: the exchange's
//! `DecisionExchange/Call` (`protocol: grpc_stream`) and RLS `ShouldRateLimit` (`protocol:
//! grpc`). The dynamic-module ABI has no gRPC client; a gRPC call is an HTTP/2 POST whose body
//! is one length-prefixed message, answered by one message and a `grpc-status`.
//!
//! The callout hands back headers and body but not trailers, so an answer is read as: a
//! `grpc-status` header (a trailers-only answer: an error, or UNIMPLEMENTED from the wrong
//! listener) wins; else Envoy's own 504 is DEADLINE_EXCEEDED and any other non-200 (503: no
//! upstream) UNAVAILABLE; else one complete message is OK (a server sends a message only on
//! success); else UNKNOWN.

#![forbid(unsafe_code)]

use sluice_filter::failure::grpc;

use crate::copied::CalloutAnswer;

/// The 5-byte gRPC prefix (uncompressed, big-endian length) and the message.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The headers of a unary call to `path` on `authority`.
pub fn headers<'a>(path: &'a str, authority: &'a str) -> [(&'a str, &'a str); 5] {
    [
        (":method", "POST"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
}

/// A unary call's outcome: gRPC status, grpc-message, and the message when OK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The gRPC status code.
    pub code: u32,
    /// The grpc-message, or what was seen instead.
    pub message: Option<String>,
    /// The one message of an OK answer.
    pub bytes: Vec<u8>,
}

/// Reads a callout's answer as a unary gRPC reply.
pub fn read(answer: &CalloutAnswer) -> Reply {
    let fail = |code: u32, message: String| Reply {
        code,
        message: Some(message),
        bytes: Vec::new(),
    };
    if !answer.completed {
        return fail(grpc::UNAVAILABLE, "the call was reset".to_owned());
    }
    if let Some(status) = answer.header("grpc-status") {
        let code = grpc::parse_status(status);
        let message = answer
            .header("grpc-message")
            .map(|m| String::from_utf8_lossy(m).into_owned());
        if code != grpc::OK {
            return Reply {
                code,
                message,
                bytes: Vec::new(),
            };
        }
    }
    match answer.header(":status") {
        Some(b"200") => {}
        other => {
            let (code, seen) = grpc::of_http_status(other);
            return fail(code, seen);
        }
    }
    match unframe(&answer.body) {
        Some(bytes) => Reply {
            code: grpc::OK,
            message: None,
            bytes: bytes.to_vec(),
        },
        None => fail(grpc::UNKNOWN, "no message and no grpc-status".to_owned()),
    }
}

/// The one message of a body (`None` when incomplete or compressed).
fn unframe(body: &[u8]) -> Option<&[u8]> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 || rest.len() < 4 {
        return None;
    }
    let (len, rest) = rest.split_at(4);
    let len = usize::try_from(u32::from_be_bytes(len.try_into().ok()?)).ok()?;
    rest.get(..len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(headers: &[(&str, &str)], body: &[u8]) -> CalloutAnswer {
        CalloutAnswer {
            completed: true,
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn round_trip() {
        let framed = frame(b"hello");
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 5]);
        let r = read(&answer(&[(":status", "200")], &framed));
        assert_eq!((r.code, r.bytes.as_slice()), (0, &b"hello"[..]));
    }

    #[test]
    fn failures() {
        let unimplemented = answer(
            &[
                (":status", "200"),
                ("grpc-status", "12"),
                ("grpc-message", "x"),
            ],
            b"",
        );
        assert_eq!(read(&unimplemented).code, grpc::UNIMPLEMENTED);
        assert_eq!(read(&unimplemented).message.as_deref(), Some("x"));
        assert_eq!(read(&answer(&[(":status", "504")], b"")).code, 4);
        assert_eq!(read(&answer(&[(":status", "503")], b"")).code, 14);
        assert_eq!(read(&answer(&[(":status", "200")], b"\0\0\0")).code, 2);
        assert_eq!(read(&CalloutAnswer::default()).code, 14);
    }
}
