//! The request flow against a fake host: every path ends in resume or reply, with the right headers,
//! counters and cache effects.

use crate::config::FailureMode;
use std::rc::Rc;

use super::*;
use crate::fake_host::FakeHost;
use sluice_core::wire::FilterReport;

use super::test_support::{ended_once, http_config, MS, T0};

fn config(extra: &str) -> Rc<Config> {
    http_config(
        extra,
        r#"[{"action": "reply", "match": {"path_prefix": "/api/"},
             "key": {"source": "header", "name": "x-user"}}]"#,
    )
}

fn user(name: &str) -> FakeHost {
    let mut h = FakeHost::request("POST", "/api/reply").header("x-user", name.as_bytes());
    h.now = T0;
    h
}

fn decision(allowed: bool, algorithm: &str, retry_ms: Option<u64>, extra: &str) -> Vec<u8> {
    let retry = retry_ms.map_or("null".to_owned(), |r| r.to_string());
    format!(
        r#"{{"allowed": {allowed}, "algorithm": "{algorithm}", "mode": "enforce",
        "remaining": {rem}, "retry_after_ms": {retry}, "reset_after_ms": 60000, "level": 3.0,
        "capacity": 3, "window_ms": 60000 {extra}}}"#,
        rem = if allowed { 2 } else { 0 }
    )
    .into_bytes()
}

/// Alice's request run to its end, its callout answered 200 with `body`: its host.
fn alice_answered(cfg: &Rc<Config>, body: &[u8]) -> FakeHost {
    let mut h = user("alice");
    run(&mut Flow::new(Rc::clone(cfg)), &mut h, Some((b"200", body)));
    h
}

/// The next request of `name` on the VM of `h` (shared data and counters carry over), at `now`.
fn again(h: &FakeHost, name: &[u8], now: u64) -> FakeHost {
    let mut next = h.next_request("POST", "/api/reply").header("x-user", name);
    next.now = now;
    next
}

/// Runs one request through request headers, the callout answer (if any) and response headers.
fn run(flow: &mut Flow, host: &mut FakeHost, answer: Option<(&[u8], &[u8])>) -> Next {
    let next = flow.on_request_headers(host);
    if let (Next::Pause, Some((status, body))) = (next, answer) {
        if let Some(call) = host.effects.callouts.last() {
            let _ = call;
            let token = host.next_token - 1;
            flow.on_callout_response(host, token, Some(status), body);
        }
    }
    flow.on_response_headers(host);
    next
}

#[test]
fn an_unmatched_request_passes_untouched_with_no_callout() {
    let cfg = config("");
    let mut h = FakeHost::request("GET", "/static/x").header("x-user", b"alice");
    let mut flow = Flow::new(cfg);
    assert_eq!(flow.on_request_headers(&mut h), Next::Continue);
    flow.on_response_headers(&mut h);
    assert_eq!(h.effects, Default::default());
}

