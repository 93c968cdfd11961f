//! The request flow with leases and the worker's counts, against the fake host at fixed times:
//! a grant, leased admissions with no callout and truthful headers, expiry, a backend that is
//! down while a lease is live, and what never becomes a lease.

use std::rc::Rc;

use super::*;
use crate::fake_host::FakeHost;
use crate::report::Counts;

use super::test_support::{http_config, MS, T0};

fn config(extra: &str) -> Rc<Config> {
    http_config(
        extra,
        r#"[{"action": "reply", "match": {"path_prefix": "/api/"},
             "key": {"source": "header", "name": "x-user"}},
            {"action": "reply", "match": {"path_prefix": "/bulk/"}, "quantity": 5,
             "key": {"source": "header", "name": "x-user"}}]"#,
    )
}

/// An answer with `remaining` 2, capacity 100, and a lease of `units` for `ttl_ms` if given.
fn answer(allowed: bool, lease: Option<(u64, u64)>, extra: &str) -> Vec<u8> {
    let lease = lease.map_or(String::new(), |(units, ttl_ms)| {
        format!(r#", "lease": {{"units": {units}, "ttl_ms": {ttl_ms}}}"#)
    });
    let retry = if allowed { "null" } else { "1500" };
    format!(
        r#"{{"allowed": {allowed}, "algorithm": "gcra", "mode": "enforce", "capacity": 100,
        "remaining": 2, "retry_after_ms": {retry}, "reset_after_ms": 6000, "level": 98.0,
        "window_ms": 60000 {lease} {extra}}}"#
    )
    .into_bytes()
}

/// One request, as Envoy runs it: request headers, the callout's answer if one was made, then
/// response headers.
struct Run {
    host: FakeHost,
    next: Next,
    called_out: bool,
}

/// Runs a request for `user` on `path` at `now` with shared data from `shared` (another request's
/// host: the same VM), answering a callout with `reply`.
fn request(
    cfg: &Rc<Config>,
    worker: &Rc<Worker>,
    shared: &FakeHost,
    path: &str,
    user: &[u8],
    now: u64,
    reply: Option<(&[u8], Vec<u8>)>,
) -> Run {
    let mut host = shared.next_request("POST", path).header("x-user", user);
    host.now = now;
    let mut flow = Flow::with_worker(Rc::clone(cfg), Rc::clone(worker));
    let next = flow.on_request_headers(&mut host);
    let called_out = !host.effects.callouts.is_empty();
    if let (true, Some((status, body))) = (called_out, reply) {
        let token = host.next_token - 1;
        flow.on_callout_response(&mut host, token, Some(status), &body);
    }
    flow.on_response_headers(&mut host);
    Run {
        host,
        next,
        called_out,
    }
}

/// Alice's first request on `/api/x` at `T0`, allowed with a lease of `units` for `ttl_ms`: its host.
fn granted(cfg: &Rc<Config>, worker: &Rc<Worker>, units: u64, ttl_ms: u64) -> FakeHost {
    let body = answer(true, Some((units, ttl_ms)), "");
    let reply = Some((&b"200"[..], body));
    request(cfg, worker, &start(), "/api/x", b"alice", T0, reply).host
}

fn remaining(run: &Run) -> Option<String> {
    run.host.response_header("x-ratelimit-remaining")
}

fn start() -> FakeHost {
    let mut h = FakeHost::request("GET", "/");
    h.now = T0;
    h
}

#[test]
fn a_grant_admits_the_next_requests_without_callouts_and_headers_count_down() {
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let granted = Some((&b"200"[..], answer(true, Some((3, 1000)), "")));
    let first = request(&cfg, &w, &start(), "/api/x", b"alice", T0, granted);
    let sent: ThrottleRequest =
        serde_json::from_slice(&first.host.effects.callouts[0].body).unwrap();
    assert!(sent.lease, "the callout asks for a lease");
    assert_eq!(first.host.effects.resumed, 1);
    assert_eq!(
        remaining(&first).as_deref(),
        Some("5"),
        "2 at the backend + 3 leased"
    );
    assert_eq!(first.host.counter(Counter::LeaseGrants), 1);
    assert_eq!(first.host.counter(Counter::Callouts), 1);

    let mut h = first.host;
    for (i, want) in ["4", "3", "2"].into_iter().enumerate() {
        let now = T0 + (10 + i as u64) * MS;
        let run = request(&cfg, &w, &h, "/api/x", b"alice", now, None);
        assert!(!run.called_out, "leased admission {i}");
        assert_eq!(run.next, Next::Continue);
        assert!(run.host.effects.replies.is_empty());
        assert_eq!(remaining(&run).as_deref(), Some(want));
        assert_eq!(
            run.host.response_header("ratelimit").as_deref(),
            Some(format!("\"reply\";r={want};t=6").as_str())
        );
        assert_eq!(
            run.host.response_header("ratelimit-policy").as_deref(),
            Some("\"reply\";q=100;w=60")
        );
        assert_eq!(run.host.response_header("retry-after"), None);
        assert!(run
            .host
            .effects
            .request_headers_removed
            .contains(&"x-sluice-failure".to_owned()));
        h = run.host;
    }
    assert_eq!(h.counter(Counter::LeaseHits), 3);
    assert_eq!(
        h.counter(Counter::Allowed),
        1,
        "allowed counts the backend's answers"
    );
    assert_eq!(w.unreported()[0].leased, 3);
    // Spent: the next request asks again.
    let run = request(&cfg, &w, &h, "/api/x", b"alice", T0 + 20 * MS, None);
    assert!(run.called_out);
    assert_eq!(run.next, Next::Pause);
}

