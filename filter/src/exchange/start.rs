//! How an exchange starts, the one policy both hosts follow (`Host::exchange` in the proxy-wasm
//! host and in the dynamic module, and the dynamic module's report relay): the worker's stream
//! takes the request if it can ([`Route::Stream`]); while it is down for a reason that persists
//! the request fails at once ([`Route::Fail`]); otherwise it goes as one unary
//! `DecisionExchange/Call` carrying [`unary_message`], counted (`sluice.exchange_unary`) when a
//! stream declined it. A unary call that cannot start is told to the stream (its down state).
//!
//! What differs per host (how the stream is reached, how a unary call is framed and sent) is
//! behind [`ExchangeStart`]; what a request does is decided here once.

use prost::Message;
use sluice_core::exchange::ExchangeRequest;

use super::Route;
use crate::failure::Failure;
use crate::host::ExchangeCall;

/// What starting an exchange needs from a host.
pub trait ExchangeStart {
    /// Offers the exchange to the worker's stream: where the stream put it, or `None` when this
    /// caller has no stream to offer it to (a count report sent from a root context or the main
    /// thread): then it goes unary, uncounted.
    fn offer_to_stream(&mut self, call: &ExchangeCall) -> Option<Route>;
    /// Makes the unary call `DecisionExchange/Call` with `message` (see [`unary_message`]); its
    /// token, or the host's error as text.
    fn call_unary(&mut self, message: &[u8], timeout_ms: u64) -> Result<u32, String>;
    /// A unary call that could not start: the stream is told (a reason that persists keeps it
    /// down, so later requests fail at once instead of calling again).
    fn unary_not_started(&mut self, failure: &Failure);
    /// A stream declined the request and it went unary (`sluice.exchange_unary`).
    fn count_unary(&mut self);
}

/// Starts one exchange (see the module's documentation): the token its answer comes back
/// under, or the failure that applies now.
pub fn start(host: &mut dyn ExchangeStart, call: &ExchangeCall) -> Result<u32, Failure> {
    match host.offer_to_stream(call) {
        Some(Route::Stream(id)) => return Ok(id),
        Some(Route::Fail(failure)) => return Err(failure),
        Some(Route::Unary) => host.count_unary(),
        None => {}
    }
    let message = unary_message(call);
    host.call_unary(&message, call.timeout_ms).map_err(|e| {
        let failure = Failure::not_started(&e);
        host.unary_not_started(&failure);
        failure
    })
}

/// The message of a unary exchange: the request with id 0 (a unary call's answer comes back on
/// its own call, so no id matches it to its request).
pub fn unary_message(call: &ExchangeCall) -> Vec<u8> {
    ExchangeRequest {
        id: 0,
        path: call.path.clone(),
        body: call.body.clone(),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Reason;

    /// A host whose stream answers `route`, recording what the policy did.
    #[derive(Default)]
    struct Fake {
        route: Option<Route>,
        refuse: Option<&'static str>,
        unary: Vec<(Vec<u8>, u64)>,
        not_started: Vec<Failure>,
        counted: u32,
    }

    impl ExchangeStart for Fake {
        fn offer_to_stream(&mut self, _call: &ExchangeCall) -> Option<Route> {
            self.route.clone()
        }
        fn call_unary(&mut self, message: &[u8], timeout_ms: u64) -> Result<u32, String> {
            self.unary.push((message.to_vec(), timeout_ms));
            match self.refuse {
                Some(e) => Err(e.to_owned()),
                None => Ok(77),
            }
        }
        fn unary_not_started(&mut self, failure: &Failure) {
            self.not_started.push(failure.clone());
        }
        fn count_unary(&mut self) {
            self.counted += 1;
        }
    }

    fn call() -> ExchangeCall {
        ExchangeCall {
            path: "/v1/throttle".to_owned(),
            body: b"{}".to_vec(),
            timeout_ms: 250,
        }
    }

    #[test]
    fn the_stream_takes_it_or_fails_it_with_no_unary_call() {
        let mut host = Fake {
            route: Some(Route::Stream(5)),
            ..Fake::default()
        };
        assert_eq!(start(&mut host, &call()), Ok(5));
        let down = Failure::not_started("BadArgument");
        let mut host = Fake {
            route: Some(Route::Fail(down.clone())),
            ..Fake::default()
        };
        assert_eq!(start(&mut host, &call()), Err(down));
        assert!(host.unary.is_empty());
        assert_eq!(host.counted, 0);
    }

    #[test]
    fn declined_by_the_stream_it_goes_unary_and_is_counted() {
        let mut host = Fake {
            route: Some(Route::Unary),
            ..Fake::default()
        };
        assert_eq!(start(&mut host, &call()), Ok(77));
        assert_eq!(host.counted, 1);
        let (message, timeout_ms) = &host.unary[0];
        assert_eq!(*timeout_ms, 250);
        let sent = ExchangeRequest::decode(message.as_slice()).unwrap();
        assert_eq!((sent.id, sent.path.as_str()), (0, "/v1/throttle"));
        assert_eq!(sent.body, b"{}");
    }

    #[test]
    fn without_a_stream_it_goes_unary_uncounted() {
        let mut host = Fake::default();
        assert_eq!(start(&mut host, &call()), Ok(77));
        assert_eq!((host.counted, host.unary.len()), (0, 1));
    }

    #[test]
    fn a_unary_call_that_cannot_start_is_told_to_the_stream() {
        let mut host = Fake {
            route: Some(Route::Unary),
            refuse: Some("BadArgument"),
            ..Fake::default()
        };
        let failure = start(&mut host, &call()).unwrap_err();
        assert_eq!(failure.reason, Reason::ClusterMissing);
        assert_eq!(failure.header, "dispatch");
        assert_eq!(host.not_started, vec![failure]);
    }
}
