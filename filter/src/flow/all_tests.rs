//! A route with all-or-nothing checks: one callout to `POST /v1/throttle/all` carrying them all, every
//! policy in the draft-10 headers, the most restrictive in `X-RateLimit-*` and `Retry-After`, a
//! denial's problem+json naming the check that denied; no lease, no denial cache.

use std::rc::Rc;

use super::*;
use crate::fake_host::FakeHost;

use super::test_support::T0;

fn config() -> Rc<Config> {
    let json = r#"{"backend": {"protocol": "http", "cluster": "sluice_backend", "authority": "sluice"},
        "routes": [{"match": {"path_prefix": "/api/"}, "checks": [
            {"action": "reply", "key": {"source": "header", "name": "x-user"}},
            {"action": "reply_ip", "key": {"source": "client_ip"}},
            {"action": "reply_all", "key": {"source": "constant", "value": "all"}, "quantity": 2}
        ]}]}"#;
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

fn request() -> FakeHost {
    let mut h = FakeHost::request("POST", "/api/reply")
        .header("x-user", b"alice")
        .peer("10.0.0.7:5555");
    h.now = T0;
    h
}

fn result(allowed: bool, capacity: u64, remaining: u64, retry: Option<u64>) -> serde_json::Value {
    serde_json::json!({"allowed": allowed, "algorithm": "fixed_window", "mode": "enforce",
        "capacity": capacity, "remaining": remaining, "retry_after_ms": retry,
        "reset_after_ms": 30_000, "level": 1.0, "window_ms": 60_000, "would_deny": false})
}

fn answer(flow: &mut Flow, host: &mut FakeHost, body: serde_json::Value) {
    assert_eq!(flow.on_request_headers(host), Next::Pause);
    let token = host.next_token - 1;
    let body = serde_json::to_vec(&body).unwrap();
    flow.on_callout_response(host, token, Some(b"200"), &body);
    flow.on_response_headers(host);
}

#[test]
fn one_callout_carries_every_check_with_its_own_key_and_quantity() {
    let mut h = request();
    let mut flow = Flow::new(config());
    assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
    assert_eq!(h.effects.callouts.len(), 1);
    let call = &h.effects.callouts[0];
    assert!(call.headers.contains(&(":path", "/v1/throttle/all".into())));
    let req: ThrottleAllRequest = serde_json::from_slice(&call.body).unwrap();
    let got: Vec<(String, String, u64)> = req
        .checks
        .into_iter()
        .map(|c| (c.action, c.key, c.quantity))
        .collect();
    assert_eq!(
        got,
        vec![
            ("reply".into(), "alice".into(), 1),
            ("reply_ip".into(), "10.0.0.7".into(), 1),
            ("reply_all".into(), "all".into(), 2),
        ]
    );
}

#[test]
fn allowed_lists_every_policy_and_the_tightest_in_x_headers() {
    let mut h = request();
    let mut flow = Flow::new(config());
    answer(
        &mut flow,
        &mut h,
        serde_json::json!({"allowed": true, "results": [
            result(true, 5, 4, None), result(true, 100, 99, None), result(true, 2000, 1998, None)]}),
    );
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(h.counter(Counter::Allowed), 1);
    assert_eq!(
        h.response_header("ratelimit-policy").as_deref(),
        Some("\"reply\";q=5;w=60, \"reply_ip\";q=100;w=60, \"reply_all\";q=2000;w=60")
    );
    assert_eq!(
        h.response_header("ratelimit").as_deref(),
        Some("\"reply\";r=4;t=30, \"reply_ip\";r=99;t=30, \"reply_all\";r=1998;t=30")
    );
    assert_eq!(
        h.response_header("x-ratelimit-remaining").as_deref(),
        Some("4")
    );
    assert_eq!(h.response_header("retry-after"), None);
}

