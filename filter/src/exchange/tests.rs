use prost::Message;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest};

use super::*;
use crate::failure::Reason;

const MS: u64 = 1_000_000;

/// Sends at time 0; the message id when it went on the stream.
fn send(
    ex: &mut Exchanger<&'static str>,
    host: &mut Host,
    path: &str,
    body: Vec<u8>,
    context_id: u32,
    waiter: &'static str,
    deadline_ns: u64,
) -> Option<u32> {
    let sent = ex.send(host, path, body, context_id, waiter, deadline_ns, 0);
    assert!(sent.orphaned.is_none());
    match sent.route {
        Route::Stream(id) => Some(id),
        Route::Unary | Route::Fail(_) => None,
    }
}

/// Where a request sent at `now_ns` goes.
fn route(ex: &mut Exchanger<&'static str>, host: &mut Host, now_ns: u64) -> Route {
    ex.send(host, "/p", vec![], 1, "r", u64::MAX, now_ns).route
}

/// A host whose stream opens (or not) and records what was sent.
#[derive(Default)]
struct Host {
    refuse_open: bool,
    refuse_send: bool,
    opened: u32,
    sent: Vec<(u32, ExchangeRequest)>,
}

impl StreamHost for Host {
    fn open_stream(&mut self) -> Result<u32, String> {
        if self.refuse_open {
            return Err("BadArgument".into());
        }
        self.opened += 1;
        Ok(100 + self.opened)
    }
    fn send_message(&mut self, token: u32, message: &[u8]) -> Result<(), String> {
        if self.refuse_send {
            return Err("NotFound".into());
        }
        let request = ExchangeRequest::decode(message).map_err(|e| e.to_string())?;
        self.sent.push((token, request));
        Ok(())
    }
}

fn reply(id: u32, status: u32, body: &[u8]) -> Vec<u8> {
    ExchangeReply {
        id: u64::from(id),
        status,
        body: body.to_vec(),
    }
    .encode_to_vec()
}

fn open() -> (Exchanger<&'static str>, Host) {
    let mut ex = Exchanger::default();
    let mut host = Host::default();
    ex.ensure_open(&mut host, 0);
    assert_eq!(ex.token(), Some(101));
    (ex, host)
}

#[test]
fn no_stream_means_the_caller_sends_a_unary_call() {
    let mut ex: Exchanger<&str> = Exchanger::default();
    let mut host = Host::default();
    assert_eq!(
        send(
            &mut ex,
            &mut host,
            "/v1/throttle",
            b"{}".to_vec(),
            7,
            "a",
            10
        ),
        None
    );
    assert!(host.sent.is_empty());
}

#[test]
fn answers_reach_the_request_that_sent_them_in_any_order() {
    let (mut ex, mut host) = open();
    let a = send(
        &mut ex,
        &mut host,
        "/v1/throttle",
        b"A".to_vec(),
        7,
        "a",
        50,
    )
    .unwrap();
    let b = send(
        &mut ex,
        &mut host,
        "/v1/throttle/all",
        b"B".to_vec(),
        8,
        "b",
        50,
    )
    .unwrap();
    assert_ne!(a, b);
    assert_eq!(host.sent.len(), 2);
    assert_eq!(host.sent[1].0, 101);
    assert_eq!(host.sent[1].1.path, "/v1/throttle/all");
    assert_eq!(host.sent[1].1.body, b"B");
    assert_eq!(host.sent[1].1.id, u64::from(b));

    let (w, r) = ex.on_message(101, &reply(b, 200, b"{}")).unwrap();
    assert_eq!((w.context_id, w.waiter, r.status), (8, "b", 200));
    let (w, r) = ex.on_message(101, &reply(a, 404, b"x")).unwrap();
    assert_eq!(
        (w.context_id, w.waiter, r.status, r.body),
        (7, "a", 404, b"x".to_vec())
    );
    // Answered once: a repeat (or an answer for an id never sent) answers no one.
    assert!(ex.on_message(101, &reply(a, 200, b"")).is_none());
    assert!(ex.on_message(101, &reply(999, 200, b"")).is_none());
    assert_eq!(ex.waiting(), 0);
}

