//! The request flow in gRPC mode (`backend.protocol: grpc`) against the fake host, at fixed
//! times: the same answers, headers, cache and failure behaviour as the HTTP callout.

use std::rc::Rc;

use prost::Message;
use prost_types::value::Kind;
use sluice_core::rule::{Algorithm, Mode};

use super::*;
use crate::fake_host::FakeHost;
use crate::rls::GRPC_OK;
use crate::rls_proto::{self, Code, DescriptorStatus, RateLimitRequest, RateLimitResponse};

use super::test_support::{ended_once, MS, T0};

fn config_with(protocol: &str, extra: &str) -> Rc<Config> {
    let json = format!(
        r#"{{"backend": {{"cluster": "sluice_rls", "authority": "sluice", "timeout_ms": 30,
                       "protocol": "{protocol}"}},
        {extra}
        "routes": [{{"action": "reply", "match": {{"path_prefix": "/api/"}},
                     "key": {{"source": "header", "name": "x-user"}}, "quantity": 2}}]}}"#
    );
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

fn config(extra: &str) -> Rc<Config> {
    config_with("grpc", extra)
}

fn user(name: &str, now: u64) -> FakeHost {
    let mut h = FakeHost::request("POST", "/api/reply").header("x-user", name.as_bytes());
    h.now = now;
    h
}

fn throttle(allowed: bool, retry_after_ms: Option<u64>) -> ThrottleResponse {
    ThrottleResponse {
        allowed,
        algorithm: Algorithm::Gcra,
        mode: Mode::Enforce,
        capacity: 5,
        remaining: if allowed { 3 } else { 0 },
        retry_after_ms,
        reset_after_ms: 23_500,
        level: 2.0,
        window_ms: 60_000,
        would_deny: false,
        lease: None,
    }
}

fn proto(v: &serde_json::Value) -> prost_types::Value {
    use serde_json::Value as J;
    let kind = match v {
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
    };
    prost_types::Value { kind: Some(kind) }
}

/// What sluice's RLS service answers for one descriptor: the status and, in the metadata, the
/// exact `ThrottleResponse` (`None`: no rule, `null`).
fn sluice_answer(r: Option<&ThrottleResponse>) -> Vec<u8> {
    let code = match r {
        Some(r) if !r.allowed => Code::OverLimit,
        _ => Code::Ok,
    };
    let entry = r.map_or(serde_json::Value::Null, |r| {
        serde_json::to_value(r).unwrap()
    });
    let metadata = proto(&serde_json::json!({ "sluice": [entry] }));
    let Some(Kind::StructValue(metadata)) = metadata.kind else {
        unreachable!()
    };
    RateLimitResponse {
        overall_code: code as i32,
        statuses: vec![DescriptorStatus {
            code: code as i32,
            ..Default::default()
        }],
        dynamic_metadata: Some(metadata),
    }
    .encode_to_vec()
}

/// Runs one request: request headers, the gRPC answer (if a call went out), response headers.
fn run(flow: &mut Flow, host: &mut FakeHost, answer: Option<(u32, &[u8])>) -> Next {
    let next = flow.on_request_headers(host);
    if let (Next::Pause, Some((status, message))) = (next, answer) {
        if !host.effects.grpc_calls.is_empty() {
            let token = host.next_token - 1;
            flow.on_grpc_response(host, token, status, message);
        }
    }
    flow.on_response_headers(host);
    next
}

#[test]
fn the_grpc_call_names_the_cluster_and_carries_one_descriptor() {
    let mut h = user("alice|bob", T0);
    let mut flow = Flow::new(config(""));
    assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
    assert!(h.effects.callouts.is_empty(), "no HTTP callout");
    let call = &h.effects.grpc_calls[0];
    assert_eq!(call.timeout_ms, 30);
    let service = rls_proto::GrpcService::decode(call.service.as_bytes()).unwrap();
    let envoy = service.envoy_grpc.unwrap();
    assert_eq!(
        (envoy.cluster_name.as_str(), envoy.authority.as_str()),
        ("sluice_rls", "sluice")
    );
    let req = RateLimitRequest::decode(&*call.message).unwrap();
    assert_eq!(req.domain, "sluice");
    assert_eq!(req.hits_addend, 2, "the route's quantity");
    let entries = req.descriptors[0]
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()));
    let (action, key) = sluice_core::descriptor::to_check(0, entries).unwrap();
    assert_eq!((action.as_str(), key.as_str()), ("reply", "alice|bob"));
}

