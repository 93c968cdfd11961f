//! What the filter says to clients besides the rate-limit headers (those are rendered by
//! `sluice_core::headers`, the one home of their format): the names of its own headers, the
//! `application/problem+json` bodies of its own answers, and how an answer is given to a gRPC
//! client ([`Reply`]): the one policy both hosts send through `Host::send_reply`.
//!
//! A gRPC client (`content-type: application/grpc`) reads no HTTP status and no body: it reads
//! `grpc-status`, `grpc-message` and metadata. Envoy answers a local reply to a gRPC request
//! trailers-only (`:status` 200, `content-type: application/grpc`, the body as a percent-encoded
//! `grpc-message`), and keeps a `grpc-status` the reply's own headers carry over the status it
//! would derive (`Http::Utility::prepareLocalReply`: its `grpc_status` argument, which the
//! dynamic-module host passes as 0 (OK) and the proxy-wasm host leaves to Envoy's HTTP mapping,
//! 429 -> 14 UNAVAILABLE, applies only when the headers have none). So the filter decides the
//! code here and sends it as a header: the same trailers-only answer on both hosts.

use sluice_core::headers::retry_after_secs;

use crate::failure::grpc;
use crate::host::Host;

pub mod status_details;

/// Header saying the rule would have denied (shadow mode).
pub const SHADOW_HEADER: &str = "x-sluice-shadow";
/// Header saying the backend failed and the failure mode applied; the value is the reason.
pub const FAILURE_HEADER: &str = "x-sluice-failure";
/// Header saying the action has no rule and the `unknown_action` policy applied.
pub const UNKNOWN_ACTION_HEADER: &str = "x-sluice-unknown-action";
/// Header on 429s answered from the denial cache.
pub const CACHE_HEADER: &str = "x-sluice-cache";

/// An RFC 9457 problem body. `detail` and `action` are escaped by serde_json.
pub fn problem(
    status: u16,
    title: &str,
    detail: &str,
    action: &str,
    extra: Option<(&str, u64)>,
) -> Vec<u8> {
    let mut body = serde_json::Map::new();
    body.insert("type".into(), "about:blank".into());
    body.insert("title".into(), title.into());
    body.insert("status".into(), status.into());
    body.insert("detail".into(), detail.into());
    body.insert("action".into(), action.into());
    if let Some((name, value)) = extra {
        body.insert(name.into(), value.into());
    }
    serde_json::to_vec(&serde_json::Value::Object(body)).unwrap_or_default()
}

/// The status a gRPC client reads (trailers-only, set by the filter's reply).
pub const GRPC_STATUS_HEADER: &str = "grpc-status";
/// gRPC's retry pushback (gRFC A6, "Pushback"): a client whose retry policy covers the status
/// waits this many milliseconds before its retry; a negative value asks it not to retry.
pub const GRPC_PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";
/// gRPC's rich error details: a `google.rpc.Status` with a `RetryInfo` ([`status_details`]).
pub const GRPC_DETAILS_HEADER: &str = "grpc-status-details-bin";

/// Whether a `content-type` value is gRPC as Envoy decides it for its local replies
/// (`Grpc::Common::hasGrpcContentType`): exactly `application/grpc`, or `application/grpc+` and a
/// codec (`+proto`, `+json`); case-sensitive, and not `application/grpc-web` (Envoy's grpc_web
/// filter translates those). Deciding it as Envoy does matters: Envoy rewrites the reply into a
/// gRPC one exactly then, and a gRPC status on any other reply would be noise.
pub fn is_grpc(content_type: &[u8]) -> bool {
    match content_type.strip_prefix(b"application/grpc") {
        Some(rest) => rest.is_empty() || rest.first() == Some(&b'+'),
        None => false,
    }
}

/// Whether the request the host holds is gRPC: its first `content-type` line (Envoy's
/// `getContentTypeValue`) by [`is_grpc`]. Read when a reply is sent, not on every request: the
/// hot path never asks.
pub fn request_is_grpc(host: &dyn Host) -> bool {
    let mut first: Option<bool> = None;
    host.each_request_header("content-type", &mut |v| {
        first.get_or_insert_with(|| is_grpc(v));
    });
    first.unwrap_or(false)
}