#[test]
fn an_expired_lease_sends_the_next_request_to_the_backend() {
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let h = granted(&cfg, &w, 50, 200);
    let run = request(&cfg, &w, &h, "/api/x", b"alice", T0 + 199 * MS, None);
    assert!(!run.called_out);
    let run = request(&cfg, &w, &run.host, "/api/x", b"alice", T0 + 200 * MS, None);
    assert!(run.called_out, "ttl counted from when the callout left");
}

#[test]
fn a_route_with_quantity_takes_that_many_units() {
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let h = granted(&cfg, &w, 12, 1000);
    let run = request(&cfg, &w, &h, "/bulk/x", b"alice", T0 + MS, None);
    assert!(!run.called_out);
    assert_eq!(remaining(&run).as_deref(), Some("9"), "2 + 12 − 5");
    let run = request(&cfg, &w, &run.host, "/bulk/x", b"alice", T0 + MS, None);
    assert!(!run.called_out);
    let run = request(&cfg, &w, &run.host, "/bulk/x", b"alice", T0 + MS, None);
    assert!(run.called_out, "2 left, 5 needed: asks the backend");
    let run = request(&cfg, &w, &run.host, "/api/x", b"alice", T0 + MS, None);
    assert!(!run.called_out, "the 2 left still serve quantity 1");
}