#[test]
fn the_callout_carries_pseudo_headers_timeout_and_the_request() {
    let mut h = user("alice");
    let mut flow = Flow::new(config(""));
    assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
    let call = &h.effects.callouts[0];
    assert_eq!(call.cluster, "sluice_backend");
    assert_eq!(call.timeout_ms, 30);
    assert!(call.headers.contains(&(":method", "POST".into())));
    assert!(call.headers.contains(&(":path", "/v1/throttle".into())));
    assert!(call.headers.contains(&(":authority", "sluice".into())));
    let req: ThrottleRequest = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(
        req,
        ThrottleRequest {
            action: "reply".into(),
            key: "alice".into(),
            quantity: 1,
            lease: true,
            // backend.timeout_ms of this configuration: the backend's wait is the filter's.
            timeout_ms: Some(30),
            sent_at_ms: Some(h.now_ns() / 1_000_000),
            decision_id: req.decision_id,
            reservation_id: None,
        }
    );
    assert!(
        req.decision_id.is_some(),
        "each decision request carries its id"
    );
    // With leases turned off, the callout does not ask for one.
    let mut h = user("alice");
    Flow::new(config(r#""lease": {"enabled": false},"#)).on_request_headers(&mut h);
    let req: ThrottleRequest = serde_json::from_slice(&h.effects.callouts[0].body).unwrap();
    assert!(!req.lease);
}

#[test]
fn allowed_resumes_and_puts_rate_limit_headers_on_the_response() {
    let mut h = user("alice");
    let mut flow = Flow::new(config(""));
    let next = run(
        &mut flow,
        &mut h,
        Some((b"200", &decision(true, "gcra", None, ""))),
    );
    ended_once(&h, next);
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(h.counter(Counter::Allowed), 1);
    assert_eq!(
        h.response_header("x-ratelimit-remaining").as_deref(),
        Some("2")
    );
    assert_eq!(
        h.response_header("ratelimit-policy").as_deref(),
        Some("\"reply\";q=3;w=60")
    );
    assert_eq!(h.response_header("retry-after"), None);
}

#[test]
fn denied_replies_429_with_headers_and_a_problem_body() {
    let mut h = user("alice");
    let mut flow = Flow::new(config(""));
    let next = run(
        &mut flow,
        &mut h,
        Some((b"200", &decision(false, "gcra", Some(1500), ""))),
    );
    ended_once(&h, next);
    let (status, _, body) = &h.effects.replies[0];
    assert_eq!(*status, 429);
    assert_eq!(h.reply_header("retry-after").as_deref(), Some("2"));
    assert_eq!(
        h.reply_header("content-type").as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        h.reply_header("x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert_eq!(
        h.reply_header("ratelimit").as_deref(),
        Some("\"reply\";r=0;t=60")
    );
    let body: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(body["action"], "reply");
    assert_eq!(h.counter(Counter::Denied), 1);
}

#[test]
fn shadow_would_deny_passes_and_says_so() {
    let mut h = user("alice");
    let mut flow = Flow::new(config(""));
    let body = decision(true, "gcra", None, r#", "would_deny": true"#);
    let next = run(&mut flow, &mut h, Some((b"200", &body)));
    ended_once(&h, next);
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(
        h.response_header("x-sluice-shadow").as_deref(),
        Some("would-deny")
    );
    assert!(h
        .effects
        .request_headers_set
        .contains(&("x-sluice-shadow".into(), "would-deny".into())));
    assert!(
        h.effects
            .request_headers_removed
            .contains(&"x-sluice-shadow".to_string()),
        "client copies dropped"
    );
    assert_eq!(h.counter(Counter::ShadowWouldDeny), 1);
}

#[test]
fn failures_follow_the_failure_mode_with_a_reason_header() {
    let cases: [(&[u8], &[u8], &str); 5] = [
        (b"503", b"upstream connect error", "unavailable"),
        (b"504", b"upstream request timeout", "timeout"),
        (
            b"500",
            br#"{"error": "store_unavailable", "message": "x"}"#,
            "status_500",
        ),
        (b"200", b"{not json", "bad_response"),
        (b"404", b"not found", "status_404"),
    ];
    for (status, body, reason) in cases {
        let mut h = user("alice");
        let mut flow = Flow::new(config(""));
        let next = run(&mut flow, &mut h, Some((status, body)));
        ended_once(&h, next);
        assert_eq!(h.effects.resumed, 1, "{reason}: fail open resumes");
        assert_eq!(
            h.response_header("x-sluice-failure").as_deref(),
            Some(reason)
        );
        assert_eq!(h.counter(Counter::FailuresAllow), 1);

        let mut h = user("alice");
        let mut flow = Flow::new(config(r#""failure_mode": "deny","#));
        let next = run(&mut flow, &mut h, Some((status, body)));
        ended_once(&h, next);
        assert_eq!(
            h.effects.replies[0].0, 503,
            "{reason}: fail closed answers 503 by default"
        );
        assert_eq!(h.reply_header("x-sluice-failure").as_deref(), Some(reason));
        assert_eq!(h.counter(Counter::FailuresDeny), 1);
    }
}

#[test]
fn the_next_report_names_the_requests_this_worker_gave_up_on() {
    let c = config("");
    let worker = Rc::new(Worker::new(&c));
    let ask = |h: &mut FakeHost| {
        let mut flow = Flow::with_worker(Rc::clone(&c), Rc::clone(&worker));
        let next = flow.on_request_headers(h);
        let req: ThrottleRequest =
            serde_json::from_slice(&h.effects.callouts.last().unwrap().body).unwrap();
        (flow, next, req.decision_id.unwrap())
    };
    // Answered in time: not named. Timed out (Envoy's 504), and failed after it was sent: named.
    let mut h = user("alice");
    let (mut flow, _, answered) = ask(&mut h);
    let t = h.next_token - 1;
    flow.on_callout_response(&mut h, t, Some(b"200"), &decision(true, "gcra", None, ""));
    let mut h = user("bob");
    let (mut flow, _, timed_out) = ask(&mut h);
    let t = h.next_token - 1;
    flow.on_callout_response(&mut h, t, Some(b"504"), b"upstream request timeout");
    let mut h = user("carol");
    let (mut flow, _, refused) = ask(&mut h);
    let t = h.next_token - 1;
    flow.on_callout_response(&mut h, t, Some(b"503"), b"");
    assert_ne!(answered, timed_out);
    assert_eq!(timed_out.wrapping_add(1), refused, "one more per request");
    let mut root = user("root");
    worker.tick(&mut root, &c);
    let report: FilterReport =
        serde_json::from_slice(&root.effects.callouts.last().unwrap().body).unwrap();
    report.validate().unwrap();
    assert_eq!(report.gave_up, [timed_out, refused]);
    assert_eq!(report.actions[0].failed_timeout, 1);
    assert_eq!(report.actions[0].passed_unchecked, 2);
    // A copy sent again names the same ids; the next report none of them.
    let token = root.next_token - 1;
    worker.on_report_response(&mut root, token, Some(b"503"));
    worker.tick(&mut root, &c);
    let copy: FilterReport =
        serde_json::from_slice(&root.effects.callouts.last().unwrap().body).unwrap();
    assert_eq!(copy, report);
    let token = root.next_token - 1;
    worker.on_report_response(&mut root, token, Some(b"204"));
    let mut h = user("dave");
    let (mut flow, _, _) = ask(&mut h);
    let t = h.next_token - 1;
    flow.on_callout_response(
        &mut h,
        t,
        Some(b"200"),
        &decision(false, "gcra", Some(5), ""),
    );
    worker.record(0, Event::Leased);
    worker.tick(&mut root, &c);
    let next: FilterReport =
        serde_json::from_slice(&root.effects.callouts.last().unwrap().body).unwrap();
    assert!(next.gave_up.is_empty(), "{next:?}");
}

#[test]
fn ids_given_up_on_go_out_a_report_at_a_time_keeping_both_ends() {
    use crate::report::MAX_GAVE_UP_HELD;
    use sluice_core::limits::MAX_REPORT_GAVE_UP;
    let c = config("");
    let worker = Worker::new(&c);
    let held = MAX_GAVE_UP_HELD as u64;
    // More than a worker holds: the first report's worth and the latest are kept.
    for id in 0..held + 10 {
        worker.gave_up(id);
    }
    worker.record(0, Event::failed("timeout", FailureMode::Allow));
    let mut root = user("root");
    let mut names = Vec::new();
    for _ in 0..MAX_GAVE_UP_HELD / MAX_REPORT_GAVE_UP {
        worker.tick(&mut root, &c);
        let report: FilterReport =
            serde_json::from_slice(&root.effects.callouts.last().unwrap().body).unwrap();
        report.validate().unwrap();
        assert!(report.gave_up.len() <= MAX_REPORT_GAVE_UP);
        names.extend(report.gave_up);
        let token = root.next_token - 1;
        worker.on_report_response(&mut root, token, Some(b"204"));
    }
    // The first report: the oldest (a stall's edge) and the newest (its resume) half each.
    let half = MAX_REPORT_GAVE_UP / 2;
    assert_eq!(names[0], 0);
    assert_eq!(names[half - 1], half as u64 - 1);
    assert_eq!(names[half], held + 10 - half as u64);
    assert_eq!(names[MAX_REPORT_GAVE_UP - 1], held + 9);
    let first: Vec<u64> = (0..MAX_REPORT_GAVE_UP as u64).collect();
    let latest: Vec<u64> = (MAX_REPORT_GAVE_UP as u64 + 10..held + 10).collect();
    names.sort_unstable();
    assert_eq!(names, [first, latest].concat(), "each kept id once");
    let calls = root.effects.callouts.len();
    worker.tick(&mut root, &c);
    assert_eq!(root.effects.callouts.len(), calls, "nothing left to send");
}

#[test]
fn a_callout_that_cannot_start_fails_synchronously() {
    let mut h = user("alice");
    h.dispatch_error = Some("BadArgument".into());
    let mut flow = Flow::new(config(""));
    let next = run(&mut flow, &mut h, None);
    assert_eq!(next, Next::Continue);
    ended_once(&h, next);
    assert_eq!(
        h.response_header("x-sluice-failure").as_deref(),
        Some("dispatch")
    );
    assert!(!h.effects.warnings.borrow().is_empty());

    let mut h = user("alice");
    h.dispatch_error = Some("BadArgument".into());
    let mut flow = Flow::new(config(r#""failure_mode": "deny", "failure_status": 429,"#));
    let next = run(&mut flow, &mut h, None);
    ended_once(&h, next);
    assert_eq!(h.effects.replies[0].0, 429);
}

#[test]
fn unknown_action_follows_its_policy() {
    let body = br#"{"error": "unknown_action", "message": "no rule"}"#;
    let mut h = user("alice");
    let mut flow = Flow::new(config(""));
    let next = run(&mut flow, &mut h, Some((b"404", body)));
    ended_once(&h, next);
    assert_eq!(h.effects.resumed, 1);
    assert_eq!(h.counter(Counter::UnknownAction), 1);

    let mut h = user("alice");
    let mut flow = Flow::new(config(r#""unknown_action": "deny","#));
    let next = run(&mut flow, &mut h, Some((b"404", body)));
    ended_once(&h, next);
    assert_eq!(h.effects.replies[0].0, 403);
}

#[test]
fn a_stray_callout_token_is_ignored() {
    let mut h = user("alice");
    let mut flow = Flow::new(config(""));
    flow.on_request_headers(&mut h);
    flow.on_callout_response(&mut h, 999, Some(b"200"), &decision(true, "gcra", None, ""));
    assert_eq!(h.effects.resumed, 0);
    assert!(h.effects.replies.is_empty());
}

#[test]
fn a_denial_is_answered_from_the_cache_until_it_expires() {
    let cfg = config("");
    let h = alice_answered(&cfg, &decision(false, "gcra", Some(500), ""));
    assert_eq!(h.effects.callouts.len(), 1);

    // 100 ms later: answered locally, no callout, cache header, counter.
    let mut h2 = again(&h, b"alice", T0 + 100 * MS);
    let next = run(&mut Flow::new(Rc::clone(&cfg)), &mut h2, None);
    ended_once(&h2, next);
    assert!(h2.effects.callouts.is_empty());
    assert_eq!(h2.effects.replies[0].0, 429);
    assert_eq!(h2.reply_header("x-sluice-cache").as_deref(), Some("hit"));
    assert_eq!(h2.reply_header("retry-after").as_deref(), Some("1"));
    assert_eq!(h2.counter(Counter::CachedDenials), 1);

    // Another user is not affected.
    let mut h3 = again(&h, b"bob", T0 + 100 * MS);
    assert_eq!(
        Flow::new(Rc::clone(&cfg)).on_request_headers(&mut h3),
        Next::Pause
    );
    assert_eq!(h3.effects.callouts.len(), 1);

    // At sent + 499 ms (retry rounded up to 500 ms, minus 1 ms) the backend is asked again.
    let mut h4 = again(&h, b"alice", T0 + 499 * MS);
    assert_eq!(
        Flow::new(Rc::clone(&cfg)).on_request_headers(&mut h4),
        Next::Pause
    );
    assert_eq!(h4.effects.callouts.len(), 1);
}

#[test]
fn the_cache_is_skipped_when_disabled_or_without_retry_time() {
    let cfg = config(r#""denial_cache": {"enabled": false},"#);
    let h = alice_answered(&cfg, &decision(false, "gcra", Some(5000), ""));
    // Only the lease entry's mark (a grant was asked for), no cached denial.
    assert!(h.shared.keys().all(|k| k.starts_with("sluice.lease.")));

    let cfg = config("");
    let h = alice_answered(&cfg, &decision(false, "gcra", None, ""));
    assert!(
        h.shared.keys().all(|k| k.starts_with("sluice.lease.")),
        "a request that can never pass has no retry time to cache"
    );
}

#[test]
fn max_ttl_bounds_a_long_denial() {
    let cfg = config(r#""denial_cache": {"max_ttl_ms": 200},"#);
    let h = alice_answered(&cfg, &decision(false, "fixed_window", Some(60_000), ""));
    let mut h2 = again(&h, b"alice", T0 + 199 * MS);
    Flow::new(Rc::clone(&cfg)).on_request_headers(&mut h2);
    assert!(h2.effects.callouts.is_empty());
    let mut h3 = again(&h, b"alice", T0 + 200 * MS);
    Flow::new(Rc::clone(&cfg)).on_request_headers(&mut h3);
    assert_eq!(h3.effects.callouts.len(), 1);
}

#[test]
fn header_families_can_be_turned_off() {
    let mut h = user("alice");
    let mut flow = Flow::new(config(r#""headers": {"ietf": false},"#));
    run(
        &mut flow,
        &mut h,
        Some((b"200", &decision(true, "gcra", None, ""))),
    );
    assert_eq!(h.response_header("ratelimit"), None);
    assert!(h.response_header("x-ratelimit-limit").is_some());
}

#[test]
fn a_cached_denial_gives_the_same_wait_as_the_backend() {
    // sliding_log 5/min: the backend says 60 s. The hold is capped at max_ttl_ms (1 s); the
    // cached 429 must still count down to the backend's deadline, not to the end of the hold.
    let cfg = config("");
    let mut h = user("alice");
    let mut flow = Flow::new(Rc::clone(&cfg));
    assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
    h.now = T0 + 2 * MS; // the answer arrives 2 ms after the callout left
    let body = decision(false, "sliding_log", Some(60_000), "");
    let token = h.next_token - 1;
    flow.on_callout_response(&mut h, token, Some(b"200"), &body);
    assert_eq!(h.reply_header("retry-after").as_deref(), Some("60"));

    let mut h2 = again(&h, b"alice", T0 + 102 * MS);
    let next = run(&mut Flow::new(Rc::clone(&cfg)), &mut h2, None);
    ended_once(&h2, next);
    assert_eq!(h2.reply_header("x-sluice-cache").as_deref(), Some("hit"));
    assert_eq!(h2.reply_header("retry-after").as_deref(), Some("60"));
    assert_eq!(h2.reply_header("x-ratelimit-reset").as_deref(), Some("60"));
    assert_eq!(
        h2.reply_header("ratelimit").as_deref(),
        Some("\"reply\";r=0;t=60")
    );
    let (_, _, body) = &h2.effects.replies[0];
    let body: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(
        body["retry_after_ms"],
        60_000 - 100,
        "counted down from the answer"
    );
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("retry after 60 s"));

    // Late in the hold (it ends at sent + max_ttl_ms = T0 + 1000 ms), still the backend's deadline.
    let mut h3 = again(&h, b"alice", T0 + 999 * MS);
    run(&mut Flow::new(Rc::clone(&cfg)), &mut h3, None);
    assert_eq!(h3.reply_header("x-sluice-cache").as_deref(), Some("hit"));
    assert_eq!(h3.reply_header("retry-after").as_deref(), Some("60"));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&h3.effects.replies[0].2).unwrap()
            ["retry_after_ms"],
        60_000 - 997
    );
}

#[test]
fn cached_headers_equal_the_backend_headers_at_the_moment_of_the_answer() {
    // Same numbers, same instant: the cached 429 renders byte for byte what the backend's did.
    for algorithm in [
        "gcra",
        "leaky_bucket",
        "token_bucket",
        "fixed_window",
        "sliding_log",
        "sliding_window",
    ] {
        let cfg = config(r#""denial_cache": {"max_ttl_ms": 5000},"#);
        let mut h = user("alice");
        let body = decision(false, algorithm, Some(4_321), "");
        run(
            &mut Flow::new(Rc::clone(&cfg)),
            &mut h,
            Some((b"200", &body)),
        );
        let (_, backend_headers, backend_body) = h.effects.replies[0].clone();

        let mut h2 = h
            .next_request("POST", "/api/reply")
            .header("x-user", b"alice");
        run(&mut Flow::new(Rc::clone(&cfg)), &mut h2, None);
        let (status, mut cached_headers, cached_body) = h2.effects.replies[0].clone();
        assert_eq!(status, 429, "{algorithm}");
        assert_eq!(
            cached_headers.pop(),
            Some(("x-sluice-cache".into(), "hit".into()))
        );
        // The backend's reset was 60000 ms; the entry counts it down from the same instant.
        assert_eq!(cached_headers, backend_headers, "{algorithm}");
        assert_eq!(cached_body, backend_body, "{algorithm}");
    }
}

#[test]
fn any_key_a_client_sends_fits_the_callout_and_long_ones_go_as_a_digest() {
    let cases: [Vec<u8>; 4] = [
        vec![0xff; 30_000],
        vec![b'"'; 50_000],
        vec![b'\\'; 60_000],
        b"a,".repeat(20_000),
    ];
    for value in cases {
        let mut h = user("");
        h.headers.retain(|(n, _)| n != "x-user");
        h.headers.push(("x-user".into(), value.clone()));
        let mut flow = Flow::new(config(""));
        assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
        let call = &h.effects.callouts[0];
        assert!(call.body.len() < 1024, "{} byte body", call.body.len());
        let req: ThrottleRequest = serde_json::from_slice(&call.body).unwrap();
        assert_eq!(req.key, crate::key::from_bytes(&value));
        assert!(req.key.starts_with("sha256:"), "{}", req.key);
    }
    // Two long keys that differ in their last byte are two buckets.
    let sent_key = |value: &[u8]| {
        let mut h = user("");
        h.headers.retain(|(n, _)| n != "x-user");
        h.headers.push(("x-user".into(), value.to_vec()));
        Flow::new(config("")).on_request_headers(&mut h);
        let call = &h.effects.callouts[0];
        serde_json::from_slice::<ThrottleRequest>(&call.body)
            .unwrap()
            .key
    };
    let mut other = vec![0xff; 30_000];
    other[29_999] = b'x';
    assert_ne!(sent_key(&[0xff; 30_000]), sent_key(&other));
}

#[test]
fn a_long_key_is_answered_from_the_cache_like_any_other() {
    let cfg = config("");
    let long = vec![0xffu8; 30_000];
    let mut h = user("");
    h.headers.retain(|(n, _)| n != "x-user");
    h.headers.push(("x-user".into(), long.clone()));
    run(
        &mut Flow::new(Rc::clone(&cfg)),
        &mut h,
        Some((b"200", &decision(false, "sliding_log", Some(60_000), ""))),
    );
    let mut h2 = h.next_request("POST", "/api/reply").header("x-user", &long);
    h2.now = T0 + 10 * MS;
    run(&mut Flow::new(Rc::clone(&cfg)), &mut h2, None);
    assert!(h2.effects.callouts.is_empty());
    assert_eq!(h2.reply_header("x-sluice-cache").as_deref(), Some("hit"));
}

#[test]
fn odd_keys_never_panic_and_are_sent_encoded() {
    for value in [&b""[..], b"\xff\xfe", &[b'k'; 10 * 1024][..]] {
        let mut h = user("");
        h.headers.retain(|(n, _)| n != "x-user");
        h.headers.push(("x-user".into(), value.to_vec()));
        let mut flow = Flow::new(config(""));
        assert_eq!(flow.on_request_headers(&mut h), Next::Pause);
        let req: ThrottleRequest = serde_json::from_slice(&h.effects.callouts[0].body).unwrap();
        assert!(!req.key.is_empty());
    }
}