#[test]
fn messages_from_another_stream_or_garbage_answer_no_one() {
    let (mut ex, mut host) = open();
    let a = send(&mut ex, &mut host, "/v1/throttle", vec![], 7, "a", 50).unwrap();
    assert!(ex.on_message(55, &reply(a, 200, b"")).is_none());
    assert!(ex.on_message(101, &[0x1a, 9, 1]).is_none());
    let too_big = ExchangeReply {
        id: u64::from(u32::MAX) + 1 + u64::from(a),
        status: 200,
        body: vec![],
    };
    assert!(ex.on_message(101, &too_big.encode_to_vec()).is_none());
    assert_eq!(ex.waiting(), 1);
}

#[test]
fn overdue_requests_expire_exactly_at_their_deadline() {
    let (mut ex, mut host) = open();
    let a = send(&mut ex, &mut host, "/p", vec![], 1, "a", 30).unwrap();
    let b = send(&mut ex, &mut host, "/p", vec![], 2, "b", 20).unwrap();
    assert!(ex.expired(19).is_empty());
    let gone: Vec<u32> = ex.expired(20).iter().map(|w| w.id).collect();
    assert_eq!(gone, [b]);
    let gone: Vec<u32> = ex.expired(1_000).iter().map(|w| w.id).collect();
    assert_eq!(gone, [a]);
    // A late answer after the expiry answers no one.
    assert!(ex.on_message(101, &reply(a, 200, b"")).is_none());
}

#[test]
fn a_closed_stream_fails_everyone_waiting_at_once_with_its_status_and_reopens_after_the_backoff() {
    let (mut ex, mut host) = open();
    send(&mut ex, &mut host, "/p", vec![], 1, "a", 50 * MS).unwrap();
    send(&mut ex, &mut host, "/p", vec![], 2, "b", 50 * MS).unwrap();
    // Another stream's close changes nothing.
    let other = ex.on_close(55, 14, None, 10);
    assert!(other.waiting.is_empty() && !other.current);
    assert_eq!(ex.token(), Some(101));
    let closed = ex.on_close(101, 12, Some("wrong listener: use 127.0.0.1:8082"), 10);
    let failed: Vec<&str> = closed.waiting.iter().map(|w| w.waiter).collect();
    assert_eq!(failed, ["a", "b"], "failed now, not at their deadline");
    assert!(closed.current);
    assert_eq!(closed.failure.reason, Reason::WrongProtocol);
    assert!(closed.failure.seen.contains("127.0.0.1:8082"), "{closed:?}");
    assert_eq!(ex.token(), None);
    assert_eq!(ex.waiting(), 0);
    assert_eq!(ex.ensure_open(&mut host, 10 + REOPEN_FIRST_NS - 1), None);
    assert_eq!(ex.token(), None);
    ex.ensure_open(&mut host, 10 + REOPEN_FIRST_NS);
    assert_eq!(ex.token(), Some(102));
    // An open stream is not opened again.
    ex.ensure_open(&mut host, u64::MAX);
    assert_eq!(host.opened, 2);
}

#[test]
fn a_close_of_an_older_stream_fails_the_requests_sent_on_it_at_once() {
    let (mut ex, mut host) = open();
    send(&mut ex, &mut host, "/p", vec![], 1, "old", 50 * MS).unwrap();
    // The send on 101 fails: 101 is given up (its waiter comes back orphaned), a new stream
    // opens; a request on the new stream is not touched by 101's late close.
    host.refuse_send = true;
    let sent = ex.send(&mut host, "/p", vec![], 2, "x", 50 * MS, 0);
    assert_eq!(sent.route, Route::Unary, "this request goes unary");
    let (failure, orphans) = sent.orphaned.unwrap();
    assert_eq!(
        orphans.iter().map(|w| w.waiter).collect::<Vec<_>>(),
        ["old"]
    );
    assert_eq!(failure.header, "unavailable");
    host.refuse_send = false;
    ex.ensure_open(&mut host, REOPEN_FIRST_NS);
    assert_eq!(ex.token(), Some(102));
    send(&mut ex, &mut host, "/p", vec![], 3, "new", 50 * MS).unwrap();
    let late = ex.on_close(101, 14, None, REOPEN_FIRST_NS);
    assert!(late.waiting.is_empty() && !late.current);
    assert_eq!((ex.token(), ex.waiting()), (Some(102), 1));
}

