//! The request flow with `protocol: grpc_stream` against the fake host: every callout becomes an
//! exchange carrying exactly the HTTP callout's path and JSON, and its answer (status and body,
//! as the backend's decision routes answer) is read exactly as an HTTP callout's.

use crate::exchange::Outcome;
use std::rc::Rc;

use sluice_core::wire::{FilterReport, ThrottleAllRequest, ThrottleRequest};

use super::*;
use crate::fake_host::FakeHost;

use super::test_support::{MS, T0};

fn config(protocol: &str) -> Rc<Config> {
    let json = format!(
        r#"{{"backend": {{"cluster": "sluice_rls", "protocol": "{protocol}", "timeout_ms": 30}},
        "routes": [
          {{"action": "reply", "match": {{"path_prefix": "/api/"}},
            "key": {{"source": "header", "name": "x-user"}}}},
          {{"match": {{"path_prefix": "/multi/"}},
            "checks": [{{"action": "post", "key": {{"source": "header", "name": "x-user"}}}},
                       {{"action": "global", "key": {{"source": "constant", "value": "all"}}}}]}}]}}"#
    );
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

fn allowed(lease: &str) -> Vec<u8> {
    format!(
        r#"{{"allowed": true, "algorithm": "gcra", "mode": "enforce", "capacity": 100,
        "remaining": 7, "retry_after_ms": null, "reset_after_ms": 6000, "level": 93.0,
        "window_ms": 60000 {lease}}}"#
    )
    .into_bytes()
}

fn request(path: &str, user: &[u8]) -> FakeHost {
    let mut host = FakeHost::request("GET", path).header("x-user", user);
    host.now = T0;
    host
}

#[test]
fn a_decision_goes_as_an_exchange_with_the_http_callouts_path_and_body() {
    let cfg = config("grpc_stream");
    let mut host = request("/api/x", b"ann");
    let mut flow = Flow::new(Rc::clone(&cfg));
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    assert!(host.effects.callouts.is_empty() && host.effects.grpc_calls.is_empty());
    let [call] = host.effects.exchanges.as_slice() else {
        panic!("one exchange: {:?}", host.effects.exchanges);
    };
    assert_eq!(call.path, "/v1/throttle");
    assert_eq!(call.timeout_ms, 30);
    let sent: ThrottleRequest = serde_json::from_slice(&call.body).unwrap();
    assert_eq!((sent.action.as_str(), sent.key.as_str()), ("reply", "ann"));
    assert_eq!(sent.quantity, 1);
    assert_eq!(host.counters.get(&Counter::Callouts), Some(&1));

    let token = host.next_token - 1;
    flow.on_callout_response(&mut host, token, Some(b"200"), &allowed(""));
    flow.on_response_headers(&mut host);
    assert_eq!(host.effects.resumed, 1);
    assert_eq!(
        host.response_header("x-ratelimit-remaining").as_deref(),
        Some("7")
    );
}

#[test]
fn a_timed_out_or_closed_exchange_applies_the_failure_mode() {
    let cfg = config("grpc_stream");
    for (status, reason) in [(&b"504"[..], "timeout"), (&b"503"[..], "unavailable")] {
        let mut host = request("/api/x", b"ann");
        let mut flow = Flow::new(Rc::clone(&cfg));
        flow.on_request_headers(&mut host);
        let token = host.next_token - 1;
        flow.on_callout_response(&mut host, token, Some(status), b"");
        assert_eq!(host.effects.resumed, 1, "failure_mode allow passes");
        assert_eq!(
            host.effects.request_headers_set,
            [(FAILURE_HEADER.to_owned(), reason.to_owned())]
        );
    }
}

#[test]
fn an_exchange_that_cannot_start_applies_the_failure_mode_at_once() {
    let cfg = config("grpc_stream");
    let mut host = request("/api/x", b"ann");
    host.dispatch_error = Some("InternalFailure".into());
    let mut flow = Flow::new(cfg);
    assert_eq!(flow.on_request_headers(&mut host), Next::Continue);
    assert_eq!(host.counters.get(&Counter::FailuresAllow), Some(&1));
    let warnings = host.effects.warnings.borrow();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("cluster_missing") && w.contains("\"sluice_rls\"")),
        "{warnings:?}"
    );
}