/// One of the filter's own answers (a denial, a fail-closed refusal, an unknown action refused):
/// what it says, and how a gRPC client is told. [`Reply::send`] renders it once for the request:
/// an HTTP status with an `application/problem+json` body, or, to a gRPC request, a gRPC error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The HTTP status (429, `failure_status`, 403).
    pub status: u16,
    /// The problem's title (`Too Many Requests`).
    pub title: &'a str,
    /// The problem's detail, a sentence: the body's `detail`, and a gRPC client's `grpc-message`.
    pub detail: String,
    /// The action the answer is about.
    pub action: &'a str,
    /// The gRPC status a gRPC request gets instead of `status` (never 0, OK).
    pub grpc_status: u32,
    /// A denial's retry: `Some(Some(ms))` retry after, `Some(None)` the request can never pass;
    /// `None` for an answer that is not a denial (no retry information).
    pub retry: Option<Option<u64>>,
    /// Headers of the answer (the rate-limit headers, `x-sluice-*`): on a gRPC answer they are
    /// its metadata, where a gRPC client reads `retry-after` and `ratelimit` as an HTTP one does.
    pub headers: Vec<(&'a str, &'a str)>,
}

impl<'a> Reply<'a> {
    /// The 429 for a denial of `action` under `headers` (rendered rate-limit headers):
    /// `grpc_status` (the configured `grpc_denied_status`) to a gRPC client.
    pub fn denied(
        action: &'a str,
        retry_after_ms: Option<u64>,
        grpc_status: u32,
        headers: Vec<(&'a str, &'a str)>,
    ) -> Reply<'a> {
        let detail = match retry_after_ms {
            Some(ms) => format!(
                "rate limit of action {action:?} exceeded; retry after {} s",
                retry_after_secs(ms)
            ),
            None => {
                format!("rate limit of action {action:?} exceeded; this request can never pass")
            }
        };
        Reply {
            status: 429,
            title: "Too Many Requests",
            detail,
            action,
            grpc_status,
            retry: Some(retry_after_ms),
            headers,
        }
    }

    /// Sends it, once: to a gRPC request, with `grpc-status` (and a denial's pushback) among the
    /// headers and the detail as the body (Envoy's `grpc-message`); to any other request, the
    /// problem+json body.
    pub fn send(self, host: &mut dyn Host) {
        let mut headers = self.headers;
        if request_is_grpc(host) {
            let code = self.grpc_status.to_string();
            // gRFC A6: a negative pushback asks the client not to retry at all.
            let pushback = self
                .retry
                .map(|r| r.map_or_else(|| "-1".to_owned(), |ms| ms.to_string()));
            let details = self
                .retry
                .flatten()
                .map(|ms| status_details::retry(self.grpc_status, &self.detail, ms));
            headers.push((GRPC_STATUS_HEADER, &code));
            if let Some(ms) = &pushback {
                headers.push((GRPC_PUSHBACK_HEADER, ms));
            }
            if let Some(details) = &details {
                headers.push((GRPC_DETAILS_HEADER, details));
            }
            host.send_reply(self.status, &headers, self.detail.as_bytes());
            return;
        }
        let retry = self.retry.flatten().map(|ms| ("retry_after_ms", ms));
        let body = problem(self.status, self.title, &self.detail, self.action, retry);
        // First, so the answer's own headers (`x-sluice-cache`, ...) keep their place last.
        headers.insert(0, ("content-type", "application/problem+json"));
        host.send_reply(self.status, &headers, &body);
    }
}