#[test]
fn a_stream_that_cannot_open_is_retried_after_the_backoff_and_says_why() {
    let mut ex: Exchanger<&str> = Exchanger::default();
    let mut host = Host {
        refuse_open: true,
        ..Host::default()
    };
    let refused = ex.ensure_open(&mut host, 5).unwrap();
    assert_eq!(refused.reason, Reason::ClusterMissing);
    assert!(refused.seen.contains("BadArgument"), "{refused:?}");
    assert_eq!(ex.token(), None);
    assert_eq!(
        ex.ensure_open(&mut host, 6),
        None,
        "no retry inside the backoff"
    );
    assert_eq!(host.opened, 0);
    host.refuse_open = false;
    ex.ensure_open(&mut host, 5 + REOPEN_FIRST_NS);
    assert!(ex.token().is_some());
}

#[test]
fn a_failed_send_goes_unary_and_marks_the_stream_for_reopening() {
    let (mut ex, mut host) = open();
    host.refuse_send = true;
    let sent = ex.send(&mut host, "/p", vec![], 1, "a", 50, 0);
    assert_eq!(sent.route, Route::Unary);
    assert!(sent.orphaned.unwrap().1.is_empty());
    assert_eq!(ex.waiting(), 0);
    assert_eq!(ex.token(), None);
    host.refuse_send = false;
    ex.ensure_open(&mut host, REOPEN_FIRST_NS);
    assert_eq!(ex.token(), Some(102));
}

/// Closes the current stream with `status` at `now`, then reopens it when its backoff allows;
/// the pause it waited.
fn close_and_reopen(
    ex: &mut Exchanger<&'static str>,
    host: &mut Host,
    status: u32,
    now: u64,
) -> u64 {
    let token = ex.token().unwrap();
    ex.on_close(token, status, None, now);
    let mut t = now;
    while ex.token().is_none() {
        ex.ensure_open(host, t);
        if ex.token().is_none() {
            t += MS;
        }
    }
    t - now
}

#[test]
fn reopens_back_off_exponentially_to_the_cap_and_reset_on_a_stream_that_works() {
    let (mut ex, mut host) = open();
    let mut now = 0;
    let mut pauses = Vec::new();
    for _ in 0..9 {
        let pause = close_and_reopen(&mut ex, &mut host, 14, now);
        pauses.push(pause / MS);
        now += pause;
    }
    assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    // Over a minute of a backend that refuses every stream: a handful of reopens, not 60+.
    assert!(host.opened <= 16, "{}", host.opened);
    // An answer on the stream: it works, the next close reopens after the first pause again.
    let id = send(&mut ex, &mut host, "/p", vec![], 1, "a", u64::MAX).unwrap();
    assert!(ex
        .on_message(ex.token().unwrap(), &reply(id, 200, b""))
        .is_some());
    assert_eq!(
        close_and_reopen(&mut ex, &mut host, 14, now),
        REOPEN_FIRST_NS
    );
    // So does a stream that lived long enough, answering nothing (an idle worker).
    close_and_reopen(&mut ex, &mut host, 14, now);
    let later = now + WORKED_AFTER_NS + 5 * REOPEN_MAX_NS;
    assert_eq!(
        close_and_reopen(&mut ex, &mut host, 14, later),
        REOPEN_FIRST_NS
    );
}

#[test]
fn while_down_for_a_lasting_reason_requests_fail_at_once_but_one_probe_per_backoff() {
    for (status, reason) in [(14, Reason::Unreachable), (12, Reason::WrongProtocol)] {
        let (mut ex, mut host) = open();
        ex.on_close(101, status, None, 0);
        assert_eq!(ex.down().map(|f| f.reason), Some(reason));
        let backoff = ex.backoff_ns();
        // 300 requests within the first backoff interval: one probe, 299 fail at once.
        let routes: Vec<Route> = (0..300)
            .map(|i| route(&mut ex, &mut host, i * 1000))
            .collect();
        let unary = routes.iter().filter(|r| **r == Route::Unary).count();
        let failed = routes
            .iter()
            .filter(|r| matches!(r, Route::Fail(f) if f.reason == reason))
            .count();
        assert_eq!((unary, failed), (1, 299), "status {status}");
        assert_eq!(
            routes[0],
            Route::Unary,
            "the first request after the close probes"
        );
        // The probe failed the same way: the next one waits a whole backoff interval.
        let failure = match &routes[1] {
            Route::Fail(f) => f.clone(),
            other => panic!("{other:?}"),
        };
        ex.on_unary(Err(&failure), MS);
        assert!(matches!(
            route(&mut ex, &mut host, backoff - 1),
            Route::Fail(_)
        ));
        assert_eq!(route(&mut ex, &mut host, backoff), Route::Unary);
        assert!(matches!(
            route(&mut ex, &mut host, backoff + 1),
            Route::Fail(_)
        ));
    }
}