#[test]
fn several_checks_go_as_one_exchange_to_the_all_path() {
    let cfg = config("grpc_stream");
    let mut host = request("/multi/x", b"ann");
    let mut flow = Flow::new(cfg);
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    let [call] = host.effects.exchanges.as_slice() else {
        panic!("one exchange");
    };
    assert_eq!(call.path, "/v1/throttle/all");
    let sent: ThrottleAllRequest = serde_json::from_slice(&call.body).unwrap();
    let keys: Vec<(&str, &str)> = sent
        .checks
        .iter()
        .map(|c| (c.action.as_str(), c.key.as_str()))
        .collect();
    assert_eq!(keys, [("post", "ann"), ("global", "all")]);
}

#[test]
fn leases_are_granted_and_spent_over_the_exchange_as_over_http() {
    let cfg = config("grpc_stream");
    let worker = Rc::new(Worker::new(&cfg));
    let mut host = request("/api/x", b"ann");
    let mut flow = Flow::with_worker(Rc::clone(&cfg), Rc::clone(&worker));
    flow.on_request_headers(&mut host);
    let sent: ThrottleRequest = serde_json::from_slice(&host.effects.exchanges[0].body).unwrap();
    assert!(
        sent.lease,
        "the exchange asks for a lease as the HTTP callout does"
    );
    let token = host.next_token - 1;
    let grant = r#", "lease": {"units": 3, "ttl_ms": 1000}"#;
    flow.on_callout_response(&mut host, token, Some(b"200"), &allowed(grant));
    assert_eq!(host.counters.get(&Counter::LeaseGrants), Some(&1));

    let mut next = host.next_request("GET", "/api/x").header("x-user", b"ann");
    next.now = T0 + MS;
    let mut flow = Flow::with_worker(cfg, worker);
    assert_eq!(flow.on_request_headers(&mut next), Next::Continue);
    assert!(next.effects.exchanges.is_empty(), "admitted from the lease");
    assert_eq!(next.counters.get(&Counter::LeaseHits), Some(&1));
}

#[test]
fn reports_go_as_exchanges_unless_a_report_cluster_is_named() {
    let cfg = config("grpc_stream");
    assert!(cfg.report.via_exchange && cfg.report.cluster.is_none());
    let worker = Worker::new(&cfg);
    worker.record(0, crate::report::Event::Leased);
    let mut root = FakeHost::request("GET", "/");
    worker.tick(&mut root, &cfg);
    let [call] = root.effects.exchanges.as_slice() else {
        panic!("one report exchange");
    };
    assert_eq!(call.path, "/v1/report");
    let report: FilterReport = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(report.actions[0].leased, 1);
    let token = root.next_token - 1;
    worker.on_report_response(&mut root, token, Some(b"204"));
    assert_eq!(root.counters.get(&Counter::ReportsSent), Some(&1));

    let json = r#"{"backend": {"cluster": "sluice_rls", "protocol": "grpc_stream"},
        "report": {"cluster": "sluice_decision"},
        "routes": [{"action": "reply", "key": {"source": "path"}}]}"#;
    let named = Config::from_json(json.as_bytes()).unwrap();
    assert!(!named.report.via_exchange);
    assert_eq!(named.report.cluster.as_deref(), Some("sluice_decision"));
    let off = r#"{"backend": {"cluster": "sluice_rls", "protocol": "grpc_stream"},
        "report": {"enabled": false},
        "routes": [{"action": "reply", "key": {"source": "path"}}]}"#;
    let off = Config::from_json(off.as_bytes()).unwrap();
    assert!(!off.report.via_exchange && off.report.cluster.is_none());
}

/// An exchange's outcome handed over as it is (`Flow::on_exchange_answer`): a reply is read as
/// the HTTP callout's answer with its status, a failed call applies the failure mode.
#[test]
fn an_exchange_outcome_is_read_as_the_http_callouts_answer() {
    let answered = |outcome: Outcome| {
        let mut host = request("/api/x", b"ann");
        let mut flow = Flow::new(config("grpc_stream"));
        assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
        let token = host.next_token - 1;
        flow.on_exchange_answer(&mut host, token, outcome);
        host
    };
    let host = answered(Ok((200, allowed(""))));
    assert_eq!(host.effects.resumed, 1);
    assert!(host.effects.replies.is_empty());
    assert_eq!(host.counters.get(&Counter::Allowed), Some(&1));

    let host = answered(Ok((503, b"upstream reset".to_vec())));
    assert_eq!(host.counters.get(&Counter::FailuresUnreachable), Some(&1));
    assert_eq!(host.counters.get(&Counter::FailuresAllow), Some(&1));

    let host = answered(Err(Failure::timed_out()));
    assert_eq!(host.counters.get(&Counter::FailuresTimeout), Some(&1));
    assert_eq!(host.effects.resumed, 1);
}
