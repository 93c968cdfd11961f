//! A fake [`Host`] for native tests: a request, a clock, shared data, and a record of every
//! effect the request flow had.

use std::collections::HashMap;

use crate::failure::Failure;
use crate::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};

/// A reply the flow sent: status, headers, body.
pub type Reply = (u16, Vec<(String, String)>, Vec<u8>);

/// Everything the flow did to the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    pub callouts: Vec<Callout>,
    pub grpc_calls: Vec<GrpcCall>,
    pub exchanges: Vec<ExchangeCall>,
    pub replies: Vec<Reply>,
    pub resumed: u32,
    pub request_headers_set: Vec<(String, String)>,
    pub request_headers_removed: Vec<String>,
    pub response_headers_added: Vec<(String, String)>,
    pub warnings: std::cell::RefCell<Vec<String>>,
}

#[derive(Debug, Clone, Default)]
pub struct FakeHost {
    pub now: u64,
    pub headers: Vec<(String, Vec<u8>)>,
    pub peer: Option<Vec<u8>>,
    pub shared: HashMap<String, Vec<u8>>,
    /// Envoy's CAS number per shared-data key; a global counter, never 0 (as Envoy's).
    pub versions: HashMap<String, u32>,
    pub last_version: u32,
    /// Writes "another worker" makes just before this host's next conditional write is checked
    /// (one per conditional write, first in first out): a race between read and write.
    pub racing_writes: Vec<(String, Vec<u8>)>,
    /// Conditional writes to refuse outright (the host's other errors).
    pub refuse_writes: bool,
    /// Counts of shared-data reads and writes: the hostcalls a path costs.
    pub shared_reads: std::cell::Cell<u32>,
    pub shared_writes: u32,
    pub counters: HashMap<Counter, u64>,
    pub dispatch_error: Option<String>,
    /// What `exchange` answers instead of starting one (a stream that is down for a reason that
    /// will not fix itself per request).
    pub exchange_failure: Option<Failure>,
    /// The upstream's response headers and trailers (what `response_header` and
    /// `response_trailer` read).
    pub upstream_headers: Vec<(String, Vec<u8>)>,
    pub upstream_trailers: Vec<(String, Vec<u8>)>,
    pub next_token: u32,
    pub effects: Effects,
}

impl FakeHost {
    pub fn request(method: &str, path: &str) -> FakeHost {
        FakeHost {
            headers: vec![
                (":method".into(), method.into()),
                (":path".into(), path.into()),
            ],
            next_token: 1,
            ..FakeHost::default()
        }
    }

    pub fn header(mut self, name: &str, value: &[u8]) -> FakeHost {
        self.headers.push((name.to_owned(), value.to_vec()));
        self
    }

    pub fn peer(mut self, addr: &str) -> FakeHost {
        self.peer = Some(addr.as_bytes().to_vec());
        self
    }

    /// The same client and clock with a fresh request and no recorded effects; shared data and
    /// counters carry over (they are per VM, not per request).
    pub fn next_request(&self, method: &str, path: &str) -> FakeHost {
        FakeHost {
            now: self.now,
            shared: self.shared.clone(),
            versions: self.versions.clone(),
            last_version: self.last_version,
            counters: self.counters.clone(),
            next_token: self.next_token,
            ..FakeHost::request(method, path)
        }
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.counters.get(&c).copied().unwrap_or(0)
    }

    pub fn reply_header(&self, name: &str) -> Option<String> {
        let (_, headers, _) = self.effects.replies.last()?;
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    pub fn response_header(&self, name: &str) -> Option<String> {
        self.effects
            .response_headers_added
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

impl FakeHost {
    /// An unconditional write, as Envoy makes it: a new version from the global counter.
    pub fn write(&mut self, key: &str, value: &[u8]) {
        self.last_version = self.last_version.wrapping_add(1).max(1);
        self.shared.insert(key.to_owned(), value.to_vec());
        self.versions.insert(key.to_owned(), self.last_version);
    }

    /// The token of a call that starts (the next in order), or the dispatch error set.
    fn start_call(&mut self) -> Result<u32, String> {
        if let Some(e) = &self.dispatch_error {
            return Err(e.clone());
        }
        self.next_token += 1;
        Ok(self.next_token - 1)
    }
}

/// Every value of `name` in `pairs`, in order.
fn values_of(pairs: &[(String, Vec<u8>)], name: &str) -> Vec<Vec<u8>> {
    pairs
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

impl Host for FakeHost {
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn each_request_header(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        for (n, v) in &self.headers {
            if n.eq_ignore_ascii_case(name) {
                each(v);
            }
        }
    }
    fn response_header(&self, name: &str) -> Vec<Vec<u8>> {
        values_of(&self.upstream_headers, name)
    }
    fn response_trailer(&self, name: &str) -> Vec<Vec<u8>> {
        values_of(&self.upstream_trailers, name)
    }
    fn client_address(&self) -> Option<Vec<u8>> {
        self.peer.clone()
    }
    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        self.shared_reads.set(self.shared_reads.get() + 1);
        self.shared.get(key).cloned()
    }
    fn shared_set(&mut self, key: &str, value: &[u8]) {
        self.shared_writes += 1;
        self.write(key, value);
    }
    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.shared_reads.set(self.shared_reads.get() + 1);
        let value = self.shared.get(key)?.clone();
        Some((value, self.versions.get(key).copied().unwrap_or(0)))
    }
    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        self.shared_writes += 1;
        if !self.racing_writes.is_empty() {
            let (k, v) = self.racing_writes.remove(0);
            self.write(&k, &v);
        }
        if self.refuse_writes {
            return Err(CasError::Failed);
        }
        // Envoy: an existing key is written only at its version; an absent key always.
        if let Some(current) = self.versions.get(key) {
            if version != 0 && version != *current {
                return Err(CasError::Conflict);
            }
        }
        self.write(key, value);
        Ok(())
    }
    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        let token = self.start_call()?;
        self.effects.callouts.push(call.clone());
        Ok(token)
    }
    fn dispatch_grpc(&mut self, call: &GrpcCall) -> Result<u32, String> {
        let token = self.start_call()?;
        self.effects.grpc_calls.push(call.clone());
        Ok(token)
    }
    fn exchange(&mut self, call: &ExchangeCall) -> Result<u32, Failure> {
        if let Some(f) = &self.exchange_failure {
            return Err(f.clone());
        }
        let token = self.start_call().map_err(|e| Failure::not_started(&e))?;
        self.effects.exchanges.push(call.clone());
        Ok(token)
    }
    fn send_reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self.effects.replies.push((status, headers, body.to_vec()));
    }
    fn resume(&mut self) {
        self.effects.resumed += 1;
    }
    fn set_request_header(&mut self, name: &str, value: &str) {
        self.effects
            .request_headers_set
            .push((name.to_owned(), value.to_owned()));
    }
    fn remove_request_header(&mut self, name: &str) {
        self.effects.request_headers_removed.push(name.to_owned());
    }
    fn add_response_header(&mut self, name: &str, value: &[u8]) {
        self.effects
            .response_headers_added
            .push((name.to_owned(), String::from_utf8_lossy(value).into_owned()));
    }
    fn count(&mut self, counter: Counter) {
        *self.counters.entry(counter).or_default() += 1;
    }
    fn count_by(&mut self, counter: Counter, n: u64) {
        *self.counters.entry(counter).or_default() += n;
    }
    fn warn(&self, message: &str) {
        self.effects.warnings.borrow_mut().push(message.to_owned());
    }
}
