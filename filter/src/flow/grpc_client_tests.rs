//! A gRPC client's request (`content-type: application/grpc`) through the flow against the fake
//! host: every answer of the filter's own is a gRPC error (`grpc-status` among the reply's headers,
//! the detail as its body, which Envoy turns into a trailers-only answer), the same on every path
//! that answers: a denial, a cached denial, an all-or-nothing denial, `failure_mode: deny`,
//! `unknown_action: deny`. An allowed gRPC request resumes as any other.

use crate::reply::CACHE_HEADER;
use std::rc::Rc;

use super::*;
use crate::fake_host::FakeHost;
use crate::reply::{GRPC_PUSHBACK_HEADER, GRPC_STATUS_HEADER};

use super::test_support::T0;

fn config(extra: &str) -> Rc<Config> {
    let json = format!(
        r#"{{"backend": {{"protocol": "http", "cluster": "sluice_backend", "timeout_ms": 30}},
        {extra}
        "routes": [
          {{"action": "calls", "match": {{"path_prefix": "/pkg.Svc/"}},
            "key": {{"source": "header", "name": "x-user"}}}},
          {{"match": {{"path_prefix": "/pkg.All/"}}, "checks": [
            {{"action": "per_user", "key": {{"source": "header", "name": "x-user"}}}},
            {{"action": "global", "key": {{"source": "constant", "value": "all"}}}}]}}]}}"#
    );
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

fn grpc_call(path: &str) -> FakeHost {
    let mut h = FakeHost::request("POST", path)
        .header("content-type", b"application/grpc")
        .header("te", b"trailers")
        .header("x-user", b"alice");
    h.now = T0;
    h
}

fn decision(allowed: bool, retry_ms: Option<u64>) -> Vec<u8> {
    let retry = retry_ms.map_or("null".to_owned(), |r| r.to_string());
    format!(
        r#"{{"allowed": {allowed}, "algorithm": "gcra", "mode": "enforce",
        "remaining": 0, "retry_after_ms": {retry}, "reset_after_ms": 60000, "level": 3.0,
        "capacity": 3, "window_ms": 60000}}"#
    )
    .into_bytes()
}

/// One request to its callout's answer (`status`, `body`); the host.
fn answered(cfg: &Rc<Config>, mut host: FakeHost, status: &[u8], body: &[u8]) -> FakeHost {
    let mut flow = Flow::new(Rc::clone(cfg));
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    let token = host.next_token - 1;
    flow.on_callout_response(&mut host, token, Some(status), body);
    host
}

/// The one reply: HTTP status, gRPC status, pushback, body as text.
fn reply(host: &FakeHost) -> (u16, Option<String>, Option<String>, String) {
    let [(status, _, body)] = host.effects.replies.clone().try_into().unwrap();
    assert_eq!(host.effects.resumed, 0);
    assert_eq!(
        host.reply_header("content-type"),
        None,
        "Envoy sets application/grpc"
    );
    (
        status,
        host.reply_header(GRPC_STATUS_HEADER),
        host.reply_header(GRPC_PUSHBACK_HEADER),
        String::from_utf8(body).unwrap(),
    )
}

