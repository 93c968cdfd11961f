//! A cost route's reservation (docs/cost-budgets.md): reserved at request time as the throttle's
//! quantity, committed with the actual cost when the response says it, or kept.
//!
//! Kept (nothing committed) when the actual cost is missing or not a number
//! (`sluice.cost_actual_missing`), and when the request ends with no actual cost at all: a reset,
//! or a streamed response that ended without its trailer (`sluice.cost_unsettled`). Keeping never
//! admits more than the budget: the request was admitted for its reservation. Refunding instead
//! would give back units the upstream may well have spent (an LLM bills the tokens it generated
//! before the client went away), and knowing that a request ended without a response would need
//! a callback on every request (`proxy_on_log`), metered or not.

use sluice_core::wire::CommitRequest;

use super::{Flow, Holds, Pending};
use crate::config::{units, Actual, Route};
use crate::host::{Counter, Host};
use crate::report::Worker;

/// The request header carrying the commit id upstream (for correlating the upstream's logs
/// with the backend's commit); one a client sent is removed on cost routes.
pub const COST_ID_HEADER: &str = "x-sluice-cost-id";

/// A reservation the backend allowed, until it is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    action: String,
    key: String,
    reserved: u64,
    /// When the reservation's answer arrived (host clock, ms since the epoch).
    reserved_at_ms: u64,
    id: String,
    actual: Actual,
}

/// A cost route's throttle request in flight: the key, where the actual cost comes from, and
/// the commit id, chosen before the request goes out so that the backend holds the reservation
/// under the id its commit will carry (`ThrottleRequest.reservation_id`: in flight until then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    key: String,
    actual: Actual,
    id: String,
}

impl Ask {
    /// An ask for `key` under a fresh commit id of the worker.
    pub fn new(worker: &Worker, key: &str, actual: &Actual) -> Ask {
        Ask {
            key: key.to_owned(),
            actual: actual.clone(),
            id: worker.commits().next_id(worker.reporter()),
        }
    }

    /// The commit id, as the throttle request's `reservation_id`.
    pub fn id(&self) -> String {
        self.id.clone()
    }
}

/// Units a request on `route` asks for: its cost section's reservation, else its `quantity`.
pub fn reservation(route: &Route, host: &dyn Host) -> u64 {
    let Some(cost) = &route.cost else {
        return route.quantity;
    };
    let values = match &cost.reserve.header {
        Some(name) => host.request_header(name),
        None => Vec::new(),
    };
    cost.reserve.amount(&values)
}

/// The actual cost among a header's or trailer's values: exactly one decimal number.
fn actual_of(values: &[Vec<u8>]) -> Option<u64> {
    match values {
        [one] => units(one),
        _ => None,
    }
}

/// What of the response just arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrived {
    /// Its headers.
    Headers,
    /// Its trailers.
    Trailers,
}

impl Flow {
    /// The backend allowed `pending`: for a cost route, the reservation is now held (its time is
    /// the answer's arrival, at or just after the store's decision), under the commit id the
    /// throttle request carried.
    pub(super) fn reserved(&mut self, host: &mut dyn Host, pending: &Pending) {
        let Holds::Cost(ask) = pending.holds() else {
            return;
        };
        host.set_request_header(COST_ID_HEADER, &ask.id);
        self.reservation = Some(Reservation {
            action: pending.action.clone(),
            key: ask.key.clone(),
            reserved: pending.quantity,
            reserved_at_ms: host.now_ns() / 1_000_000,
            id: ask.id.clone(),
            actual: ask.actual.clone(),
        });
    }

    /// Response headers: a reservation whose actual cost is a response header is committed now.
    pub(super) fn commit_on_headers(&mut self, host: &mut dyn Host) {
        self.commit_on(host, Arrived::Headers);
    }

    /// Response trailers are in: a reservation whose actual cost is a trailer is committed now.
    pub fn on_response_trailers(&mut self, host: &mut dyn Host) {
        self.commit_on(host, Arrived::Trailers);
    }

    /// Reads the actual cost where the reservation says, if that is what just arrived (the
    /// response's trailers, or its headers) and commits it.
    fn commit_on(&mut self, host: &mut dyn Host, arrived: Arrived) {
        let values = match (self.reservation.as_ref().map(|r| &r.actual), arrived) {
            (Some(Actual::Header(name)), Arrived::Headers) => host.response_header(name),
            (Some(Actual::Trailer(name)), Arrived::Trailers) => host.response_trailer(name),
            _ => return,
        };
        self.commit(host, actual_of(&values));
    }

    /// The request is over (its context is going away): a reservation not yet committed (a reset,
    /// an upstream that never answered, a stream that ended without its trailer) is kept and
    /// counted.
    pub fn on_end(&mut self, host: &mut dyn Host) {
        if self.reservation.take().is_some() {
            host.count(Counter::CostUnsettled);
        }
    }

    /// Commits the actual cost (queued on the worker, sent on its tick), or keeps the
    /// reservation when there is none.
    fn commit(&mut self, host: &mut dyn Host, actual: Option<u64>) {
        let Some(r) = self.reservation.take() else {
            return;
        };
        let Some(actual) = actual else {
            host.count(Counter::CostActualMissing);
            return;
        };
        let request = CommitRequest {
            action: r.action,
            key: r.key,
            reserved: r.reserved,
            actual,
            id: r.id,
            reserved_at_ms: r.reserved_at_ms,
            timeout_ms: None,
            sent_at_ms: None,
        };
        self.worker.commits().push(host, request);
    }
}
