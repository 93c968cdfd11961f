//! The glue against a fake Envoy (`fake.rs`): a request's hooks from its headers to its end,
//! what each hook leaves Envoy to do ([`After`]) and when it is done, with fixed times.

#![forbid(unsafe_code)]

use std::sync::Arc;

use sluice_filter::host::Counter;

use super::config::{parse_config, Common};
use super::fake::FakeEnvoy;
use super::*;
use crate::relay::Reports;

const T0: u64 = 1_700_000_000_000_000_000;

/// A configuration over HTTP (`mode`: `allow` or `deny`), counter `i` defined as id `i`, no
/// reports, no stream; leases off, so that each request calls out.
fn common(mode: &str) -> Arc<Common> {
    let json = format!(
        r#"{{"backend": {{"protocol": "http", "cluster": "sluice_backend", "authority": "sluice", "timeout_ms": 30}},
        "failure_mode": "{mode}", "failure_status": 503, "lease": {{"enabled": false}},
        "routes": [{{"action": "reply", "match": {{"path_prefix": "/api/"}},
                     "key": {{"source": "header", "name": "x-user"}}}}]}}"#
    );
    let config = parse_config(json.as_bytes()).unwrap();
    let counters = (0..Counter::ALL.len()).map(Some).collect();
    let reports = Reports::new(None, &config);
    Arc::new(Common::new(config, counters, reports, None))
}

/// A request of `user` (each test its own: the denial cache is process-wide).
fn request(common: &Arc<Common>, user: &str) -> (NativeFilter<FakeEnvoy>, FakeEnvoy) {
    let envoy = FakeEnvoy::request("POST", "/api/reply", &[("x-user", user)], T0);
    (NativeFilter::new(common, envoy.clone()), envoy)
}

/// What the backend decided.
#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    Allowed,
    Denied,
}

fn decision(verdict: Verdict) -> Vec<u8> {
    let allowed = verdict == Verdict::Allowed;
    format!(
        r#"{{"allowed": {allowed}, "algorithm": "gcra", "mode": "enforce",
        "remaining": {rem}, "retry_after_ms": {retry}, "reset_after_ms": 60000, "level": 3.0,
        "capacity": 3, "window_ms": 60000}}"#,
        rem = if allowed { 2 } else { 0 },
        retry = if allowed { "null" } else { "1500" },
    )
    .into_bytes()
}

fn answer(status: &str, body: Vec<u8>) -> CalloutAnswer {
    CalloutAnswer {
        completed: true,
        headers: vec![(b":status".to_vec(), status.as_bytes().to_vec())],
        body,
    }
}

/// The id of the last callout the request started.
fn last_callout(envoy: &FakeEnvoy) -> u64 {
    envoy.record().callouts.last().map(|c| c.id).unwrap()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn an_allowed_decision_resumes_the_request_and_adds_the_headers() {
    let common = common("allow");
    let (mut f, envoy) = request(&common, "allowed-user");
    assert_eq!(on_request_headers(&mut f), (true, None));
    assert!(decision_pending(&f));
    let call = envoy.record().callouts[0].clone();
    assert_eq!(call.cluster, "sluice_backend");
    assert!(call
        .headers
        .contains(&(":path".to_owned(), "/v1/throttle".to_owned())));
    assert!(String::from_utf8_lossy(&call.body).contains("allowed-user"));
    let after = on_callout_done(&mut f, call.id, answer("200", decision(Verdict::Allowed)));
    assert_eq!(after, Some(After::Resume));
    assert!(!decision_pending(&f));
    assert_eq!(
        envoy.record().continued,
        0,
        "the glue itself resumes nothing"
    );
    perform(&envoy, after);
    assert_eq!(envoy.record().continued, 1);
    assert_eq!(on_response_headers(&mut f), None);
    let added = envoy.record().added.clone();
    assert!(added.contains(&("x-ratelimit-remaining".to_owned(), b"2".to_vec())));
    assert_eq!(envoy.counter(Counter::Allowed), 1);
    assert_eq!(envoy.counter(Counter::Callouts), 1);
    filter_destroy(f);
    assert!(envoy.record().replies.is_empty());
}

#[test]
fn a_denied_decision_answers_429_with_a_problem_body() {
    let common = common("allow");
    let (mut f, envoy) = request(&common, "denied-user");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let id = last_callout(&envoy);
    let after = on_callout_done(&mut f, id, answer("200", decision(Verdict::Denied)));
    let Some(After::Reply(status, headers, body)) = after.clone() else {
        panic!("a reply, not {after:?}");
    };
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("2"));
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/problem+json")
    );
    assert!(String::from_utf8_lossy(&body).contains("\"reply\""));
    assert!(envoy.record().replies.is_empty());
    perform(&envoy, after);
    assert_eq!(envoy.record().replies.len(), 1);
    assert_eq!(envoy.record().replies[0].0, 429);
    assert_eq!(envoy.record().continued, 0);
    assert_eq!(envoy.counter(Counter::Denied), 1);
}

