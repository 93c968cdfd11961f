//! Cost routes against the fake host, at fixed times: the reservation is the throttle's
//! quantity (never leased), and the actual cost read from a response header or trailer is
//! committed on the worker's tick with the reservation's id and time; missing costs and requests
//! that end unsettled keep the reservation, counted.

use std::rc::Rc;

use sluice_core::wire::{CommitRequest, ThrottleRequest};

use super::*;
use crate::cost::COMMIT_PATH;
use crate::fake_host::FakeHost;
use crate::report::Worker;

use super::test_support::{MS, T0};

fn config(protocol: &str, actual: &str) -> Rc<Config> {
    let json = format!(
        r#"{{"backend": {{"cluster": "sluice", "protocol": "{protocol}"}},
        "report": {{"enabled": false}},
        "routes": [
          {{"action": "tokens", "match": {{"path": "/chat"}},
            "key": {{"source": "header", "name": "x-tenant"}},
            "cost": {{"reserve": {{"header": "x-max-tokens", "default": 256, "max": 1000}},
                      "actual": {actual}}}}},
          {{"action": "rows", "match": {{"path": "/query"}}, "key": {{"source": "constant", "value": "all"}},
            "cost": {{"reserve": {{"constant": 1}}, "actual": {{"header": "x-rows"}}}}}}]}}"#
    );
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

fn header_config() -> Rc<Config> {
    config("grpc_stream", r#"{"header": "x-usage-total-tokens"}"#)
}

fn answer(allowed: bool) -> Vec<u8> {
    format!(
        r#"{{"allowed": {allowed}, "algorithm": "token_bucket", "mode": "enforce", "capacity": 10000,
        "remaining": 9000, "retry_after_ms": {}, "reset_after_ms": 6000, "level": 1000.0}}"#,
        if allowed { "null" } else { "2000" }
    )
    .into_bytes()
}

fn request(path: &str, max_tokens: Option<&[u8]>) -> FakeHost {
    let mut host = FakeHost::request("POST", path).header("x-tenant", b"acme");
    if let Some(m) = max_tokens {
        host = host.header("x-max-tokens", m);
    }
    host.now = T0;
    host
}

/// Runs one request to an allowed answer 7 ms later; the flow, its worker and the host.
fn admitted(cfg: &Rc<Config>, mut host: FakeHost) -> (Flow, Rc<Worker>, FakeHost) {
    let worker = Rc::new(Worker::new(cfg));
    let mut flow = Flow::with_worker(Rc::clone(cfg), Rc::clone(&worker));
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    host.now = T0 + 7 * MS;
    let token = host.next_token - 1;
    flow.on_callout_response(&mut host, token, Some(b"200"), &answer(true));
    assert_eq!(host.effects.resumed, 1);
    (flow, worker, host)
}

fn throttle(host: &FakeHost) -> ThrottleRequest {
    let call = host.effects.exchanges.first().expect("an exchange");
    assert_eq!(call.path, "/v1/throttle");
    serde_json::from_slice(&call.body).unwrap()
}

fn commits(host: &FakeHost) -> Vec<CommitRequest> {
    host.effects
        .exchanges
        .iter()
        .filter(|c| c.path == COMMIT_PATH)
        .map(|c| serde_json::from_slice(&c.body).unwrap())
        .collect()
}