/// The gRPC status of a fail-closed answer (`failure_mode: deny`): UNAVAILABLE, the limiter is
/// down, not the request over a limit.
pub const GRPC_FAILURE_STATUS: u32 = grpc::UNAVAILABLE;
/// The gRPC status of `unknown_action: deny` (its HTTP 403): PERMISSION_DENIED.
pub const GRPC_UNKNOWN_ACTION_STATUS: u32 = grpc::PERMISSION_DENIED;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_host::FakeHost;

    fn sent(host: &FakeHost) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let [reply] = host.effects.replies.clone().try_into().unwrap();
        reply
    }

    fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn grpc_is_decided_as_envoy_decides_it() {
        for yes in [
            &b"application/grpc"[..],
            b"application/grpc+proto",
            b"application/grpc+json",
        ] {
            assert!(is_grpc(yes), "{yes:?}");
        }
        for no in [
            &b"application/grpc-web"[..],
            b"application/grpc-web+proto",
            b"application/grpc;charset=utf-8",
            b"Application/gRPC",
            b"application/json",
            b"",
            b" application/grpc",
        ] {
            assert!(!is_grpc(no), "{no:?}");
        }
        let host = FakeHost::request("POST", "/x")
            .header("content-type", b"application/json")
            .header("content-type", b"application/grpc");
        assert!(
            !request_is_grpc(&host),
            "the first line decides, as Envoy's"
        );
        assert!(!request_is_grpc(&FakeHost::request("POST", "/x")));
    }

    #[test]
    fn a_denial_is_a_problem_naming_the_action() {
        let mut host = FakeHost::request("GET", "/x");
        Reply::denied("reply", Some(1_500), 8, vec![("retry-after", "2")]).send(&mut host);
        let (status, headers, body) = sent(&host);
        assert_eq!(status, 429);
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/problem+json")
        );
        assert_eq!(header(&headers, "retry-after"), Some("2"));
        assert_eq!(header(&headers, GRPC_STATUS_HEADER), None, "not gRPC");
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["action"], "reply");
        assert_eq!(body["retry_after_ms"], 1500);
        assert!(body["detail"].as_str().unwrap().contains("retry after 2 s"));
    }

    #[test]
    fn a_request_that_can_never_pass_says_so_and_has_no_retry_time() {
        let mut host = FakeHost::request("GET", "/x");
        Reply::denied("reply", None, 8, vec![]).send(&mut host);
        let body: serde_json::Value = serde_json::from_slice(&sent(&host).2).unwrap();
        assert!(body.get("retry_after_ms").is_none());
        assert!(body["detail"].as_str().unwrap().contains("never pass"));
    }

    #[test]
    fn a_denial_of_a_grpc_request_is_a_grpc_error_with_its_retry() {
        let grpc = || {
            FakeHost::request("POST", "/pkg.Svc/Call").header("content-type", b"application/grpc")
        };
        let mut host = grpc();
        Reply::denied("reply", Some(1_500), 8, vec![("retry-after", "2")]).send(&mut host);
        let (status, headers, body) = sent(&host);
        assert_eq!(status, 429, "Envoy makes it :status 200, trailers-only");
        assert_eq!(header(&headers, GRPC_STATUS_HEADER), Some("8"));
        assert_eq!(header(&headers, GRPC_PUSHBACK_HEADER), Some("1500"));
        let details = status_details::retry(8, &String::from_utf8_lossy(&body), 1_500);
        assert_eq!(
            header(&headers, GRPC_DETAILS_HEADER),
            Some(details.as_str())
        );
        assert_eq!(header(&headers, "retry-after"), Some("2"), "metadata");
        assert_eq!(
            header(&headers, "content-type"),
            None,
            "Envoy sets application/grpc"
        );
        // The body becomes grpc-message: the sentence, not JSON.
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "rate limit of action \"reply\" exceeded; retry after 2 s"
        );
        // The configured code; never-passing: a negative pushback (do not retry).
        let mut host = grpc();
        Reply::denied("reply", None, 14, vec![]).send(&mut host);
        let (_, headers, _) = sent(&host);
        assert_eq!(header(&headers, GRPC_STATUS_HEADER), Some("14"));
        assert_eq!(header(&headers, GRPC_PUSHBACK_HEADER), Some("-1"));
        assert_eq!(
            header(&headers, GRPC_DETAILS_HEADER),
            None,
            "no retry to tell"
        );
    }

    #[test]
    fn an_answer_that_is_not_a_denial_carries_no_pushback() {
        let mut host =
            FakeHost::request("POST", "/x").header("content-type", b"application/grpc+proto");
        Reply {
            status: 503,
            title: "Rate Limiter Unavailable",
            detail: "down".into(),
            action: "a",
            grpc_status: GRPC_FAILURE_STATUS,
            retry: None,
            headers: vec![(FAILURE_HEADER, "timeout")],
        }
        .send(&mut host);
        let (status, headers, body) = sent(&host);
        assert_eq!(status, 503);
        assert_eq!(header(&headers, GRPC_STATUS_HEADER), Some("14"));
        assert_eq!(header(&headers, GRPC_PUSHBACK_HEADER), None);
        assert_eq!(header(&headers, GRPC_DETAILS_HEADER), None);
        assert_eq!(header(&headers, FAILURE_HEADER), Some("timeout"));
        assert_eq!(body, b"down");
    }
}
