//! A fake [`Host`] for native tests: a request, a clock, shared data, and a record of every
//! effect the request flow had.

use std::collections::HashMap;

use crate::host::{Callout, Counter, GrpcCall, Host};

/// A reply the flow sent: status, headers, body.
pub type Reply = (u16, Vec<(String, String)>, Vec<u8>);

/// Everything the flow did to the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    pub callouts: Vec<Callout>,
    pub grpc_calls: Vec<GrpcCall>,
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
    pub counters: HashMap<Counter, u64>,
    pub dispatch_error: Option<String>,
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

impl Host for FakeHost {
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn request_header(&self, name: &str) -> Vec<Vec<u8>> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    }
    fn client_address(&self) -> Option<Vec<u8>> {
        self.peer.clone()
    }
    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        self.shared.get(key).cloned()
    }
    fn shared_set(&mut self, key: &str, value: &[u8]) {
        self.shared.insert(key.to_owned(), value.to_vec());
    }
    fn dispatch(&mut self, call: &Callout) -> Result<u32, String> {
        if let Some(e) = &self.dispatch_error {
            return Err(e.clone());
        }
        self.effects.callouts.push(call.clone());
        self.next_token += 1;
        Ok(self.next_token - 1)
    }
    fn dispatch_grpc(&mut self, call: &GrpcCall) -> Result<u32, String> {
        if let Some(e) = &self.dispatch_error {
            return Err(e.clone());
        }
        self.effects.grpc_calls.push(call.clone());
        self.next_token += 1;
        Ok(self.next_token - 1)
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
    fn add_response_header(&mut self, name: &str, value: &str) {
        self.effects
            .response_headers_added
            .push((name.to_owned(), value.to_owned()));
    }
    fn count(&mut self, counter: Counter) {
        *self.counters.entry(counter).or_default() += 1;
    }
    fn warn(&self, message: &str) {
        self.effects.warnings.borrow_mut().push(message.to_owned());
    }
}
