//! Test-only faults (the `fault-injection` feature, never in a release build of the module):
//! a request carrying `x-sluice-fault: panic-request` panics in the request-headers hook, and
//! one carrying `x-sluice-fault: panic-answer` panics when its decision's answer arrives, so the
//! e2e suite can drive the paths where the module itself fails through a real Envoy and check
//! that `failure_mode: deny` still denies.

#![forbid(unsafe_code)]
#![allow(clippy::panic)]

use crate::copied::Pseudo;
use crate::envoy::Envoy;

/// The request header naming the fault.
pub const FAULT_HEADER: &str = "x-sluice-fault";

fn asks(envoy: &impl Envoy, fault: &[u8]) -> bool {
    let snapshot = envoy.request_headers(Pseudo::Skipped);
    let mut found = false;
    snapshot.each(FAULT_HEADER, &mut |v| found |= v == fault);
    snapshot.recycle();
    found
}

/// Panics in the request-headers hook when the request asks for it.
pub fn at_request(envoy: &impl Envoy) {
    if asks(envoy, b"panic-request") {
        panic!("sluice fault injection: panic-request");
    }
}

/// Panics when the request's answer arrives, when the request asks for it.
pub fn at_answer(envoy: &impl Envoy) {
    if asks(envoy, b"panic-answer") {
        panic!("sluice fault injection: panic-answer");
    }
}
