//! A fake of Envoy's callbacks ([`Envoy`]) for the glue's unit tests: a request's headers and
//! peer, callouts started (or refused, or answered inside their own call), counters, logs, and
//! what was done to the request (continued, answered), with whether the worker's lock was held
//! at that moment. Shared through an `Rc`, so a test keeps a view while the filter owns one.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use sluice_filter::host::Counter;

use crate::abi::{FilterScheduler, Level, LinePart, ResponsePart, WorkerBound};
use crate::copied::{CalloutAnswer, HeaderSnapshot, Pseudo};
use crate::envoy::Envoy;

/// A callout the glue started.
#[derive(Debug, Clone)]
pub struct Started {
    pub id: u64,
    pub cluster: String,
    /// `(name, value)`, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// An answer Envoy was asked to send: status, headers, body.
pub type Reply = (u16, Vec<(String, String)>, Vec<u8>);

/// What the fake Envoy holds and saw.
#[derive(Debug, Default)]
pub struct Record {
    pub now: u64,
    /// Request headers, pseudo-headers included.
    pub request: Vec<(String, Vec<u8>)>,
    pub response: Vec<(String, Vec<u8>)>,
    /// Callouts are refused with this init result.
    pub refuse: Option<u32>,
    /// The next callout is answered inside its own `http_callout` with this.
    pub answer_at_once: Option<CalloutAnswer>,
    early: Vec<(u64, CalloutAnswer)>,
    next_id: u64,
    pub callouts: Vec<Started>,
    pub counters: HashMap<usize, u64>,
    pub added: Vec<(String, Vec<u8>)>,
    pub set: Vec<(String, String)>,
    pub removed: Vec<String>,
    pub logs: Vec<(Level, String)>,
    pub continued: usize,
    pub replies: Vec<Reply>,
    /// The worker state whose lock is checked when Envoy is asked to continue or answer.
    pub watch: Option<Arc<WorkerBound>>,
    /// Whether that lock was held at each continue or answer.
    pub locked_when_handed: Vec<bool>,
}

/// The fake; clones share one [`Record`].
#[derive(Debug, Clone, Default)]
pub struct FakeEnvoy(pub Rc<RefCell<Record>>);

impl FakeEnvoy {
    /// A request `method path` with `headers`, at `now`.
    pub fn request(method: &str, path: &str, headers: &[(&str, &str)], now: u64) -> FakeEnvoy {
        let mut request = vec![
            (":method".to_owned(), method.as_bytes().to_vec()),
            (":path".to_owned(), path.as_bytes().to_vec()),
            (":authority".to_owned(), b"example.test".to_vec()),
        ];
        for (n, v) in headers {
            request.push(((*n).to_owned(), v.as_bytes().to_vec()));
        }
        FakeEnvoy(Rc::new(RefCell::new(Record {
            now,
            request,
            next_id: 100,
            ..Record::default()
        })))
    }

    /// The record, to read or change.
    pub fn record(&self) -> std::cell::RefMut<'_, Record> {
        self.0.borrow_mut()
    }

    /// A counter's total (the tests define counter `i` as id `i`).
    pub fn counter(&self, counter: Counter) -> u64 {
        self.0
            .borrow()
            .counters
            .get(&counter.index())
            .copied()
            .unwrap_or(0)
    }

    fn handed(&self) {
        let mut r = self.0.borrow_mut();
        let locked = r.watch.as_ref().is_some_and(|w| w.is_locked());
        r.locked_when_handed.push(locked);
    }
}

impl Envoy for FakeEnvoy {
    fn request_line_part(&self, part: LinePart, each: &mut dyn FnMut(&[u8])) {
        let name = match part {
            LinePart::Path => ":path",
            LinePart::Method => ":method",
        };
        let value = self
            .0
            .borrow()
            .request
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone());
        if let Some(v) = value {
            each(&v);
        }
    }

    fn request_headers(&self, pseudo: Pseudo) -> HeaderSnapshot {
        let mut snapshot = HeaderSnapshot::reused(pseudo);
        for (n, v) in &self.0.borrow().request {
            if pseudo == Pseudo::Skipped && n.starts_with(':') {
                continue;
            }
            snapshot.push(n.as_bytes(), v);
        }
        snapshot
    }

    fn source_address(&self) -> Option<Vec<u8>> {
        Some(b"192.0.2.7:40000".to_vec())
    }

    fn set_request_header(&self, name: &str, value: &str) {
        let mut r = self.0.borrow_mut();
        r.request.retain(|(n, _)| n != name);
        r.request.push((name.to_owned(), value.as_bytes().to_vec()));
        r.set.push((name.to_owned(), value.to_owned()));
    }

    fn remove_request_header(&self, name: &str) {
        let mut r = self.0.borrow_mut();
        r.request.retain(|(n, _)| n != name);
        r.removed.push(name.to_owned());
    }

    fn add_response_header(&self, name: &str, value: &[u8]) {
        self.0
            .borrow_mut()
            .added
            .push((name.to_owned(), value.to_vec()));
    }

    fn response_values(&self, part: ResponsePart, name: &str) -> Vec<Vec<u8>> {
        match part {
            ResponsePart::Headers => self
                .0
                .borrow()
                .response
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .collect(),
            ResponsePart::Trailers => Vec::new(),
        }
    }

    fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        _timeout_ms: u64,
    ) -> Result<u64, u32> {
        let mut r = self.0.borrow_mut();
        if let Some(code) = r.refuse {
            return Err(code);
        }
        r.next_id += 1;
        let id = r.next_id;
        r.callouts.push(Started {
            id,
            cluster: cluster.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.to_vec(),
        });
        if let Some(answer) = r.answer_at_once.take() {
            r.early.push((id, answer));
        }
        Ok(id)
    }

    fn increment(&self, id: usize) {
        self.increment_by(id, 1);
    }

    fn increment_by(&self, id: usize, n: u64) {
        *self.0.borrow_mut().counters.entry(id).or_default() += n;
    }

    fn scheduler(&self) -> Option<FilterScheduler> {
        None
    }

    fn take_early(&self) -> Vec<(u64, CalloutAnswer)> {
        std::mem::take(&mut self.0.borrow_mut().early)
    }

    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        self.handed();
        self.0.borrow_mut().replies.push((
            status,
            headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body.to_vec(),
        ));
    }

    fn continue_decoding(&self) {
        self.handed();
        self.0.borrow_mut().continued += 1;
    }

    fn log(&self, level: Level, message: &str) {
        self.0.borrow_mut().logs.push((level, message.to_owned()));
    }

    fn now_ns(&self) -> u64 {
        self.0.borrow().now
    }
}