#[test]
fn denied_names_the_limit_that_denied_and_is_not_cached() {
    let denied = serde_json::json!({"allowed": false,
        "denied": {"index": 2, "action": "reply_all"},
        "results": [result(true, 5, 4, None), result(true, 100, 99, None),
                    result(false, 2000, 0, Some(1500))]});
    let mut h = request();
    let mut flow = Flow::new(config());
    answer(&mut flow, &mut h, denied.clone());
    assert_eq!(h.effects.replies.len(), 1);
    let reply = &h.effects.replies[0];
    assert_eq!(reply.0, 429);
    let body: serde_json::Value = serde_json::from_slice(&reply.2).unwrap();
    assert_eq!(body["action"], "reply_all", "{body}");
    assert_eq!(h.reply_header("retry-after").as_deref(), Some("2"));
    assert_eq!(
        h.reply_header("x-ratelimit-limit").as_deref(),
        Some("2000, 2000;w=60")
    );
    assert_eq!(
        h.reply_header("x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert!(h
        .reply_header("ratelimit-policy")
        .is_some_and(|p| p.starts_with("\"reply\";q=5;w=60, ")));
    assert_eq!(h.counter(Counter::Denied), 1);
    // Not cached: the next request calls out again.
    let mut next = h.next_request("POST", "/api/reply");
    let mut flow = Flow::new(config());
    assert_eq!(flow.on_request_headers(&mut next), Next::Pause);
    assert_eq!(next.effects.callouts.len(), 1);
    assert_eq!(next.counter(Counter::CachedDenials), 0);
}

#[test]
fn a_wrong_count_of_results_or_a_bad_index_is_a_failure_not_a_pass() {
    for body in [
        serde_json::json!({"allowed": true, "results": [result(true, 5, 4, None)]}),
        serde_json::json!({"allowed": false, "denied": {"index": 7, "action": "x"},
            "results": [result(true, 5, 4, None), result(true, 5, 4, None), result(true, 5, 4, None)]}),
    ] {
        let mut h = request();
        let mut flow = Flow::new(config());
        answer(&mut flow, &mut h, body);
        assert_eq!(
            h.response_header("x-sluice-failure").as_deref(),
            Some("bad_response"),
            "{:?}",
            h.effects
        );
    }
}

#[test]
fn checks_are_validated_by_name() {
    let bad = |routes: &str, backend: &str| {
        Config::from_json(
            format!(r#"{{"backend": {{"cluster": "b"{backend}}}, "routes": [{routes}]}}"#)
                .as_bytes(),
        )
        .unwrap_err()
        .field
    };
    let k = r#"{"source": "client_ip"}"#;
    assert_eq!(
        bad(
            &format!(r#"{{"checks": [{{"action": "a", "key": {k}}}]}}"#),
            ""
        ),
        "routes[0].checks"
    );
    assert_eq!(
        bad(
            &format!(
                r#"{{"action": "a", "key": {k}, "checks": [{{"action": "a", "key": {k}}}, {{"action": "b", "key": {k}}}]}}"#
            ),
            ""
        ),
        "routes[0].checks"
    );
    assert_eq!(
        bad(
            &format!(
                r#"{{"checks": [{{"action": "a", "key": {k}}}, {{"action": "b c", "key": {k}}}]}}"#
            ),
            ""
        ),
        "routes[0].checks[1].action"
    );
    assert_eq!(
        bad(
            &format!(
                r#"{{"checks": [{{"action": "a", "key": {k}}}, {{"action": "b", "key": {{"source": "constant", "value": ""}}}}]}}"#
            ),
            ""
        ),
        "routes[0].checks[1].key.value"
    );
    assert_eq!(
        bad(
            &format!(
                r#"{{"checks": [{{"action": "a", "key": {k}, "quantity": 0}}, {{"action": "b", "key": {k}}}]}}"#
            ),
            ""
        ),
        "routes[0].checks[0].quantity"
    );
    assert_eq!(
        bad(
            &format!(
                r#"{{"checks": [{{"action": "a", "key": {k}}}, {{"action": "b", "key": {k}}}]}}"#
            ),
            r#", "protocol": "grpc""#
        ),
        "routes[0].checks"
    );
    assert_eq!(bad(&format!(r#"{{"key": {k}}}"#), ""), "routes[0].action");
    assert_eq!(bad(r#"{"action": "a"}"#, ""), "routes[0].key");
    let nine = vec![format!(r#"{{"action": "a", "key": {k}}}"#); 9].join(",");
    assert_eq!(
        bad(&format!(r#"{{"checks": [{nine}]}}"#), ""),
        "routes[0].checks"
    );
}

#[test]
fn an_unknown_action_is_named_by_the_check_the_backend_names() {
    let json = r#"{"backend": {"protocol": "http", "cluster": "b"}, "unknown_action": "deny",
        "routes": [{"checks": [
            {"action": "reply", "key": {"source": "client_ip"}},
            {"action": "reply_all", "key": {"source": "constant", "value": "all"}}]}]}"#;
    let mut h = request();
    let mut flow = Flow::new(Rc::new(Config::from_json(json.as_bytes()).unwrap()));
    assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
    let body = br#"{"error": "unknown_action", "field": "checks[1].action", "message": "no rule"}"#;
    let token = h.next_token - 1;
    flow.on_callout_response(&mut h, token, Some(b"404"), body);
    let reply = &h.effects.replies[0];
    assert_eq!(reply.0, 403);
    let problem: serde_json::Value = serde_json::from_slice(&reply.2).unwrap();
    assert_eq!(problem["action"], "reply_all", "{problem}");
    assert_eq!(
        unknown_check(br#"{"error": "unknown_action", "field": "checks[x].action"}"#),
        None
    );
    assert_eq!(unknown_check(b"junk"), None);
}