/// Two requests of one worker wait at once; their answers come later, in the other order, and
/// each goes to its own request.
#[test]
fn pending_callouts_are_answered_later_each_to_its_request() {
    let common = common("allow");
    let (mut first, first_envoy) = request(&common, "pending-a");
    let (mut second, second_envoy) = request(&common, "pending-b");
    assert_eq!(on_request_headers(&mut first), (true, None));
    assert_eq!(on_request_headers(&mut second), (true, None));
    assert!(decision_pending(&first) && decision_pending(&second));
    assert_ne!(first.slot, second.slot);
    // An answer for a callout the request did not start (or already answered) changes nothing.
    assert_eq!(
        on_callout_done(&mut first, 9_999, answer("200", decision(Verdict::Allowed))),
        None
    );
    assert!(decision_pending(&first));
    let id = last_callout(&second_envoy);
    let after = on_callout_done(&mut second, id, answer("200", decision(Verdict::Denied)));
    assert!(matches!(after, Some(After::Reply(429, _, _))));
    assert!(decision_pending(&first));
    let id = last_callout(&first_envoy);
    assert_eq!(
        on_callout_done(&mut first, id, answer("200", decision(Verdict::Allowed))),
        Some(After::Resume)
    );
    // The same answer again: already delivered, nothing to do.
    assert_eq!(
        on_callout_done(&mut first, id, answer("200", decision(Verdict::Allowed))),
        None
    );
}

/// A failure under each failure mode: a callout Envoy refuses (in the request headers: the
/// hook's own return), and one that fails later (a reset: through an `After`).
#[test]
fn a_failure_applies_the_failure_mode() {
    // allow: refused at once, the request goes on with the failure header.
    let open = common("allow");
    let (mut f, envoy) = request(&open, "failing-open");
    envoy.record().refuse = Some(2);
    assert_eq!(on_request_headers(&mut f), (false, None));
    assert!(!decision_pending(&f));
    assert_eq!(
        envoy.record().set,
        [("x-sluice-failure".to_owned(), "dispatch".to_owned())]
    );
    assert_eq!(envoy.counter(Counter::FailuresAllow), 1);
    // allow: a reset later resumes the request.
    let (mut f, envoy) = request(&open, "failing-open-later");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let id = last_callout(&envoy);
    let reset = CalloutAnswer::default();
    assert_eq!(
        on_callout_done(&mut f, id, reset.clone()),
        Some(After::Resume)
    );
    assert_eq!(envoy.counter(Counter::FailuresAllow), 1);
    // deny: refused at once, answered failure_status from the request headers.
    let closed = common("deny");
    let (mut f, envoy) = request(&closed, "failing-closed");
    envoy.record().refuse = Some(2);
    let (stop, after) = on_request_headers(&mut f);
    assert!(stop);
    let Some(After::Reply(503, headers, _)) = after else {
        panic!("503, not {after:?}");
    };
    assert_eq!(header(&headers, "x-sluice-failure"), Some("dispatch"));
    assert_eq!(envoy.counter(Counter::FailuresDeny), 1);
    // deny: a reset later is answered failure_status.
    let (mut f, envoy) = request(&closed, "failing-closed-later");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let id = last_callout(&envoy);
    let after = on_callout_done(&mut f, id, reset);
    assert!(matches!(after, Some(After::Reply(503, _, _))), "{after:?}");
    assert_eq!(envoy.counter(Counter::FailuresDeny), 1);
}

