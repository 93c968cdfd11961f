//! Grants asked one at a time and units given back, against the fake host at fixed times:
//! concurrent misses of a cold key make one grant, a lost answer's mark expires, a grant that
//! expires with units left goes back on the tick as a commit of that grant, a retried return
//! keeps its id and counts once, and each grant leaves the table once whoever sweeps it.

use crate::lease::Lease;
use std::rc::Rc;

use sluice_core::wire::{CommitRequest, ThrottleRequest};

use super::*;
use crate::cost::COMMIT_PATH;
use crate::fake_host::FakeHost;
use crate::lease::returns::commit_id;

use super::test_support::{MS, T0};
/// The callout timeout of [`config`]: how long a mark of a grant in flight lives.
const TIMEOUT_MS: u64 = 30;

fn config() -> Rc<Config> {
    let json = format!(
        r#"{{"backend": {{"protocol": "http", "cluster": "sluice_backend", "authority": "sluice", "timeout_ms": {TIMEOUT_MS}}},
        "report": {{"enabled": false}},
        "routes": [{{"action": "reply", "match": {{"path_prefix": "/api/"}},
                     "key": {{"source": "header", "name": "x-user"}}}}]}}"#
    );
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

/// An allowed answer with `remaining` left and a lease of `units` for `ttl_ms`, if given.
fn answer(remaining: u64, lease: Option<(u64, u64)>) -> Vec<u8> {
    let lease = lease.map_or(String::new(), |(units, ttl_ms)| {
        format!(r#", "lease": {{"units": {units}, "ttl_ms": {ttl_ms}}}"#)
    });
    format!(
        r#"{{"allowed": true, "algorithm": "fixed_window", "mode": "enforce", "capacity": 10000000,
        "remaining": {remaining}, "retry_after_ms": null, "reset_after_ms": 600000, "level": 1.0,
        "window_ms": 3600000 {lease}}}"#
    )
    .into_bytes()
}

/// The VM: one host for every request and the root's tick (shared data, counters, callouts).
fn vm() -> FakeHost {
    let mut h = FakeHost::request("GET", "/api/x");
    h.now = T0;
    h
}

/// Starts a request for `user` at `now`: its flow, its callout's token and the throttle request
/// it sent (`None`: it did not call out).
fn start(
    cfg: &Rc<Config>,
    worker: &Rc<Worker>,
    h: &mut FakeHost,
    user: &[u8],
    now: u64,
) -> (Flow, u32, Option<ThrottleRequest>) {
    h.headers = vec![
        (":method".into(), b"GET".to_vec()),
        (":path".into(), b"/api/x".to_vec()),
        ("x-user".into(), user.to_vec()),
    ];
    h.now = now;
    let before = h.effects.callouts.len();
    let mut flow = Flow::with_worker(Rc::clone(cfg), Rc::clone(worker));
    let next = flow.on_request_headers(h);
    let sent = h.effects.callouts.get(before).map(|c| {
        assert_eq!(next, Next::Pause);
        serde_json::from_slice(&c.body).unwrap()
    });
    (flow, h.next_token - 1, sent)
}

/// Answers a request's callout `token` at `now` with `body`.
fn answered(flow: &mut Flow, h: &mut FakeHost, token: u32, now: u64, body: &[u8]) {
    h.now = now;
    flow.on_callout_response(h, token, Some(b"200"), body);
    flow.on_response_headers(h);
}

/// The lease returns the ticks sent so far (`POST /v1/commit` callouts).
fn returns_sent(h: &FakeHost) -> Vec<CommitRequest> {
    h.effects
        .callouts
        .iter()
        .filter(|c| c.headers.contains(&(":path", COMMIT_PATH.to_owned())))
        .map(|c| serde_json::from_slice(&c.body).unwrap())
        .collect()
}

/// The entry of `user`'s lease.
fn entry(h: &FakeHost, cfg: &Config, user: &str) -> Option<Lease> {
    let me = lease::identity("reply", user);
    lease::table::slot_keys(&me, cfg.lease.slots)
        .iter()
        .find_map(|k| {
            h.shared
                .get(k)
                .and_then(|b| lease::decode(b).map(|(l, _)| l))
        })
}

