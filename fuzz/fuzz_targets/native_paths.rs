//! The dynamic-module build's own paths, from any bytes: its configuration entry (`filter_config`
//! as Envoy hands it: a refusal is one log line naming the field, never a panic), then a request
//! through the shared flow against the native shared state (the process-wide sharded map the
//! lease table and denial cache live in) with fuzzed header values as the key, and the answer read
//! as the native build reads a callout's: HTTP, or a gRPC unary reply unframed by hand.
//!
//! Input: `config JSON \0 key bytes \0 answer kind (1 byte) + answer body`.
#![no_main]

use std::rc::Rc;

use libfuzzer_sys::fuzz_target;
use sluice_filter::config::Protocol;
use sluice_filter::failure::Failure;
use sluice_filter::flow::Flow;
use sluice_filter::host::{Callout, CasError, Counter, ExchangeCall, GrpcCall, Host};
use sluice_filter_native::glue::{parse_config, CalloutAnswer};
use sluice_filter_native::{grpc, shared};

/// A request whose every header (`:path` aside) has the fuzzed value, on the native shared state.
struct FuzzHost {
    key: Vec<u8>,
    path: Vec<u8>,
    next: u32,
    started: Vec<(u32, bool)>,
}

impl Host for FuzzHost {
    fn now_ns(&self) -> u64 {
        1_700_000_000_000_000_000
    }
    fn each_request_header(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        match name {
            ":path" => each(&self.path),
            ":method" => each(b"GET"),
            _ => each(&self.key),
        }
    }
    fn client_address(&self) -> Option<Vec<u8>> {
        Some(self.key.clone())
    }
    fn shared_get(&self, key: &str) -> Option<Vec<u8>> {
        shared::store().get(key).map(|(v, _)| v)
    }
    fn shared_set(&mut self, key: &str, value: &[u8]) {
        shared::store().set(key, value)
    }
    fn shared_get_versioned(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        shared::store().get(key)
    }
    fn shared_set_if(&mut self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        shared::store().set_if(key, value, version)
    }
    fn dispatch(&mut self, _call: &Callout) -> Result<u32, String> {
        self.next += 1;
        self.started.push((self.next, false));
        Ok(self.next)
    }
    fn dispatch_grpc(&mut self, _call: &GrpcCall) -> Result<u32, String> {
        self.next += 1;
        self.started.push((self.next, true));
        Ok(self.next)
    }
    fn exchange(&mut self, _call: &ExchangeCall) -> Result<u32, Failure> {
        self.next += 1;
        self.started.push((self.next, true));
        Ok(self.next)
    }
    fn send_reply(&mut self, _status: u16, _headers: &[(&str, &str)], _body: &[u8]) {}
    fn resume(&mut self) {}
    fn set_request_header(&mut self, _name: &str, _value: &str) {}
    fn remove_request_header(&mut self, _name: &str) {}
    fn add_response_header(&mut self, _name: &str, _value: &[u8]) {}
    fn count(&mut self, _counter: Counter) {}
    fn count_by(&mut self, _counter: Counter, _n: u64) {}
    fn warn(&self, _message: &str) {}
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == 0);
    let json = parts.next().unwrap_or_default();
    let key = parts.next().unwrap_or_default();
    let answer = parts.next().unwrap_or_default();
    let config = match parse_config(json) {
        Err(line) => {
            // The line Envoy logs is the shared parser's refusal, naming its field.
            let e = sluice_filter::config::Config::from_json(json).expect_err("both refuse");
            assert!(!e.field.is_empty() && !e.reason.is_empty(), "{line}");
            assert_eq!(line, format!("sluice: bad plugin configuration: {e}"));
            assert!(line.contains(&e.field), "{line}");
            return;
        }
        Ok(config) => Rc::new(config),
    };
    let path = config
        .routes
        .first()
        .and_then(|r| r.matcher.path_prefix.clone())
        .unwrap_or_else(|| "/".to_owned());
    let mut host = FuzzHost {
        key: key.to_vec(),
        path: path.into_bytes(),
        next: 0,
        started: Vec::new(),
    };
    let mut flow = Flow::new(Rc::clone(&config));
    let _ = flow.on_request_headers(&mut host);
    let (kind, body) = answer.split_first().map_or((0, &[][..]), |(k, b)| (*k, b));
    let reply = CalloutAnswer {
        completed: kind & 1 == 0,
        headers: vec![(
            b":status".to_vec(),
            if kind & 2 == 0 {
                b"200".to_vec()
            } else {
                b"504".to_vec()
            },
        )],
        body: if kind & 4 == 0 {
            body.to_vec()
        } else {
            grpc::frame(body)
        },
    };
    for (token, is_grpc) in host.started.clone() {
        if !is_grpc {
            flow.on_callout_response(&mut host, token, reply.header(":status"), &reply.body);
            continue;
        }
        let r = grpc::read(&reply);
        if config.backend.protocol == Protocol::Grpc {
            if r.code == 0 {
                flow.on_grpc_response(&mut host, token, 0, &r.bytes);
            } else {
                flow.on_failure(
                    &mut host,
                    token,
                    Failure::of_grpc(Protocol::Grpc, r.code, r.message.as_deref()),
                );
            }
        } else {
            match sluice_filter::exchange::unary_reply(r.code, r.message.as_deref(), &r.bytes) {
                Ok((status, body)) => {
                    let status = status.to_string();
                    flow.on_callout_response(&mut host, token, Some(status.as_bytes()), &body)
                }
                Err(f) => flow.on_failure(&mut host, token, f),
            }
        }
    }
    flow.on_response_headers(&mut host);
});
