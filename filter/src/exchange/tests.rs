use prost::Message;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest};

use super::*;

/// A host whose stream opens (or not) and records what was sent.
#[derive(Default)]
struct Host {
    refuse_open: bool,
    refuse_send: bool,
    opened: u32,
    sent: Vec<(u32, ExchangeRequest)>,
    warnings: Vec<String>,
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
    fn warn(&mut self, message: &str) {
        self.warnings.push(message.to_owned());
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
        ex.send(&mut host, "/v1/throttle", b"{}".to_vec(), 7, "a", 10),
        None
    );
    assert!(host.sent.is_empty());
}

#[test]
fn answers_reach_the_request_that_sent_them_in_any_order() {
    let (mut ex, mut host) = open();
    let a = ex
        .send(&mut host, "/v1/throttle", b"A".to_vec(), 7, "a", 50)
        .unwrap();
    let b = ex
        .send(&mut host, "/v1/throttle/all", b"B".to_vec(), 8, "b", 50)
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
    let a = ex
        .send(&mut host, "/v1/throttle", vec![], 7, "a", 50)
        .unwrap();
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
    let a = ex.send(&mut host, "/p", vec![], 1, "a", 30).unwrap();
    let b = ex.send(&mut host, "/p", vec![], 2, "b", 20).unwrap();
    assert!(ex.expired(19).is_empty());
    let gone: Vec<u32> = ex.expired(20).iter().map(|w| w.id).collect();
    assert_eq!(gone, [b]);
    let gone: Vec<u32> = ex.expired(1_000).iter().map(|w| w.id).collect();
    assert_eq!(gone, [a]);
    // A late answer after the expiry answers no one.
    assert!(ex.on_message(101, &reply(a, 200, b"")).is_none());
}

#[test]
fn a_closed_stream_fails_everyone_waiting_and_reopens_after_the_pause() {
    let (mut ex, mut host) = open();
    ex.send(&mut host, "/p", vec![], 1, "a", 50).unwrap();
    ex.send(&mut host, "/p", vec![], 2, "b", 50).unwrap();
    // Another stream's close changes nothing.
    assert!(ex.on_close(55, 10).is_empty());
    let failed: Vec<&str> = ex.on_close(101, 10).iter().map(|w| w.waiter).collect();
    assert_eq!(failed, ["a", "b"]);
    assert_eq!(ex.token(), None);
    assert_eq!(ex.send(&mut host, "/p", vec![], 3, "c", 50), None);
    ex.ensure_open(&mut host, 10 + REOPEN_PAUSE_NS - 1);
    assert_eq!(ex.token(), None);
    ex.ensure_open(&mut host, 10 + REOPEN_PAUSE_NS);
    assert_eq!(ex.token(), Some(102));
    // An open stream is not opened again.
    ex.ensure_open(&mut host, u64::MAX);
    assert_eq!(host.opened, 2);
}

#[test]
fn a_stream_that_cannot_open_is_retried_after_the_pause_with_a_warning() {
    let mut ex: Exchanger<&str> = Exchanger::default();
    let mut host = Host {
        refuse_open: true,
        ..Host::default()
    };
    ex.ensure_open(&mut host, 5);
    assert_eq!(ex.token(), None);
    assert_eq!(host.warnings.len(), 1);
    ex.ensure_open(&mut host, 6);
    assert_eq!(host.warnings.len(), 1, "no retry inside the pause");
    host.refuse_open = false;
    ex.ensure_open(&mut host, 5 + REOPEN_PAUSE_NS);
    assert!(ex.token().is_some());
}

#[test]
fn a_failed_send_declines_and_marks_the_stream_for_reopening() {
    let (mut ex, mut host) = open();
    host.refuse_send = true;
    assert_eq!(ex.send(&mut host, "/p", vec![], 1, "a", 50), None);
    assert_eq!(ex.waiting(), 0);
    assert_eq!(ex.token(), None);
    host.refuse_send = false;
    ex.ensure_open(&mut host, 0);
    assert_eq!(ex.token(), Some(102));
}

#[test]
fn the_waiting_table_is_bounded_and_ids_stay_unique_when_they_wrap() {
    let (mut ex, mut host) = open();
    ex.next_id = u32::MAX - 1;
    let mut ids = std::collections::HashSet::new();
    for i in 0..MAX_WAITING {
        let id = ex.send(&mut host, "/p", vec![], i as u32, "w", 50).unwrap();
        assert_ne!(id, 0);
        assert!(ids.insert(id), "id {id} given twice");
    }
    assert_eq!(ex.send(&mut host, "/p", vec![], 0, "w", 50), None);
    // One answered frees one place.
    let first = *ids.iter().min().unwrap();
    assert!(ex.on_message(101, &reply(first, 200, b"")).is_some());
    assert!(ex.send(&mut host, "/p", vec![], 0, "w", 50).is_some());
}