#[test]
fn the_reservation_is_the_quantity_and_the_header_usage_is_committed_on_the_tick() {
    let cfg = header_config();
    let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", Some(b"800")));
    let sent = throttle(&host);
    assert_eq!(
        (sent.quantity, sent.lease),
        (800, false),
        "no lease for cost"
    );
    let id = host
        .effects
        .request_headers_set
        .iter()
        .find(|(n, _)| n == "x-sluice-cost-id")
        .map(|(_, v)| v.clone())
        .expect("the commit id goes upstream");
    assert!(host
        .effects
        .request_headers_removed
        .contains(&"x-sluice-cost-id".to_owned()));
    assert!(id.starts_with(worker.reporter()), "{id}");

    host.upstream_headers = vec![("x-usage-total-tokens".into(), b"312".to_vec())];
    host.now = T0 + 900 * MS;
    flow.on_response_headers(&mut host);
    assert!(commits(&host).is_empty(), "sent on the tick, from the root");
    worker.tick(&mut host, &cfg);
    let [commit] = commits(&host).try_into().unwrap();
    assert_eq!(
        commit,
        CommitRequest {
            action: "tokens".into(),
            key: "acme".into(),
            reserved: 800,
            actual: 312,
            id,
            // The reservation's answer arrived at T0 + 7 ms.
            reserved_at_ms: T0 / MS + 7,
            timeout_ms: Some(crate::cost::COMMIT_TIMEOUT_MS),
            sent_at_ms: Some(T0 / MS + 900),
        }
    );
    let token = host.next_token - 1;
    worker.on_report_response(&mut host, token, Some(b"200"));
    assert_eq!(host.counter(Counter::CostCommits), 1);
    // Settled: the end of the request counts nothing.
    flow.on_end(&mut host);
    assert_eq!(host.counter(Counter::CostUnsettled), 0);
}

#[test]
fn the_reserve_header_is_capped_and_a_missing_or_bad_one_takes_the_default() {
    let cfg = header_config();
    for (value, want) in [
        (Some(&b"5000"[..]), 1000),
        (Some(b" 42 "), 42),
        (None, 256),
        (Some(b"-1"), 256),
        (Some(b"1e3"), 256),
        (Some(b""), 256),
        // A number past any cap asks for the most: capped, not the (smaller) default.
        (Some(b"99999999999999999999"), 1000),
        // No `min` written: 0 is raised to the floor, one unit (never a free pass).
        (Some(b"0"), 1),
    ] {
        let (_, _, host) = admitted(&cfg, request("/chat", value));
        assert_eq!(throttle(&host).quantity, want, "{value:?}");
    }
    // Repeated: not one number, the default.
    let host = request("/chat", Some(b"10")).header("x-max-tokens", b"20");
    let (_, _, host) = admitted(&cfg, host);
    assert_eq!(throttle(&host).quantity, 256);
}

#[test]
fn a_reserve_min_raises_a_small_or_zero_header_and_nothing_else() {
    let cfg = Rc::new(
        Config::from_json(
            br#"{"backend": {"cluster": "sluice"}, "report": {"enabled": false},
            "routes": [{"action": "tokens", "match": {"path": "/chat"},
              "key": {"source": "header", "name": "x-tenant"},
              "cost": {"reserve": {"header": "x-max-tokens", "default": 256, "min": 100, "max": 1000},
                       "actual": {"header": "x-usage-total-tokens"}}}]}"#,
        )
        .unwrap(),
    );
    for (value, want) in [
        (Some(&b"0"[..]), 100),
        (Some(b"1"), 100),
        (Some(b"100"), 100),
        (Some(b"101"), 101),
        (Some(b"5000"), 1000),
        (None, 256),
        (Some(b""), 256),
        (Some(b"-5"), 256),
    ] {
        let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", value));
        assert_eq!(throttle(&host).quantity, want, "{value:?}");
        // The commit carries the raised reservation, so the backend refunds against it.
        host.upstream_headers = vec![("x-usage-total-tokens".into(), b"40".to_vec())];
        flow.on_response_headers(&mut host);
        worker.tick(&mut host, &cfg);
        let [commit] = commits(&host).try_into().unwrap();
        assert_eq!((commit.reserved, commit.actual), (want, 40), "{value:?}");
    }
    let host = request("/chat", Some(b"0")).header("x-max-tokens", b"0");
    let (_, _, host) = admitted(&cfg, host);
    assert_eq!(throttle(&host).quantity, 256, "repeated: the default");
}