/// Runs one request of `user` at `now` to a grant of `units` for `ttl_ms` (sent at `now`,
/// answered 2 ms later).
fn granted(
    cfg: &Rc<Config>,
    w: &Rc<Worker>,
    h: &mut FakeHost,
    user: &[u8],
    now: u64,
    units: u64,
    ttl_ms: u64,
) {
    let (mut flow, token, sent) = start(cfg, w, h, user, now);
    assert!(sent.unwrap().lease);
    let body = answer(5_000_000, Some((units, ttl_ms)));
    answered(&mut flow, h, token, now + 2 * MS, &body);
}

#[test]
fn concurrent_misses_of_a_cold_key_make_one_grant_and_the_others_are_decided_exactly() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let mut h = vm();
    // 32 requests of one cold key arrive before any answer: one asks for a lease.
    let mut flows = Vec::new();
    let mut hostcalls = Vec::new();
    for i in 0..32u64 {
        let before = (h.shared_reads.get(), h.shared_writes);
        let (flow, token, sent) = start(&cfg, &w, &mut h, b"alice", T0 + i * 10_000);
        hostcalls.push((h.shared_reads.get() - before.0, h.shared_writes - before.1));
        let sent = sent.expect("a cold key calls out");
        assert_eq!(sent.quantity, 1);
        flows.push((flow, token, sent.lease));
    }
    // Shared-data hostcalls (reads, writes), the denial cache's read included: the first miss
    // reads the lease slot, the cache slot, the lease slot again and marks it; the others find
    // the mark (the take reads both lease slots: the first holds only the mark).
    assert_eq!(hostcalls[0], (3, 1));
    assert!(hostcalls[1..].iter().all(|&c| c == (4, 0)), "{hostcalls:?}");
    let asked: Vec<usize> = (0..32).filter(|&i| flows[i].2).collect();
    assert_eq!(asked, vec![0], "only the first miss asks for a lease");
    // The exact ones are answered first, then the grant.
    for (flow, token, _) in flows.iter_mut().skip(1) {
        answered(flow, &mut h, *token, T0 + MS, &answer(5_000_000, None));
    }
    assert_eq!(h.effects.resumed, 31);
    let (flow, token, _) = &mut flows[0];
    let body = answer(5_000_000, Some((100_000, 10_000)));
    answered(flow, &mut h, *token, T0 + 2 * MS, &body);
    assert_eq!(
        h.counter(Counter::LeaseGrants),
        1,
        "one grant for 32 misses"
    );
    assert_eq!(
        entry(&h, &cfg, "alice").unwrap().asking_until_ns,
        0,
        "the store cleared the mark"
    );
    // The grant serves the next requests.
    let (_, _, sent) = start(&cfg, &w, &mut h, b"alice", T0 + 3 * MS);
    assert_eq!(sent, None, "a leased admission");
    assert_eq!(h.counter(Counter::LeaseHits), 1);
    // Another key is not held back by alice's grant.
    let (_, _, sent) = start(&cfg, &w, &mut h, b"bob", T0 + 3 * MS);
    assert!(sent.unwrap().lease);
}

#[test]
fn a_lost_answer_holds_grants_back_only_until_the_callout_timeout() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let mut h = vm();
    let (_lost, _, sent) = start(&cfg, &w, &mut h, b"alice", T0);
    assert!(sent.unwrap().lease);
    // Its answer never comes. Until the timeout, misses ask for themselves alone ...
    let (_, _, sent) = start(&cfg, &w, &mut h, b"alice", T0 + TIMEOUT_MS * MS - 1);
    assert!(!sent.unwrap().lease);
    // ... and from then on, the next miss asks (and marks) again.
    let (_, _, sent) = start(&cfg, &w, &mut h, b"alice", T0 + TIMEOUT_MS * MS);
    assert!(sent.unwrap().lease);
    let (_, _, sent) = start(&cfg, &w, &mut h, b"alice", T0 + TIMEOUT_MS * MS + 1);
    assert!(!sent.unwrap().lease);
}

#[test]
fn an_action_whose_rule_never_leases_writes_no_mark_once_learnt() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let mut h = vm();
    let (mut flow, token, _) = start(&cfg, &w, &mut h, b"alice", T0);
    answered(&mut flow, &mut h, token, T0 + MS, &answer(5_000_000, None));
    // Learnt: an allowed answer with units left and no grant. A miss of another key of the
    // action now asks for a lease with one read and no write.
    let writes = h.shared_writes;
    let (_, _, sent) = start(&cfg, &w, &mut h, b"bob", T0 + 2 * MS);
    assert!(
        sent.unwrap().lease,
        "still asks: a rule that gains a lease is learnt"
    );
    assert_eq!(h.shared_writes, writes, "no mark");
    assert!(entry(&h, &cfg, "bob").is_none());
}