#[test]
fn a_passing_reason_keeps_unary_calls_per_request() {
    let (mut ex, mut host) = open();
    // A stream that ended OK-less with, say, INTERNAL: nothing says the next call fails too.
    ex.on_close(101, 13, None, 0);
    assert_eq!(ex.down(), None);
    for i in 0..5 {
        assert_eq!(route(&mut ex, &mut host, i), Route::Unary);
    }
}

#[test]
fn an_answered_probe_ends_the_down_state_and_brings_the_reopen_forward() {
    let (mut ex, mut host) = open();
    let mut now = 0;
    for _ in 0..6 {
        now += close_and_reopen(&mut ex, &mut host, 14, now);
    }
    ex.on_close(ex.token().unwrap(), 14, None, now);
    assert_eq!(ex.backoff_ns(), REOPEN_MAX_NS);
    assert_eq!(
        route(&mut ex, &mut host, now + MS),
        Route::Unary,
        "the probe"
    );
    assert!(matches!(
        route(&mut ex, &mut host, now + 2 * MS),
        Route::Fail(_)
    ));
    // The backend is back: the probe is answered.
    ex.on_unary(Ok(()), now + 30 * MS);
    assert_eq!(ex.down(), None);
    assert_eq!(
        route(&mut ex, &mut host, now + 31 * MS),
        Route::Unary,
        "unary until the stream"
    );
    // The reopen is not held back by the 3.2 s pause: the next tick opens the stream.
    ex.ensure_open(&mut host, now + 32 * MS);
    assert!(ex.token().is_some());
    let sent = ex.send(&mut host, "/p", vec![], 1, "a", u64::MAX, now + 33 * MS);
    assert!(matches!(sent.route, Route::Stream(_)));
    assert_eq!(ex.backoff_ns(), REOPEN_FIRST_NS);
}

#[test]
fn a_missing_cluster_fails_requests_at_once_but_for_the_probes() {
    let mut ex: Exchanger<&str> = Exchanger::default();
    let mut host = Host {
        refuse_open: true,
        ..Host::default()
    };
    ex.ensure_open(&mut host, 0).unwrap();
    assert_eq!(route(&mut ex, &mut host, 1), Route::Unary);
    match route(&mut ex, &mut host, 2) {
        Route::Fail(f) => assert_eq!(
            (f.reason, f.header.as_str()),
            (Reason::ClusterMissing, "dispatch")
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_waiting_table_is_bounded_and_ids_stay_unique_when_they_wrap() {
    let (mut ex, mut host) = open();
    ex.next_id = u32::MAX - 1;
    let mut ids = std::collections::HashSet::new();
    for i in 0..MAX_WAITING {
        let id = send(&mut ex, &mut host, "/p", vec![], i as u32, "w", 50).unwrap();
        assert_ne!(id, 0);
        assert!(ids.insert(id), "id {id} given twice");
    }
    assert_eq!(send(&mut ex, &mut host, "/p", vec![], 0, "w", 50), None);
    // One answered frees one place.
    let first = *ids.iter().min().unwrap();
    assert!(ex.on_message(101, &reply(first, 200, b"")).is_some());
    assert!(send(&mut ex, &mut host, "/p", vec![], 0, "w", 50).is_some());
}

#[test]
fn an_outcomes_http_status_is_the_replys_or_none() {
    assert_eq!(http_status(&Ok((204, Vec::new()))), Some(b"204".to_vec()));
    assert_eq!(http_status(&Err(Failure::timed_out())), None);
}
