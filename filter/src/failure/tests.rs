//! The classification of every failed decision, and the rate-limited log, at fixed times.

use std::rc::Rc;

use super::log::{FailureLog, LOG_EVERY_NS};
use super::mode::When;
use super::*;
use crate::exchange::unary_reply;
use crate::fake_host::FakeHost;
use crate::flow::{Flow, Next};
use crate::report::Worker;

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000 * MS;

fn config(protocol: &str, mode: &str) -> Config {
    let json = format!(
        r#"{{"backend": {{"cluster": "sluice_backend", "protocol": "{protocol}", "timeout_ms": 40}},
        "failure_mode": "{mode}",
        "routes": [{{"action": "reply", "key": {{"source": "header", "name": "x-user"}}}}]}}"#
    );
    Config::from_json(json.as_bytes()).unwrap()
}

fn http(protocol: Protocol, status: u16, body: &str) -> Failure {
    Failure::of_http(protocol, Some(status), body.as_bytes())
}

#[test]
fn every_answer_is_exactly_one_reason_and_keeps_its_header() {
    use Protocol::{Grpc, GrpcStream, Http};
    use Reason::*;
    let wrong_listener = r#"{"error": "wrong_listener", "message": "this is the HTTP decision listener; gRPC is served on 127.0.0.1:8082 (--grpc-listen)"}"#;
    let cases: Vec<(Failure, Reason, &str)> = vec![
        (Failure::not_started("BadArgument"), ClusterMissing, "dispatch"),
        (Failure::of_grpc(GrpcStream, 14, None), Unreachable, "unavailable"),
        (Failure::of_grpc(Grpc, 14, None), Unreachable, "grpc_14"),
        (Failure::of_grpc(GrpcStream, 12, Some("wrong listener")), WrongProtocol, "unavailable"),
        (Failure::of_grpc(Grpc, 12, None), WrongProtocol, "grpc_12"),
        (Failure::of_grpc(GrpcStream, 4, None), Timeout, "timeout"),
        (Failure::of_grpc(Grpc, 4, None), Timeout, "grpc_4"),
        (Failure::of_grpc(Grpc, 13, None), BackendError, "grpc_13"),
        (Failure::timed_out(), Timeout, "timeout"),
        (http(Http, 503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure"), Unreachable, "unavailable"),
        (http(Http, 503, "upstream connect error or disconnect/reset before headers. reset reason: protocol error"), WrongProtocol, "unavailable"),
        (http(Http, 503, r#"{"error": "store_unavailable", "message": "redis down"}"#), BackendError, "unavailable"),
        (http(GrpcStream, 503, r#"{"error": "deadline_exceeded", "message": "no time left"}"#), BackendError, "unavailable"),
        (http(Http, 504, ""), Timeout, "timeout"),
        (http(Http, 421, wrong_listener), WrongProtocol, "status_421"),
        (http(Http, 200, "<html>hello</html>"), WrongProtocol, "bad_response"),
        (http(Http, 200, "\0\0\0\0\x05\x08\x01"), WrongProtocol, "bad_response"),
        (http(Http, 404, "not found"), WrongProtocol, "status_404"),
        (http(GrpcStream, 200, "{\"allowed\": 3}"), BadResponse, "bad_response"),
        (http(GrpcStream, 418, "teapot"), BadResponse, "status_418"),
        (http(Http, 500, r#"{"error": "store_script_error", "message": "x"}"#), BackendError, "status_500"),
        (Failure::of_http(Http, None, b""), BadResponse, "bad_response"),
        (Failure::bad_response("garbage"), BadResponse, "bad_response"),
    ];
    for (failure, reason, header) in cases {
        assert_eq!(
            (failure.reason, failure.header.as_str()),
            (reason, header),
            "{failure:?}"
        );
    }
    // What was seen names the code, the grpc-message or the body.
    let e = http(
        GrpcStream,
        503,
        r#"{"error": "deadline_exceeded", "message": "no time left"}"#,
    );
    assert!(
        e.seen.contains("deadline_exceeded") && e.seen.contains("no time left"),
        "{e:?}"
    );
    let w = http(Http, 421, wrong_listener);
    assert!(w.seen.contains("127.0.0.1:8082"), "{w:?}");
    let g = Failure::of_grpc(GrpcStream, 12, Some("wrong listener: use 127.0.0.1:9"));
    assert!(
        g.seen.contains("UNIMPLEMENTED") && g.seen.contains("127.0.0.1:9"),
        "{g:?}"
    );
}

#[test]
fn a_unary_reply_that_does_not_decode_is_a_bad_response_not_a_502() {
    let failure = unary_reply(0, None, b"\xff\xff\xff").unwrap_err();
    assert_eq!(
        (failure.reason, failure.header.as_str()),
        (Reason::BadResponse, "bad_response")
    );
    let failure = unary_reply(12, Some("wrong listener"), b"").unwrap_err();
    assert_eq!(failure.reason, Reason::WrongProtocol);
    let ok = prost::Message::encode_to_vec(&sluice_core::exchange::ExchangeReply {
        id: 0,
        status: 200,
        body: b"{}".to_vec(),
    });
    assert_eq!(unary_reply(0, None, &ok), Ok((200, b"{}".to_vec())));
}

#[test]
fn snippets_are_bounded_one_line_and_printable() {
    let s = snippet(b"a\nb\"c\\d\xff\x00");
    assert_eq!(s, "\"a.b'c.d..\"");
    let long = snippet(&[b'x'; 1000]);
    assert_eq!(long.len(), MAX_SNIPPET + 5);
    assert!(long.ends_with("...\""));
}

#[test]
fn the_fix_names_the_cluster_and_what_to_change() {
    let stream = config("grpc_stream", "allow");
    let wrong = Failure::of_grpc(Protocol::GrpcStream, 12, None).fix(&stream);
    assert!(
        wrong.contains("\"sluice_backend\"") && wrong.contains("--grpc-listen"),
        "{wrong}"
    );
    assert!(
        wrong.contains("http2_protocol_options") && wrong.contains("\"http\""),
        "{wrong}"
    );
    let http_cfg = config("http", "allow");
    let wrong = http(Protocol::Http, 200, "nope").fix(&http_cfg);
    assert!(wrong.contains("--decision-listen"), "{wrong}");
    let missing = Failure::not_started("BadArgument").fix(&stream);
    assert!(
        missing.contains("define cluster \"sluice_backend\""),
        "{missing}"
    );
    let timeout = Failure::timed_out().fix(&stream);
    assert!(timeout.contains("40 ms"), "{timeout}");
}

#[test]
fn one_line_per_reason_per_ten_seconds_with_the_counts_since_the_last() {
    let cfg = config("grpc_stream", "allow");
    let mut log = FailureLog::default();
    let wrong = Failure::of_grpc(Protocol::GrpcStream, 12, Some("wrong listener"));
    let timeout = Failure::timed_out();
    // The first failure of a reason is logged at once.
    let first = log.request(&wrong, T0, &cfg).unwrap();
    assert!(first.starts_with("sluice: wrong_protocol: 1 request passed unchecked (failure_mode allow); cluster \"sluice_backend\", protocol grpc_stream: gRPC status 12 UNIMPLEMENTED"), "{first}");
    assert!(
        first.contains("likely fix: point cluster \"sluice_backend\""),
        "{first}"
    );
    // Another reason has its own slot.
    assert!(log
        .request(&timeout, T0 + MS, &cfg)
        .unwrap()
        .starts_with("sluice: timeout: 1 request"));
    // 99 more within the 10 s: silent.
    for i in 1..100 {
        assert_eq!(log.request(&wrong, T0 + i * 10 * MS, &cfg), None);
    }
    assert!(log.due(T0 + LOG_EVERY_NS - 1, &cfg).is_empty());
    // At 10 s the tick says how many since the last line.
    let due = log.due(T0 + LOG_EVERY_NS, &cfg);
    assert_eq!(due.len(), 1, "{due:?}");
    assert!(due[0].starts_with("sluice: wrong_protocol: 99 requests passed unchecked (failure_mode allow) in the 10.0 s since the last wrong_protocol line"), "{}", due[0]);
    // Nothing since: nothing to say.
    assert!(log.due(T0 + 3 * LOG_EVERY_NS, &cfg).is_empty());
    // The next failure after the window logs at once, with its own count.
    let next = log.request(&wrong, T0 + 3 * LOG_EVERY_NS, &cfg).unwrap();
    assert!(
        next.contains(": 1 request passed unchecked") && next.contains("in the 20.0 s since"),
        "{next}"
    );
}

#[test]
fn denials_and_stream_failures_are_said_as_such() {
    let cfg = config("grpc_stream", "deny");
    let mut log = FailureLog::default();
    let refused = Failure::not_started("BadArgument");
    let line = log.stream(&refused, T0, &cfg).unwrap();
    assert!(line.starts_with("sluice: cluster_missing: 0 requests denied with 503 (failure_mode deny), the exchange stream failed 1 time;"), "{line}");
    assert_eq!(log.request(&refused, T0 + MS, &cfg), None);
    assert_eq!(log.stream(&refused, T0 + 2 * MS, &cfg), None);
    let due = log.due(T0 + LOG_EVERY_NS, &cfg);
    assert!(
        due[0].contains(
            "1 request denied with 503 (failure_mode deny), the exchange stream failed 1 time"
        ),
        "{due:?}"
    );
}

#[test]
fn a_failed_decision_through_the_flow_is_counted_by_reason_and_logged_once_per_window() {
    let cfg = Rc::new(config("grpc_stream", "allow"));
    let worker = Rc::new(Worker::new(&cfg));
    let mut warnings = Vec::new();
    let mut stats = std::collections::HashMap::new();
    for i in 0..5u64 {
        let mut host = FakeHost::request("GET", "/x").header("x-user", b"ann");
        host.now = T0 + i * MS;
        host.exchange_failure = Some(Failure::of_grpc(Protocol::GrpcStream, 14, None));
        let mut flow = Flow::with_worker(Rc::clone(&cfg), Rc::clone(&worker));
        assert_eq!(
            flow.on_request_headers(&mut host),
            Next::Continue,
            "passed at once"
        );
        assert_eq!(
            host.effects.request_headers_set,
            [("x-sluice-failure".to_owned(), "unavailable".to_owned())]
        );
        warnings.extend(host.effects.warnings.borrow().iter().cloned());
        for (c, n) in host.counters {
            *stats.entry(c).or_insert(0) += n;
        }
    }
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("sluice: unreachable: 1 request passed unchecked"),
        "{warnings:?}"
    );
    assert_eq!(stats.get(&Counter::FailuresUnreachable), Some(&5));
    assert_eq!(stats.get(&Counter::FailuresAllow), Some(&5));
    // The worker's tick says the other four once their window is over.
    let mut root = FakeHost::request("GET", "/");
    root.now = T0 + LOG_EVERY_NS;
    worker.tick(&mut root, &cfg);
    let lines = root.effects.warnings.borrow();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("sluice: unreachable: 4 requests passed unchecked")),
        "{lines:?}"
    );
}

#[test]
fn a_waiting_request_failed_by_a_closed_stream_gets_the_close_reason() {
    let cfg = Rc::new(config("grpc_stream", "deny"));
    let mut host = FakeHost::request("GET", "/x").header("x-user", b"ann");
    host.now = T0;
    let mut flow = Flow::new(cfg);
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    let token = host.next_token - 1;
    let closed = Failure::of_grpc(Protocol::GrpcStream, 12, Some("wrong listener"));
    flow.on_failure(&mut host, token, closed);
    assert_eq!(host.effects.replies.len(), 1);
    assert_eq!(host.effects.replies[0].0, 503);
    assert_eq!(host.counter(Counter::FailuresWrongProtocol), 1);
    assert_eq!(host.counter(Counter::FailuresDeny), 1);
    let warnings = host.effects.warnings.borrow();
    assert!(
        warnings[0].starts_with("sluice: wrong_protocol: 1 request denied with 503"),
        "{warnings:?}"
    );
}

#[test]
fn an_internal_failure_under_deny_answers_failure_status_and_never_continues() {
    let config = config("grpc_stream", "deny");
    let failure = Failure::internal("on_request_headers");
    assert_eq!(failure.reason, Reason::Internal);
    assert_eq!(failure.header, "internal");
    for when in [When::InRequestHeaders, When::Later] {
        let mut host = FakeHost::request("GET", "/x");
        let next = mode::apply(&config, &mut host, "", &failure, when);
        assert_eq!(next, Next::Pause, "deny stops the request ({when:?})");
        assert_eq!(host.effects.resumed, 0);
        let reply = &host.effects.replies[0];
        assert_eq!(reply.0, config.failure_status);
        assert!(reply
            .1
            .iter()
            .any(|(n, v)| n == "x-sluice-failure" && v == "internal"));
        assert_eq!(host.counter(Counter::FailuresDeny), 1);
    }
}

#[test]
fn an_internal_failure_under_allow_passes_marked_and_counted() {
    let config = config("grpc_stream", "allow");
    let failure = Failure::internal("http_callout_done");
    let mut host = FakeHost::request("GET", "/x");
    assert_eq!(
        mode::apply(&config, &mut host, "", &failure, When::InRequestHeaders),
        Next::Continue
    );
    let mut later = FakeHost::request("GET", "/x");
    assert_eq!(
        mode::apply(&config, &mut later, "", &failure, When::Later),
        Next::Pause
    );
    assert_eq!(later.effects.resumed, 1, "resumed after a callout");
    for h in [&host, &later] {
        assert!(h.effects.replies.is_empty());
        assert_eq!(
            h.effects.request_headers_set,
            vec![("x-sluice-failure".to_owned(), "internal".to_owned())]
        );
        assert_eq!(h.counter(Counter::FailuresAllow), 1);
    }
    assert!(failure.fix(&config).contains("a bug"));
}

#[test]
fn a_grpc_status_read_from_headers() {
    assert_eq!(grpc::parse_status(b"12"), grpc::UNIMPLEMENTED);
    assert_eq!(grpc::parse_status(b" 0 "), grpc::OK);
    assert_eq!(grpc::parse_status(b"twelve"), grpc::UNKNOWN);
    assert_eq!(grpc::parse_status(b"\xff"), grpc::UNKNOWN);
    let timed_out = grpc::of_http_status(Some(b"504"));
    assert_eq!(
        timed_out,
        (grpc::DEADLINE_EXCEEDED, "HTTP 504 from Envoy".to_owned())
    );
    let no_upstream = grpc::of_http_status(Some(b"503"));
    assert_eq!(
        no_upstream,
        (grpc::UNAVAILABLE, "HTTP status 503".to_owned())
    );
    let none = grpc::of_http_status(None);
    assert_eq!(none, (grpc::UNAVAILABLE, "HTTP status none".to_owned()));
}