/// The same backend answer through the HTTP and the gRPC callout gives the client the same
/// status, headers and body.
#[test]
fn grpc_answers_render_exactly_as_http_answers() {
    for r in [throttle(true, None), throttle(false, Some(1_500))] {
        let mut via_http = user("alice", T0);
        let mut flow = Flow::new(config_with("http", ""));
        assert_eq!(flow.on_request_headers(&mut via_http), Next::Pause);
        let body = serde_json::to_vec(&r).unwrap();
        flow.on_callout_response(&mut via_http, 1, Some(b"200"), &body);
        flow.on_response_headers(&mut via_http);

        let mut via_grpc = user("alice", T0);
        let mut flow = Flow::new(config(""));
        let next = run(
            &mut flow,
            &mut via_grpc,
            Some((GRPC_OK, &sluice_answer(Some(&r)))),
        );
        ended_once(&via_grpc, next);
        assert_eq!(via_grpc.effects.replies, via_http.effects.replies);
        assert_eq!(
            via_grpc.effects.response_headers_added,
            via_http.effects.response_headers_added
        );
        assert_eq!(via_grpc.effects.resumed, via_http.effects.resumed);
        assert_eq!(via_grpc.counters, via_http.counters);
        // The HTTP callout also marked the lease entry (a grant asked for; gRPC never leases).
        let mut http_cache = via_http.shared.clone();
        http_cache.retain(|k, _| !k.starts_with("sluice.lease."));
        assert_eq!(via_grpc.shared, http_cache, "the same cache entry");
    }
}

#[test]
fn allowed_resumes_with_headers_and_denied_replies_429() {
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let next = run(
        &mut flow,
        &mut h,
        Some((GRPC_OK, &sluice_answer(Some(&throttle(true, None))))),
    );
    ended_once(&h, next);
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(h.counter(Counter::Allowed), 1);
    assert_eq!(
        h.response_header("ratelimit").as_deref(),
        Some("\"reply\";r=3;t=24")
    );

    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let denied = throttle(false, Some(1_500));
    let next = run(
        &mut flow,
        &mut h,
        Some((GRPC_OK, &sluice_answer(Some(&denied)))),
    );
    ended_once(&h, next);
    assert_eq!(h.effects.replies[0].0, 429);
    assert_eq!(h.reply_header("retry-after").as_deref(), Some("2"));
    assert_eq!(h.counter(Counter::Denied), 1);
}

#[test]
fn a_denial_is_cached_and_answered_locally_with_no_grpc_call() {
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let denied = throttle(false, Some(1_500));
    run(
        &mut flow,
        &mut h,
        Some((GRPC_OK, &sluice_answer(Some(&denied)))),
    );
    assert_eq!(h.effects.grpc_calls.len(), 1);

    let mut h2 = h
        .next_request("POST", "/api/reply")
        .header("x-user", b"alice");
    h2.now = T0 + 100 * MS;
    let mut flow = Flow::new(config(""));
    let next = run(&mut flow, &mut h2, None);
    ended_once(&h2, next);
    assert!(h2.effects.grpc_calls.is_empty(), "answered from the cache");
    assert_eq!(h2.effects.replies[0].0, 429);
    assert_eq!(h2.reply_header("x-sluice-cache").as_deref(), Some("hit"));
    assert_eq!(h2.reply_header("retry-after").as_deref(), Some("2"));
    assert_eq!(h2.counter(Counter::CachedDenials), 1);

    // After the retry time: asks again.
    let mut h3 = h2
        .next_request("POST", "/api/reply")
        .header("x-user", b"alice");
    h3.now = T0 + 1_500 * MS;
    let mut flow = Flow::new(config(""));
    assert_eq!(flow.on_request_headers(&mut h3), Next::Pause);
    assert_eq!(h3.effects.grpc_calls.len(), 1);
}

#[test]
fn shadow_would_deny_passes_and_says_so() {
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let mut r = throttle(true, Some(900));
    r.mode = Mode::Shadow;
    r.would_deny = true;
    let next = run(&mut flow, &mut h, Some((GRPC_OK, &sluice_answer(Some(&r)))));
    ended_once(&h, next);
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(
        h.response_header("x-sluice-shadow").as_deref(),
        Some("would-deny")
    );
    assert_eq!(h.counter(Counter::ShadowWouldDeny), 1);
}