/// A request the module itself could not decide (a panic caught in its hook): the failure mode
/// applies, counted and logged as internal; one no longer stopped is left alone.
#[test]
fn an_undecided_request_fails_by_its_mode() {
    let closed = common("deny");
    let (mut f, envoy) = request(&closed, "undecided-closed");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let (_, after) = undecided(&mut f, "http_callout_done", When::Later);
    let Some(After::Reply(503, headers, _)) = after else {
        panic!("503, not {after:?}");
    };
    assert_eq!(header(&headers, "x-sluice-failure"), Some("internal"));
    assert_eq!(envoy.counter(Counter::FailuresInternal), 1);
    assert!(envoy
        .record()
        .logs
        .iter()
        .any(|(level, line)| *level == Level::Warn && line.contains("http_callout_done")));
    // The flow is gone: a late answer is undecided again, but the request is no longer stopped.
    assert_eq!(f.slot, None);
    assert_eq!(on_callout_done(&mut f, 1, CalloutAnswer::default()), None);
    assert_eq!(envoy.counter(Counter::FailuresInternal), 1);
    // allow: resumed, with the failure header.
    let open = common("allow");
    let (mut f, envoy) = request(&open, "undecided-open");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let (_, after) = undecided(&mut f, "http_callout_done", When::Later);
    assert_eq!(after, Some(After::Resume));
    assert!(envoy
        .record()
        .set
        .contains(&("x-sluice-failure".to_owned(), "internal".to_owned())));
    // No filter at all, no configuration failing closed: passed on and logged.
    let envoy = FakeEnvoy::default();
    let (stop, after) =
        undecided_without_filter(&envoy, "on_request_headers", When::InRequestHeaders);
    if FAIL_CLOSED_STATUS.load(Ordering::Relaxed) == 0 {
        assert_eq!((stop, after), (false, None));
    }
    assert_eq!(envoy.record().logs.len(), 1);
}

/// The fix for the re-entrancy hang (issue 28 0a): the glue returns what Envoy is to do and
/// the hook does it after the worker's lock is released, so that Envoy may run this filter's
/// other hooks (which take the lock) inside `continue_decoding` / `send_response`.
#[test]
fn envoy_is_asked_to_resume_or_answer_only_with_the_lock_released() {
    let common = common("allow");
    let (mut f, envoy) = request(&common, "reentrant");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let local = f.local.clone().unwrap();
    envoy.record().watch = Some(Arc::clone(&local));
    let id = last_callout(&envoy);
    let after = on_callout_done(&mut f, id, answer("200", decision(Verdict::Allowed)));
    // Nothing was handed to Envoy inside the hook's work, with the lock held.
    assert!(envoy.record().locked_when_handed.is_empty());
    assert!(!local.is_locked());
    perform(&envoy, after);
    assert_eq!(envoy.record().locked_when_handed, [false]);
    // The response hooks Envoy would run inside `continue_decoding` take the lock freely.
    assert_eq!(on_response_headers(&mut f), None);
    // A guard held while asking is what the test would see: the check is live.
    let guard = local.lock();
    perform(&envoy, Some(After::Resume));
    drop(guard);
    assert_eq!(envoy.record().locked_when_handed, [false, true]);
}