#[test]
fn with_the_backend_down_a_live_lease_is_spent_then_the_failure_mode_applies() {
    for (mode, extra) in [("allow", ""), ("deny", r#""failure_mode": "deny","#)] {
        let cfg = config(extra);
        let w = Rc::new(Worker::new(&cfg));
        let mut h = granted(&cfg, &w, 2, 1000);
        // The backend is gone: connections refused (503 from Envoy).
        let down = || Some((&b"503"[..], b"upstream connect error".to_vec()));
        for i in 0..2 {
            let run = request(&cfg, &w, &h, "/api/x", b"alice", T0 + (1 + i) * MS, down());
            assert!(!run.called_out, "{mode}: lease still spent");
            assert_eq!(run.next, Next::Continue);
            assert_eq!(run.host.response_header("x-sluice-failure"), None);
            h = run.host;
        }
        let run = request(&cfg, &w, &h, "/api/x", b"alice", T0 + 5 * MS, down());
        assert!(run.called_out);
        if mode == "allow" {
            assert_eq!(run.host.effects.resumed, 1);
            assert_eq!(
                run.host.response_header("x-sluice-failure").as_deref(),
                Some("unavailable")
            );
        } else {
            assert_eq!(run.host.effects.replies[0].0, 503);
        }
        let counts = w.unreported()[0];
        assert_eq!(counts.leased, 2);
        assert_eq!(counts.failed_error, 1);
        assert_eq!(counts.passed_unchecked, u64::from(mode == "allow"));
    }
}

#[test]
fn denials_shadow_rules_and_grpc_never_make_a_lease() {
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    for body in [
        answer(false, Some((5, 1000)), ""),
        answer(true, Some((5, 1000)), r#", "would_deny": true"#),
    ] {
        let h = request(
            &cfg,
            &w,
            &start(),
            "/api/x",
            b"alice",
            T0,
            Some((b"200", body)),
        )
        .host;
        // The entry holds the mark of the grant that was asked for, and no grant.
        let grants: usize = h
            .shared
            .iter()
            .filter(|(k, _)| k.starts_with("sluice.lease."))
            .filter_map(|(_, b)| lease::decode(b).map(|(l, _)| l.grants.len()))
            .sum();
        assert_eq!(grants, 0);
        assert_eq!(h.counter(Counter::LeaseGrants), 0);
    }
    // gRPC: the request does not ask, and a lease left in shared data (by an HTTP plugin of the
    // same VM) is not spent by it either: gRPC callouts have no leases.
    let http = granted(&cfg, &w, 5, 1000);
    let grpc = Rc::new(
        Config::from_json(
            br#"{"backend": {"cluster": "rls", "protocol": "grpc"},
            "routes": [{"action": "reply", "key": {"source": "header", "name": "x-user"}}]}"#,
        )
        .unwrap(),
    );
    let gw = Rc::new(Worker::new(&grpc));
    let run = request(&grpc, &gw, &http, "/api/x", b"alice", T0 + MS, None);
    assert_eq!(run.host.effects.grpc_calls.len(), 1);
    assert_eq!(run.host.counter(Counter::LeaseHits), 0);
}

#[test]
fn leases_off_means_no_table_reads_and_no_spending() {
    let cfg = config(r#""lease": {"enabled": false}, "denial_cache": {"enabled": false},"#);
    let w = Rc::new(Worker::new(&cfg));
    let h = granted(&cfg, &w, 5, 1000);
    assert!(
        h.shared.is_empty(),
        "a grant the filter did not ask for is ignored"
    );
    assert_eq!(h.shared_reads.get(), 0);
    let run = request(&cfg, &w, &h, "/api/x", b"alice", T0 + MS, None);
    assert!(run.called_out);
}

#[test]
fn a_lease_is_taken_before_the_denial_cache_is_asked() {
    // One worker holds a lease while another's callout was denied (the lease drained the key):
    // the leased units were debited, so they are still spent.
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let h = granted(&cfg, &w, 1, 1000);
    let denied = request(
        &cfg,
        &w,
        &h,
        "/bulk/x",
        b"alice",
        T0 + MS,
        Some((b"200", answer(false, None, ""))),
    );
    assert!(denied.called_out, "quantity 5 does not fit the lease");
    assert_eq!(denied.host.effects.replies[0].0, 429);
    let run = request(
        &cfg,
        &w,
        &denied.host,
        "/api/x",
        b"alice",
        T0 + 2 * MS,
        None,
    );
    assert!(!run.called_out);
    assert_eq!(run.host.counter(Counter::LeaseHits), 1);
    // The cached denial of quantity 5 still answers.
    let run = request(&cfg, &w, &run.host, "/bulk/x", b"alice", T0 + 3 * MS, None);
    assert_eq!(
        run.host.reply_header("x-sluice-cache").as_deref(),
        Some("hit")
    );
    assert_eq!(w.unreported()[0].cached_denied, 1);
}

#[test]
fn no_other_key_spends_a_lease() {
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let long = vec![0xffu8; 30_000];
    let mut h = start();
    for key in [&b"alice"[..], &long] {
        h = request(
            &cfg,
            &w,
            &h,
            "/api/x",
            key,
            T0,
            Some((b"200", answer(true, Some((100, 1000)), ""))),
        )
        .host;
    }
    let mut other_long = long.clone();
    other_long[29_999] = b'x';
    for key in [
        &b"alice "[..],
        b"Alice",
        b"alice\xff",
        b"alice,alice",
        b"",
        &other_long,
        &long[..29_999],
    ] {
        let run = request(&cfg, &w, &h, "/api/x", key, T0 + MS, None);
        assert!(
            run.called_out,
            "{:?}",
            String::from_utf8_lossy(&key[..key.len().min(20)])
        );
    }
    let run = request(&cfg, &w, &h, "/api/x", &long, T0 + MS, None);
    assert!(
        !run.called_out,
        "the same long key shares its digest's lease"
    );
}

#[test]
fn every_failure_is_counted_by_reason_and_outcome() {
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let h = start();
    for (status, body) in [
        (&b"504"[..], &b"upstream request timeout"[..]),
        (b"503", b"no healthy upstream"),
        (b"500", b"{}"),
        (b"200", b"{not json"),
    ] {
        request(
            &cfg,
            &w,
            &h,
            "/api/x",
            b"u",
            T0,
            Some((status, body.to_vec())),
        );
    }
    let mut failing = h.next_request("POST", "/api/x").header("x-user", b"u");
    failing.dispatch_error = Some("BadArgument".into());
    Flow::with_worker(Rc::clone(&cfg), Rc::clone(&w)).on_request_headers(&mut failing);
    assert_eq!(
        w.unreported()[0],
        Counts {
            failed_timeout: 1,
            failed_error: 4,
            passed_unchecked: 5,
            ..Counts::default()
        }
    );
}

#[test]
fn a_grant_in_an_answer_for_no_pending_request_is_counted_lost() {
    // The request was already decided (its callout failed or timed out) when the answer came:
    // the backend debited the lease, and nothing stores it.
    let cfg = config("");
    let w = Rc::new(Worker::new(&cfg));
    let mut host = start()
        .next_request("POST", "/api/x")
        .header("x-user", b"alice");
    let mut flow = Flow::with_worker(Rc::clone(&cfg), Rc::clone(&w));
    assert_eq!(flow.on_request_headers(&mut host), Next::Pause);
    let token = host.next_token - 1;
    flow.on_callout_response(
        &mut host,
        token + 7,
        Some(b"200"),
        &answer(true, Some((6, 1000)), ""),
    );
    assert_eq!(host.counter(Counter::LeaseUnitsLost), 6);
    flow.on_callout_response(&mut host, token + 8, Some(b"200"), &answer(true, None, ""));
    assert_eq!(
        host.counter(Counter::LeaseUnitsLost),
        6,
        "no lease, nothing lost"
    );
}