#[test]
fn no_rule_follows_the_unknown_action_policy() {
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let next = run(&mut flow, &mut h, Some((GRPC_OK, &sluice_answer(None))));
    ended_once(&h, next);
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(
        h.response_header("x-sluice-unknown-action").as_deref(),
        Some("allow")
    );
    assert_eq!(h.counter(Counter::UnknownAction), 1);

    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(r#""unknown_action": "deny","#));
    let next = run(&mut flow, &mut h, Some((GRPC_OK, &sluice_answer(None))));
    ended_once(&h, next);
    assert_eq!(h.effects.replies[0].0, 403);
}

#[test]
fn grpc_errors_follow_the_failure_mode_with_their_code() {
    for (status, reason) in [(14, "grpc_14"), (4, "grpc_4"), (3, "grpc_3")] {
        let mut h = user("alice", T0);
        let mut flow = Flow::new(config(""));
        let next = run(&mut flow, &mut h, Some((status, b"")));
        ended_once(&h, next);
        assert_eq!(h.effects.resumed, 1);
        assert_eq!(
            h.response_header("x-sluice-failure").as_deref(),
            Some(reason)
        );
        assert!(h
            .effects
            .request_headers_set
            .contains(&("x-sluice-failure".into(), reason.into())));
        assert_eq!(h.counter(Counter::FailuresAllow), 1);

        let mut h = user("alice", T0);
        let mut flow = Flow::new(config(r#""failure_mode": "deny","#));
        let next = run(&mut flow, &mut h, Some((status, b"")));
        ended_once(&h, next);
        assert_eq!(h.effects.replies[0].0, 503);
        assert_eq!(h.reply_header("x-sluice-failure").as_deref(), Some(reason));
        assert_eq!(h.counter(Counter::FailuresDeny), 1);
    }
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let next = run(&mut flow, &mut h, Some((GRPC_OK, b"\xff\xff")));
    ended_once(&h, next);
    assert_eq!(
        h.response_header("x-sluice-failure").as_deref(),
        Some("bad_response")
    );
}

#[test]
fn a_grpc_call_that_cannot_start_fails_synchronously() {
    let mut h = user("alice", T0);
    h.dispatch_error = Some("InternalFailure".into());
    let mut flow = Flow::new(config(""));
    let next = flow.on_request_headers(&mut h);
    assert_eq!(next, Next::Continue);
    ended_once(&h, next);
    assert!(h
        .effects
        .request_headers_set
        .contains(&("x-sluice-failure".into(), "dispatch".into())));
    assert!(h.effects.warnings.borrow()[0].contains("sluice_rls"));
}

#[test]
fn a_denial_estimated_without_metadata_is_answered_but_not_cached() {
    let estimated = RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![DescriptorStatus {
            code: Code::OverLimit as i32,
            current_limit: Some(rls_proto::RateLimit {
                name: String::new(),
                requests_per_unit: 5,
                unit: rls_proto::Unit::Minute as i32,
            }),
            limit_remaining: 0,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 12,
                nanos: 0,
            }),
        }],
        dynamic_metadata: None,
    }
    .encode_to_vec();
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    let next = run(&mut flow, &mut h, Some((GRPC_OK, &estimated)));
    ended_once(&h, next);
    assert_eq!(h.effects.replies[0].0, 429);
    assert_eq!(h.reply_header("retry-after").as_deref(), Some("12"));
    assert_eq!(
        h.reply_header("ratelimit-policy").as_deref(),
        Some("\"reply\";q=5;w=60")
    );
    assert!(
        h.shared.is_empty(),
        "not cached: its retry time is not exact"
    );
}

#[test]
fn a_stray_grpc_token_is_ignored() {
    let mut h = user("alice", T0);
    let mut flow = Flow::new(config(""));
    assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
    flow.on_grpc_response(&mut h, 999, GRPC_OK, b"");
    assert_eq!(h.effects.resumed, 0);
    assert!(h.effects.replies.is_empty());
    assert_eq!(h.effects.warnings.borrow().len(), 1);
}