#[test]
fn the_throttle_request_reserves_under_the_commit_id_and_other_routes_send_none() {
    let cfg = header_config();
    let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", Some(b"800")));
    let reserved_as = throttle(&host)
        .reservation_id
        .expect("a reservation id goes out");
    assert!(reserved_as.starts_with(worker.reporter()), "{reserved_as}");
    let upstream = host
        .effects
        .request_headers_set
        .iter()
        .find(|(n, _)| n == "x-sluice-cost-id")
        .map(|(_, v)| v.clone());
    assert_eq!(upstream.as_deref(), Some(reserved_as.as_str()));
    host.upstream_headers = vec![("x-usage-total-tokens".into(), b"900".to_vec())];
    flow.on_response_headers(&mut host);
    worker.tick(&mut host, &cfg);
    let [commit] = commits(&host).try_into().unwrap();
    assert_eq!(
        commit.id, reserved_as,
        "the commit settles what was reserved"
    );
    // The next request reserves under a fresh id.
    let (_, _, next) = admitted(&cfg, request("/chat", Some(b"10")));
    let again = throttle(&next).reservation_id.expect("an id");
    assert_ne!(again, reserved_as);
    // A route without cost sends none: flow/tests.rs's first callout is `reservation_id: None`.
}

#[test]
fn a_denied_reservation_holds_nothing_and_commits_nothing() {
    let cfg = header_config();
    let worker = Rc::new(Worker::new(&cfg));
    let mut flow = Flow::with_worker(Rc::clone(&cfg), Rc::clone(&worker));
    let mut host = request("/chat", Some(b"800"));
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    let token = host.next_token - 1;
    flow.on_callout_response(&mut host, token, Some(b"200"), &answer(false));
    assert_eq!(host.effects.replies[0].0, 429);
    flow.on_end(&mut host);
    worker.tick(&mut host, &cfg);
    assert!(commits(&host).is_empty());
    assert_eq!(host.counter(Counter::CostUnsettled), 0);
    // The denial is cached for this reservation (800), not for a smaller one.
    let mut again = host
        .next_request("POST", "/chat")
        .header("x-tenant", b"acme");
    again.headers.push(("x-max-tokens".into(), b"800".to_vec()));
    let mut flow = Flow::with_worker(Rc::clone(&cfg), Rc::clone(&worker));
    assert_eq!(flow.on_request_headers(&mut again), Next::Pause);
    assert_eq!(again.counter(Counter::CachedDenials), 1);
    let mut smaller = host
        .next_request("POST", "/chat")
        .header("x-tenant", b"acme");
    smaller
        .headers
        .push(("x-max-tokens".into(), b"10".to_vec()));
    let mut flow = Flow::with_worker(Rc::clone(&cfg), Rc::clone(&worker));
    assert_eq!(flow.on_request_headers(&mut smaller), Next::Pause);
    assert_eq!(smaller.effects.exchanges.len(), 1, "asked the backend");
}

#[test]
fn a_missing_or_bad_actual_cost_keeps_the_reservation_and_is_counted() {
    let cfg = header_config();
    for usage in [None, Some(&b"lots"[..]), Some(b"-5")] {
        let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", None));
        if let Some(u) = usage {
            host.upstream_headers = vec![("x-usage-total-tokens".into(), u.to_vec())];
        }
        flow.on_response_headers(&mut host);
        flow.on_end(&mut host);
        worker.tick(&mut host, &cfg);
        assert!(commits(&host).is_empty(), "{usage:?}");
        assert_eq!(host.counter(Counter::CostActualMissing), 1);
        assert_eq!(host.counter(Counter::CostUnsettled), 0);
    }
}