/// A resume asked for inside the request-headers hook (an answer Envoy gave inside its own
/// `http_callout`) is the hook's "continue" return, not a `continue_decoding`.
#[test]
fn an_answer_inside_the_request_headers_is_a_continue_return() {
    let common = common("allow");
    let (mut f, envoy) = request(&common, "answered-at-once");
    envoy.record().answer_at_once = Some(answer("200", decision(Verdict::Allowed)));
    assert_eq!(on_request_headers(&mut f), (false, None));
    assert!(!decision_pending(&f));
    assert_eq!(envoy.counter(Counter::Allowed), 1);
    assert_eq!(envoy.record().continued, 0);
}

/// A request destroyed while its decision is pending: its flow ends and its slot is free for
/// the worker's next request; Envoy is asked nothing for it.
#[test]
fn a_request_destroyed_while_pending_frees_its_flow() {
    let common = common("allow");
    let (mut f, envoy) = request(&common, "gone-while-pending");
    assert_eq!(on_request_headers(&mut f), (true, None));
    let slot = f.slot.unwrap();
    filter_destroy(f);
    assert_eq!(envoy.record().continued, 0);
    assert!(envoy.record().replies.is_empty());
    let (mut next, _) = request(&common, "after-the-gone-one");
    assert_eq!(on_request_headers(&mut next), (true, None));
    assert_eq!(next.slot, Some(slot), "the slot was freed");
}

/// A request no route matches passes with no lock, no flow and no callout.
#[test]
fn an_unmatched_request_passes_untouched() {
    let common = common("deny");
    let envoy = FakeEnvoy::request("GET", "/static/x", &[("x-user", "u")], T0);
    let mut f = NativeFilter::new(&common, envoy.clone());
    assert_eq!(on_request_headers(&mut f), (false, None));
    assert!(f.local.is_none() && f.slot.is_none());
    assert!(envoy.record().callouts.is_empty());
    assert_eq!(on_response_headers(&mut f), None);
}

/// `grpc_stream` without the main thread's stream (`filter_name` ending in `/unary`): the
/// exchange goes as a unary `DecisionExchange/Call` over the HTTP callout, counted as one; its
/// failure (a trailers-only `grpc-status`) applies the failure mode.
#[test]
fn an_exchange_without_the_stream_goes_unary_and_is_counted() {
    let json = br#"{"backend": {"protocol": "grpc_stream", "cluster": "sluice_grpc", "authority": "sluice", "timeout_ms": 30},
        "failure_mode": "deny", "failure_status": 503, "lease": {"enabled": false},
        "routes": [{"action": "reply", "match": {"path_prefix": "/api/"},
                     "key": {"source": "header", "name": "x-user"}}]}"#;
    let config = parse_config(json).unwrap();
    let counters = (0..Counter::ALL.len()).map(Some).collect();
    let reports = Reports::new(None, &config);
    let common = Arc::new(Common::new(config, counters, reports, None));
    let (mut f, envoy) = request(&common, "unary-exchange");
    assert_eq!(on_request_headers(&mut f), (true, None));
    assert_eq!(envoy.counter(Counter::ExchangeUnary), 1);
    let call = envoy.record().callouts[0].clone();
    assert_eq!(call.cluster, "sluice_grpc");
    assert!(call.headers.contains(&(
        ":path".to_owned(),
        sluice_core::exchange::CALL_PATH.to_owned()
    )));
    assert_eq!(call.body.first(), Some(&0), "one uncompressed gRPC frame");
    let unavailable = CalloutAnswer {
        completed: true,
        headers: vec![
            (b":status".to_vec(), b"200".to_vec()),
            (b"grpc-status".to_vec(), b"14".to_vec()),
        ],
        body: Vec::new(),
    };
    let after = on_callout_done(&mut f, call.id, unavailable);
    assert!(matches!(after, Some(After::Reply(503, _, _))), "{after:?}");
    assert_eq!(envoy.counter(Counter::FailuresDeny), 1);
}
