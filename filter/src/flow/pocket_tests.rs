//! The request flow with workers' pockets, against the fake host at fixed times: leased
//! admissions from a pocket make no shared-data hostcall and keep the headers counting down; two
//! workers of one VM admit every granted unit once, and no more.

use std::rc::Rc;

use super::*;
use crate::fake_host::FakeHost;

use super::test_support::{MS, T0};

fn config() -> Rc<Config> {
    let json = r#"{"backend": {"protocol": "http", "cluster": "sluice_backend", "authority": "sluice", "timeout_ms": 30},
        "routes": [{"action": "reply", "match": {"path_prefix": "/api/"},
                    "key": {"source": "header", "name": "x-user"}}]}"#;
    Rc::new(Config::from_json(json.as_bytes()).unwrap())
}

/// An allowed answer with `remaining` 2, capacity 100, and a lease of `units` for 1 s.
fn granting(units: u64) -> Vec<u8> {
    format!(
        r#"{{"allowed": true, "algorithm": "gcra", "mode": "enforce", "capacity": 100,
        "remaining": 2, "retry_after_ms": null, "reset_after_ms": 6000, "level": 98.0,
        "window_ms": 60000, "lease": {{"units": {units}, "ttl_ms": 1000}}}}"#
    )
    .into_bytes()
}

/// One request of `user` on `worker` at `now`, in the VM whose shared data `vm` holds; a callout
/// is answered with `reply` if given. Answers the request's host (its effects and hostcall
/// counts) and whether it called out.
fn request(
    cfg: &Rc<Config>,
    worker: &Rc<Worker>,
    vm: &FakeHost,
    now: u64,
    reply: Option<Vec<u8>>,
) -> (FakeHost, bool) {
    let mut host = vm.next_request("GET", "/api/x").header("x-user", b"alice");
    host.now = now;
    let mut flow = Flow::with_worker(Rc::clone(cfg), Rc::clone(worker));
    flow.on_request_headers(&mut host);
    let called_out = !host.effects.callouts.is_empty();
    if let (true, Some(body)) = (called_out, reply) {
        let token = host.next_token - 1;
        flow.on_callout_response(&mut host, token, Some(b"200"), &body);
    }
    flow.on_response_headers(&mut host);
    (host, called_out)
}

fn start() -> FakeHost {
    let mut h = FakeHost::request("GET", "/");
    h.now = T0;
    h
}

#[test]
fn a_lease_of_64_on_one_worker_costs_twenty_shared_takes_and_headers_count_down() {
    let cfg = config();
    let w = Rc::new(Worker::new(&cfg));
    let (mut vm, called_out) = request(&cfg, &w, &start(), T0, Some(granting(64)));
    assert!(called_out);
    assert_eq!(
        vm.response_header("x-ratelimit-remaining").as_deref(),
        Some("66")
    );
    let (mut reads, mut writes) = (0, 0);
    for want in (2..66).rev() {
        let (host, called_out) = request(&cfg, &w, &vm, T0 + 10 * MS, None);
        assert!(!called_out, "remaining {want}");
        assert_eq!(
            host.response_header("x-ratelimit-remaining"),
            Some(want.to_string()),
            "one less per admission, from the pocket or the shared entry"
        );
        reads += host.shared_reads.get();
        writes += host.shared_writes;
        vm = host;
    }
    // 64 admissions: 20 took from the shared entry (a read and a check-and-set each), 44 from
    // the worker's pocket (none), 0.625 shared-data hostcalls per admission (2 without pockets).
    assert_eq!((reads, writes), (20, 20));
    assert_eq!(vm.counter(Counter::LeaseHits), 64);
    assert_eq!(w.unreported()[0].leased, 64);
    let (_, called_out) = request(&cfg, &w, &vm, T0 + 10 * MS, None);
    assert!(called_out, "all spent");
}

#[test]
fn two_workers_admit_every_granted_unit_once() {
    // Worker 0 gets the grant; then requests alternate between the two workers in an uneven
    // pattern until each has called out: the admissions total exactly the 200 granted units.
    let cfg = config();
    let workers = [Rc::new(Worker::new(&cfg)), Rc::new(Worker::new(&cfg))];
    let (mut vm, _) = request(&cfg, &workers[0], &start(), T0, Some(granting(200)));
    let (mut admitted, mut called_out) = (0, [false; 2]);
    let mut hostcalls = 0;
    for i in 0..1000u64 {
        let w = usize::from(i % 3 == 0 || i % 7 == 0);
        let (host, out) = request(&cfg, &workers[w], &vm, T0 + 10 * MS, None);
        if out {
            called_out[w] = true;
            if called_out == [true, true] {
                break;
            }
        } else {
            admitted += 1;
            hostcalls += host.shared_reads.get() + host.shared_writes;
        }
        vm = host;
    }
    assert_eq!(admitted, 200);
    let leased: u64 = workers.iter().map(|w| w.unreported()[0].leased).sum();
    assert_eq!(leased, 200);
    assert!(
        hostcalls < 200,
        "{hostcalls} shared-data hostcalls for 200 admissions"
    );
}