#[test]
fn a_trailer_is_read_at_the_trailers_and_an_end_without_one_is_unsettled() {
    let cfg = config("grpc_stream", r#"{"trailer": "x-usage-total-tokens"}"#);
    let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", Some(b"500")));
    // The header of the same name is not the trailer.
    host.upstream_headers = vec![("x-usage-total-tokens".into(), b"1".to_vec())];
    flow.on_response_headers(&mut host);
    host.upstream_trailers = vec![("x-usage-total-tokens".into(), b"640".to_vec())];
    flow.on_response_trailers(&mut host);
    worker.tick(&mut host, &cfg);
    let [commit] = commits(&host).try_into().unwrap();
    assert_eq!((commit.reserved, commit.actual), (500, 640));

    // A reset (no trailers): the context goes away with the reservation unsettled.
    let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", Some(b"500")));
    flow.on_response_headers(&mut host);
    flow.on_end(&mut host);
    worker.tick(&mut host, &cfg);
    assert!(commits(&host).is_empty());
    assert_eq!(host.counter(Counter::CostUnsettled), 1);
}

#[test]
fn a_failed_commit_is_sent_again_with_the_same_id_then_given_up() {
    let cfg = header_config();
    let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", Some(b"500")));
    host.upstream_headers = vec![("x-usage-total-tokens".into(), b"100".to_vec())];
    flow.on_response_headers(&mut host);
    let mut ids = Vec::new();
    for attempt in 1..=crate::cost::COMMIT_ATTEMPTS {
        worker.tick(&mut host, &cfg);
        let sent = commits(&host);
        assert_eq!(sent.len() as u32, attempt);
        ids.push(sent[sent.len() - 1].id.clone());
        let token = host.next_token - 1;
        worker.on_report_response(&mut host, token, Some(b"503"));
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "one id for every attempt");
    assert_eq!(
        host.counter(Counter::CostCommitRetries),
        u64::from(crate::cost::COMMIT_ATTEMPTS - 1)
    );
    assert_eq!(host.counter(Counter::CostCommitsFailed), 1);
    worker.tick(&mut host, &cfg);
    assert_eq!(
        commits(&host).len() as u32,
        crate::cost::COMMIT_ATTEMPTS,
        "given up"
    );
    assert_eq!(host.effects.warnings.borrow().len(), 1);

    // A 4xx is not sent again; a timeout (no status) is.
    let (mut flow, worker, mut host) = admitted(&cfg, request("/chat", Some(b"500")));
    host.upstream_headers = vec![("x-usage-total-tokens".into(), b"100".to_vec())];
    flow.on_response_headers(&mut host);
    worker.tick(&mut host, &cfg);
    let token = host.next_token - 1;
    worker.on_report_response(&mut host, token, None);
    worker.tick(&mut host, &cfg);
    let token = host.next_token - 1;
    worker.on_report_response(&mut host, token, Some(b"404"));
    worker.tick(&mut host, &cfg);
    assert_eq!(commits(&host).len(), 2);
    assert_eq!(host.counter(Counter::CostCommitsFailed), 1);
}

#[test]
fn check_then_debit_reserves_one_unit_and_commits_everything() {
    let cfg = config("http", r#"{"header": "x-usage-total-tokens"}"#);
    let (mut flow, worker, mut host) = admitted(&cfg, request("/query", None));
    let call = &host.effects.callouts[0];
    let sent: ThrottleRequest = serde_json::from_slice(&call.body).unwrap();
    assert_eq!((sent.quantity, sent.key.as_str()), (1, "all"));
    host.upstream_headers = vec![("x-rows".into(), b"70".to_vec())];
    flow.on_response_headers(&mut host);
    worker.tick(&mut host, &cfg);
    let commit = host.effects.callouts.last().unwrap();
    assert_eq!(commit.cluster, "sluice");
    assert!(commit.headers.contains(&(":path", COMMIT_PATH.to_owned())));
    let body: CommitRequest = serde_json::from_slice(&commit.body).unwrap();
    assert_eq!(
        (body.reserved, body.actual, body.action.as_str()),
        (1, 70, "rows")
    );
}