#[test]
fn a_grant_that_expires_with_units_left_goes_back_once_on_the_tick_retried_under_its_id() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let mut h = vm();
    // A grant of 10 (small: no pocket), ttl 1 s from the send at T0.
    granted(&cfg, &w, &mut h, b"alice", T0, 10, 1000);
    for i in 0..3 {
        let (_, _, sent) = start(&cfg, &w, &mut h, b"alice", T0 + (10 + i) * MS);
        assert_eq!(sent, None);
    }
    // Before the expiry the tick sends nothing; at it, the 7 units left go back.
    h.now = T0 + 999 * MS;
    w.settle(&mut h, &cfg);
    assert!(returns_sent(&h).is_empty());
    h.now = T0 + 1000 * MS;
    w.settle(&mut h, &cfg);
    let [first] = returns_sent(&h).try_into().unwrap();
    assert_eq!(
        (first.action.as_str(), first.key.as_str()),
        ("reply", "alice")
    );
    assert_eq!(
        (first.reserved, first.actual),
        (10, 3),
        "granted 10, spent 3"
    );
    assert!(first.id.starts_with("lease-"), "{}", first.id);
    assert_eq!(first.reserved_at_ms, T0 / MS, "the grant's send");
    // The first attempt fails: the next tick sends the same return, same id.
    let token = h.next_token - 1;
    w.on_report_response(&mut h, token, Some(b"503"));
    h.now = T0 + 1100 * MS;
    w.settle(&mut h, &cfg);
    let sent = returns_sent(&h);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].id, first.id, "a retry keeps the grant's id");
    assert_eq!((sent[1].reserved, sent[1].actual), (10, 3));
    let token = h.next_token - 1;
    w.on_report_response(&mut h, token, Some(b"200"));
    assert_eq!(h.counter(Counter::LeaseUnitsReturned), 7);
    assert_eq!(h.counter(Counter::LeaseUnitsLost), 0);
    // Done: no more returns, whoever looks at the entry next (a tick, a take on another worker).
    h.now = T0 + 1200 * MS;
    w.settle(&mut h, &cfg);
    let other = Rc::new(Worker::new(&cfg));
    let (_, _, sent) = start(&cfg, &other, &mut h, b"alice", T0 + 1300 * MS);
    assert!(sent.is_some(), "expired: calls out");
    other.settle(&mut h, &cfg);
    assert_eq!(returns_sent(&h).len(), 2, "given back once");
    assert_eq!(h.counter(Counter::LeaseUnitsReturned), 7);
    assert_eq!(commit_id(0xab), "lease-00000000000000ab");
}

#[test]
fn a_take_that_finds_the_grant_expired_gives_it_back_and_the_sweep_then_finds_nothing() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let mut h = vm();
    granted(&cfg, &w, &mut h, b"alice", T0, 10, 1000);
    // Another worker's request after the expiry takes the grant out and queues its return.
    let other = Rc::new(Worker::new(&cfg));
    let (_, _, sent) = start(&cfg, &other, &mut h, b"alice", T0 + 1500 * MS);
    assert!(sent.is_some());
    other.settle(&mut h, &cfg);
    let [back] = returns_sent(&h).try_into().unwrap();
    assert_eq!((back.reserved, back.actual), (10, 0));
    // The worker that stored it sweeps and finds nothing left to give.
    w.settle(&mut h, &cfg);
    assert_eq!(returns_sent(&h).len(), 1);
    assert_eq!(w.watch().len(), 0, "swept");
}

#[test]
fn a_return_the_backend_refuses_is_counted_lost() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let mut h = vm();
    granted(&cfg, &w, &mut h, b"alice", T0, 10, 1000);
    h.now = T0 + 1000 * MS;
    w.settle(&mut h, &cfg);
    let token = h.next_token - 1;
    w.on_report_response(&mut h, token, Some(b"404"));
    assert_eq!(h.counter(Counter::LeaseUnitsLost), 10);
    assert_eq!(h.counter(Counter::LeaseUnitsReturned), 0);
}