#[test]
fn a_denied_grpc_call_is_resource_exhausted_with_its_retry_as_metadata() {
    let cfg = config("");
    let host = answered(
        &cfg,
        grpc_call("/pkg.Svc/Call"),
        b"200",
        &decision(false, Some(1_500)),
    );
    let (status, grpc, pushback, message) = reply(&host);
    assert_eq!(status, 429);
    assert_eq!(grpc.as_deref(), Some("8"), "RESOURCE_EXHAUSTED");
    assert_eq!(pushback.as_deref(), Some("1500"));
    assert_eq!(host.reply_header("retry-after").as_deref(), Some("2"));
    assert_eq!(
        host.reply_header("x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert!(host.reply_header("ratelimit").is_some());
    assert_eq!(
        message,
        r#"rate limit of action "calls" exceeded; retry after 2 s"#
    );
    assert_eq!(host.counter(Counter::Denied), 1);
    // The same denial answered from the denial cache: the same gRPC error, marked as cached.
    let mut next = host.next_request("POST", "/pkg.Svc/Call");
    next = next
        .header("content-type", b"application/grpc")
        .header("x-user", b"alice");
    let mut flow = Flow::new(Rc::clone(&cfg));
    assert_eq!(flow.on_request_headers(&mut next), Next::Pause);
    assert!(next.effects.callouts.is_empty(), "answered from the cache");
    let (status, grpc, _, _) = reply(&next);
    assert_eq!((status, grpc.as_deref()), (429, Some("8")));
    assert_eq!(next.reply_header(CACHE_HEADER).as_deref(), Some("hit"));
}

#[test]
fn the_configured_code_applies_and_a_never_passing_call_is_told_not_to_retry() {
    let cfg = config(r#""grpc_denied_status": 14,"#);
    let host = answered(
        &cfg,
        grpc_call("/pkg.Svc/Call"),
        b"200",
        &decision(false, None),
    );
    let (_, grpc, pushback, message) = reply(&host);
    assert_eq!(grpc.as_deref(), Some("14"));
    assert_eq!(
        pushback.as_deref(),
        Some("-1"),
        "gRFC A6: negative, do not retry"
    );
    assert!(message.contains("never pass"), "{message}");
}

#[test]
fn an_all_or_nothing_denial_of_a_grpc_call_names_the_check_that_denied() {
    let cfg = config("");
    let all = br#"{"allowed": false, "denied": {"index": 1, "action": "global"}, "results": [
        {"allowed": true, "algorithm": "gcra", "mode": "enforce", "remaining": 2, "retry_after_ms": null,
         "reset_after_ms": 1000, "level": 1.0, "capacity": 3, "window_ms": 60000},
        {"allowed": false, "algorithm": "gcra", "mode": "enforce", "remaining": 0, "retry_after_ms": 700,
         "reset_after_ms": 1000, "level": 3.0, "capacity": 3, "window_ms": 60000}]}"#;
    let host = answered(&cfg, grpc_call("/pkg.All/Call"), b"200", all);
    let (status, grpc, pushback, message) = reply(&host);
    assert_eq!((status, grpc.as_deref()), (429, Some("8")));
    assert_eq!(pushback.as_deref(), Some("700"));
    assert!(message.contains(r#""global""#), "{message}");
}

#[test]
fn a_failure_under_deny_is_unavailable_and_under_allow_the_call_passes() {
    let cfg = config(r#""failure_mode": "deny","#);
    let host = answered(
        &cfg,
        grpc_call("/pkg.Svc/Call"),
        b"504",
        b"upstream request timeout",
    );
    let (status, grpc, pushback, message) = reply(&host);
    assert_eq!((status, grpc.as_deref()), (503, Some("14")), "UNAVAILABLE");
    assert_eq!(pushback, None);
    assert_eq!(
        host.reply_header(FAILURE_HEADER).as_deref(),
        Some("timeout")
    );
    assert!(message.contains("could not decide"), "{message}");
    // A callout that cannot start fails in the request hook: the same answer.
    let mut host = grpc_call("/pkg.Svc/Call");
    host.dispatch_error = Some("no cluster".into());
    let mut flow = Flow::new(Rc::clone(&cfg));
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    assert_eq!(reply(&host).1.as_deref(), Some("14"));
    // Under allow, nothing is answered: the call goes on.
    let cfg = config("");
    let host = answered(&cfg, grpc_call("/pkg.Svc/Call"), b"504", b"");
    assert!(host.effects.replies.is_empty());
    assert_eq!(host.effects.resumed, 1);
}

#[test]
fn an_unknown_action_denied_is_permission_denied() {
    let cfg = config(r#""unknown_action": "deny","#);
    let unknown = br#"{"error": "unknown_action", "message": "no rule"}"#;
    let host = answered(&cfg, grpc_call("/pkg.Svc/Call"), b"404", unknown);
    let (status, grpc, pushback, _) = reply(&host);
    assert_eq!((status, grpc.as_deref(), pushback), (403, Some("7"), None));
}

#[test]
fn an_allowed_grpc_call_resumes_and_other_content_types_get_http_answers() {
    let cfg = config("");
    let host = answered(
        &cfg,
        grpc_call("/pkg.Svc/Call"),
        b"200",
        &decision(true, None),
    );
    assert!(host.effects.replies.is_empty());
    assert_eq!(host.effects.resumed, 1);
    // grpc-web (Envoy's grpc_web filter translates it) and JSON: problem+json, no grpc-status.
    for content_type in [&b"application/grpc-web"[..], b"application/json"] {
        let mut h = FakeHost::request("POST", "/pkg.Svc/Call")
            .header("content-type", content_type)
            .header("x-user", b"alice");
        h.now = T0;
        let h = answered(&cfg, h, b"200", &decision(false, Some(1_500)));
        assert_eq!(h.reply_header(GRPC_STATUS_HEADER), None);
        assert_eq!(
            h.reply_header("content-type").as_deref(),
            Some("application/problem+json")
        );
    }
}
