//! One request's way through the filter: route → key → lease → denial cache → callout → resume or
//! reply. The callout is, by `backend.protocol`, a message on the worker's exchange stream
//! (`grpc_stream`, the default), an HTTP callout to the decision API (`http`) or the gRPC rate
//! limit service (`grpc`); every answer becomes an [`Answer`], and everything after that is
//! shared. A live lease for the (action, key) admits the request with no callout (the JSON
//! callouts only: the RLS callout never asks for a lease). A failed decision is classified once,
//! in [`crate::failure`], counted and logged (rate-limited) by reason.
//!
//! Every path ends in exactly one of: the request continues (synchronously, or by `resume` after
//! the callout), or the filter replies. Nothing here can panic; the host's errors arrive as values.

use std::cell::Cell;
use std::rc::Rc;

use sluice_core::headers::RateLimit;
use sluice_core::wire::{
    ApiError, ErrorCode, ThrottleAllRequest, ThrottleAllResponse, ThrottleCheck, ThrottleRequest,
    ThrottleResponse,
};
use sluice_core::Action;

use crate::cache::{self};
use crate::config::{Config, Protocol, Route};
use crate::failure::mode::When;
use crate::failure::Failure;
use crate::host::{Callout, Counter, ExchangeCall, GrpcCall, Host};
use crate::lease::{self};
use crate::reply::{FAILURE_HEADER, SHADOW_HEADER};
use crate::report::{Event, Worker};
use crate::route::{self, RequestLine};

/// Largest callout response body read (a ThrottleResponse is a few hundred bytes): the same
/// bound the backend puts on bodies.
pub use sluice_core::limits::MAX_BODY_BYTES as MAX_RESPONSE_BODY;

/// What the request-headers callback returns to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Let the request go on now.
    Continue,
    /// Hold it: a callout is in flight, or the filter has replied.
    Pause,
}

/// What the backend's answer means.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A decision.
    Decision(ThrottleResponse),
    /// A decision estimated from a gRPC `DescriptorStatus` without sluice's metadata (see
    /// `rls::classify`): handled like a decision, except that a denial is not cached.
    Estimated(ThrottleResponse),
    /// The answer to a route with all-or-nothing checks (`POST /v1/throttle/all`).
    All(ThrottleAllResponse),
    /// 404 `unknown_action`: no rule for the action.
    UnknownAction,
    /// Anything else: the failure mode applies; why is classified in [`crate::failure`] (its
    /// `header` goes in `x-sluice-failure`).
    Failure(Failure),
}

/// Classifies a decision-API answer (an HTTP callout's, or an exchange reply's status and
/// body) under `protocol`. A timeout or refused connection arrives from Envoy as a 504 or 503, so
/// every non-200 other than 404 `unknown_action` is a failure.
pub fn classify(protocol: Protocol, status: Option<&[u8]>, body: &[u8]) -> Answer {
    let status = status
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(200) => match serde_json::from_slice::<ThrottleResponse>(body) {
            Ok(r) => Answer::Decision(r),
            Err(_) => Answer::Failure(Failure::of_http(protocol, status, body)),
        },
        Some(404) => match serde_json::from_slice::<ApiError>(body) {
            Ok(e) if e.error == ErrorCode::UnknownAction => Answer::UnknownAction,
            _ => Answer::Failure(Failure::of_http(protocol, status, body)),
        },
        _ => Answer::Failure(Failure::of_http(protocol, status, body)),
    }
}

/// Classifies the answer to `POST /v1/throttle/all` (a route with all-or-nothing checks) as
/// [`classify`] does one decision.
pub fn classify_all(protocol: Protocol, status: Option<&[u8]>, body: &[u8]) -> Answer {
    let ok = status.is_some_and(|s| s == b"200");
    if !ok {
        return classify(protocol, status, body);
    }
    match serde_json::from_slice::<ThrottleAllResponse>(body) {
        Ok(r) => Answer::All(r),
        Err(_) => Answer::Failure(Failure::of_http(protocol, Some(200), body)),
    }
}

/// The check a 404 `unknown_action` from `POST /v1/throttle/all` names (`checks[i].action`).
fn unknown_check(body: &[u8]) -> Option<usize> {
    let error = serde_json::from_slice::<ApiError>(body).ok()?;
    let field = error.field?;
    field
        .strip_prefix("checks[")?
        .strip_suffix("].action")?
        .parse()
        .ok()
}

/// A callout in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    token: u32,
    action: String,
    action_index: usize,
    quantity: u64,
    sent_ns: u64,
    /// What the callout asked, by kind of route.
    asked: Asked,
    /// The decision request's id (the JSON protocols): named in the worker's next report if
    /// this request's callout fails after it was sent (`report`, "Requests given up on").
    decision_id: Option<u64>,
}

/// What a callout asked, by kind of route.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    /// A route with one check.
    One {
        /// Its denial-cache identity, when the cache is on: an exact denial is remembered
        /// under it.
        cached_as: Option<Vec<u8>>,
        /// What an allowed answer holds beyond the decision.
        holds: Holds,
    },
    /// A route with all-or-nothing checks: their actions, in order (the answer's `results`
    /// follow it). No lease, no denial cache, no cost.
    All(Vec<String>),
}

/// What an allowed answer to a one-check callout holds (a cost route never leases).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holds {
    /// The decision only.
    Nothing,
    /// The lease the callout asked for: its identity, the grant is stored under it.
    Lease(Vec<u8>),
    /// A cost route's reservation: the key, where its actual cost comes from and the commit id
    /// the throttle request reserved under (the reservation is `quantity`).
    Cost(cost::Ask),
}

/// How exact a decision's numbers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Numbers {
    /// sluice's own: a denial may be cached.
    Exact,
    /// Estimated from a gRPC `DescriptorStatus` without sluice's metadata: not cached.
    Estimated,
}

/// Who denied a request (a cached denial says so in `x-sluice-cache: hit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeniedBy {
    /// The backend, just now.
    Backend,
    /// The denial cache, with no callout.
    Cache,
}

impl Pending {
    /// The actions of a route with all-or-nothing checks.
    fn all(&self) -> Option<&[String]> {
        match &self.asked {
            Asked::All(actions) => Some(actions),
            Asked::One { .. } => None,
        }
    }

    /// What a one-check callout's allowed answer holds.
    fn holds(&self) -> &Holds {
        match &self.asked {
            Asked::One { holds, .. } => holds,
            Asked::All(_) => &Holds::Nothing,
        }
    }

    /// The denial-cache identity of a one-check callout, when the cache is on.
    fn cached_as(&self) -> Option<&[u8]> {
        match &self.asked {
            Asked::One { cached_as, .. } => cached_as.as_deref(),
            Asked::All(_) => None,
        }
    }
}

thread_local! {
    /// The worker's buffer for a request's lease identity, reused by each request (taken while
    /// one is built; a host's requests on one worker never overlap inside the flow).
    static LEASE_IDENTITY: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A key built as bytes, as a string (every key is UTF-8: `key` encodes what is not; lossy only
/// so that nothing can panic).
fn key_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The filter's state for one HTTP request.
#[derive(Debug)]
pub struct Flow {
    config: Rc<Config>,
    worker: Rc<Worker>,
    pending: Option<Pending>,
    /// A leased admission's rate-limit headers: its route (in `config.routes`) and numbers,
    /// rendered as the response headers pass (`headers::render_each`: no allocation on the hot
    /// path). Before `response_headers`.
    leased: Option<(usize, RateLimit)>,
    response_headers: Vec<(&'static str, String)>,
    /// A cost route's reservation, once allowed, until it is committed or kept (`flow/cost.rs`).
    reservation: Option<cost::Reservation>,
}

impl Flow {
    /// A fresh request under `config`, counting into a worker of its own (tests).
    pub fn new(config: Rc<Config>) -> Flow {
        let worker = Rc::new(Worker::new(&config));
        Flow::with_worker(config, worker)
    }

    /// A fresh request under `config`, counting into its worker's table.
    pub fn with_worker(config: Rc<Config>, worker: Rc<Worker>) -> Flow {
        Flow {
            config,
            worker,
            pending: None,
            leased: None,
            response_headers: Vec::new(),
            reservation: None,
        }
    }

    /// The callout protocol this request uses.
    pub fn protocol(&self) -> Protocol {
        self.config.backend.protocol
    }

    /// Request headers are in: decide whether to meter, answer from the cache, or call out.
    pub fn on_request_headers(&mut self, host: &mut dyn Host) -> Next {
        let line = RequestLine::read(host);
        self.on_request_line(host, &line)
    }

    /// [`Flow::on_request_headers`] with the request line already read (a host that checks
    /// routes before making a flow reads it once, into a buffer it reuses).
    pub fn on_request_line(&mut self, host: &mut dyn Host, line: &RequestLine) -> Next {
        let config = Rc::clone(&self.config);
        let Some(route_index) = route::find_at(&config.routes, line, host) else {
            return Next::Continue;
        };
        let Some(route) = config.routes.get(route_index) else {
            return Next::Continue;
        };
        if !route.checks.is_empty() {
            return self.start_all(host, route, line);
        }
        // A cost route reserves what its `cost.reserve` says, and never leases: a leased
        // admission has no reservation of its own to commit against.
        let leasing =
            config.lease.enabled && config.backend.protocol.speaks_json() && route.cost.is_none();
        // The lease identity (`action\nkey`) is built around the key in the worker's reused
        // buffer: a leased hit makes neither string.
        let mut id = if leasing {
            LEASE_IDENTITY.take()
        } else {
            Vec::new()
        };
        if leasing {
            lease::start_identity(&mut id, &route.action);
        }
        let key_at = id.len();
        route::extract_key_into(&route.key, line, host, &mut id);
        // The upstream trusts these headers from the filter only: drop any a client sent.
        host.remove_request_header(SHADOW_HEADER);
        host.remove_request_header(FAILURE_HEADER);
        if route.cost.is_some() {
            host.remove_request_header(cost::COST_ID_HEADER);
        }
        let now = host.now_ns();
        let quantity = cost::reservation(route, host);
        if leasing {
            let mut back = Vec::new();
            let taken = lease::table::spend(
                host,
                &mut self.worker.pockets(),
                &id,
                config.lease.slots,
                quantity,
                now,
                &mut back,
            );
            if !back.is_empty() {
                self.worker.give_back(host, back);
            }
            if let Some(limit) = taken {
                LEASE_IDENTITY.set(id);
                host.count(Counter::LeaseHits);
                self.worker.record(route.action_index, Event::Leased);
                self.leased = Some((route_index, limit));
                return Next::Continue;
            }
        }
        let key = key_text(id.get(key_at..).unwrap_or_default());
        let identity = config
            .denial_cache
            .enabled
            .then(|| cache::identity(&route.action, quantity, &key));
        if let Some(cached) = &identity {
            let slot = cache::slot_key(cached, config.denial_cache.slots);
            if let Some(entry) = host
                .shared_get(&slot)
                .and_then(|b| cache::lookup(&b, cached, now))
            {
                host.count(Counter::CachedDenials);
                self.worker.record(route.action_index, Event::CachedDenied);
                // Counted down to the backend's own retry deadline, not to the end of the hold.
                let limit = entry.rate_limit(now);
                self.deny(host, &route.action, &limit, DeniedBy::Cache);
                if leasing {
                    LEASE_IDENTITY.set(id);
                }
                return Next::Pause;
            }
        }
        // One grant in flight per identity: a miss that finds another's asks for itself alone.
        let asks_lease = leasing && self.asks_lease(host, route.action_index, &id, now);
        let holds = match &route.cost {
            Some(c) => Holds::Cost(cost::Ask::new(&self.worker, &key, &c.actual)),
            None if asks_lease => Holds::Lease(id.clone()),
            None => Holds::Nothing,
        };
        if leasing {
            LEASE_IDENTITY.set(id);
        }
        let decision_id = config
            .backend
            .protocol
            .speaks_json()
            .then(|| self.worker.decision_id());
        let dispatched = match config.backend.protocol {
            Protocol::Http | Protocol::GrpcStream => {
                self.dispatch_http(host, &route.action, key, quantity, &holds, decision_id)
            }
            Protocol::Grpc => self.dispatch_grpc(host, &route.action, &key, quantity),
        };
        let pending = Pending {
            token: 0,
            action: route.action.clone(),
            action_index: route.action_index,
            quantity,
            sent_ns: now,
            asked: Asked::One {
                cached_as: identity,
                holds,
            },
            decision_id,
        };
        self.started(host, route, dispatched, pending)
    }

    /// Whether a miss of the lease `identity` (its route's action at `action_index`) asks for a
    /// lease at `now`: yes unless another request's grant for it is in flight
    /// (`lease::table::ask`, which marks the entry until the callout's timeout). An action whose
    /// rule is known not to lease asks without marking (`lease::asking`).
    fn asks_lease(
        &self,
        host: &mut dyn Host,
        action_index: usize,
        identity: &[u8],
        now: u64,
    ) -> bool {
        if !self.worker.rule_leases().marks(action_index) {
            return true;
        }
        let timeout_ns = self
            .config
            .backend
            .timeout_ms
            .saturating_mul(sluice_core::time::NANOS_PER_MILLI);
        let mut back = Vec::new();
        let ask = lease::table::ask(
            host,
            identity,
            self.config.lease.slots,
            now,
            now.saturating_add(timeout_ns),
            &mut back,
        );
        if !back.is_empty() {
            self.worker.give_back(host, back);
        }
        ask == lease::table::Ask::Grant
    }

    /// A callout started: count it and wait for its answer (`pending` gets its token). One that
    /// could not start: the failure mode applies now.
    fn started(
        &mut self,
        host: &mut dyn Host,
        route: &Route,
        sent: Result<u32, Failure>,
        pending: Pending,
    ) -> Next {
        match sent {
            Ok(token) => {
                host.count(Counter::Callouts);
                self.pending = Some(Pending { token, ..pending });
                Next::Pause
            }
            Err(failure) => {
                let at = (route.action_index, route.action.as_str());
                self.fail(host, at, &failure, When::InRequestHeaders)
            }
        }
    }

    /// A route with all-or-nothing checks: one `POST /v1/throttle/all` carrying them all (no lease, no
    /// denial cache: a denial depends on every check's key, and one cached under the route's
    /// whole key set would answer for limits that may have freed since).
    fn start_all(&mut self, host: &mut dyn Host, route: &Route, line: &RequestLine) -> Next {
        host.remove_request_header(SHADOW_HEADER);
        host.remove_request_header(FAILURE_HEADER);
        let now = host.now_ns();
        let decision_id = self.worker.decision_id();
        let request = ThrottleAllRequest {
            checks: route
                .checks
                .iter()
                .map(|c| ThrottleCheck {
                    action: c.action.clone(),
                    key: route::extract_key(&c.key, line, host),
                    quantity: c.quantity.unwrap_or(route.quantity),
                })
                .collect(),
            // The backend starts no store step it cannot answer within this wait.
            timeout_ms: Some(self.config.backend.timeout_ms),
            // ... counted from here, when the backend could only read it late (a stall).
            sent_at_ms: Some(now / 1_000_000),
            decision_id: Some(decision_id),
        };
        let path = format!("{}/all", self.config.backend.path);
        let sent = serde_json::to_vec(&request)
            .map_err(|e| Failure::encode(&e.to_string()))
            .and_then(|body| self.send_http(host, &path, body));
        let pending = Pending {
            token: 0,
            action: route.action.clone(),
            action_index: route.action_index,
            quantity: route.quantity,
            sent_ns: now,
            asked: Asked::All(route.checks.iter().map(|c| c.action.clone()).collect()),
            decision_id: Some(decision_id),
        };
        self.started(host, route, sent, pending)
    }

    /// POSTs a JSON body to the backend at `path` (an HTTP callout, or an exchange with
    /// `protocol: grpc_stream`; both answer with a status and a body); `Err` as
    /// [`Flow::dispatch_http`].
    fn send_http(&self, host: &mut dyn Host, path: &str, body: Vec<u8>) -> Result<u32, Failure> {
        let backend = &self.config.backend;
        if backend.protocol == Protocol::GrpcStream {
            let call = ExchangeCall {
                path: path.to_owned(),
                body,
                timeout_ms: backend.timeout_ms,
            };
            return host.exchange(&call);
        }
        let call = Callout::post_json(
            &backend.cluster,
            path,
            &backend.authority,
            body,
            backend.timeout_ms,
        );
        host.dispatch(&call).map_err(|e| Failure::not_started(&e))
    }

    /// Starts the decision callout (an exchange, or an HTTP callout): it asks for a lease, or
    /// reserves under a commit id, as `holds` says. `Err` is the failure when it could not start.
    fn dispatch_http(
        &self,
        host: &mut dyn Host,
        action: &str,
        key: String,
        quantity: u64,
        holds: &Holds,
        decision_id: Option<u64>,
    ) -> Result<u32, Failure> {
        let (lease, reservation_id) = match holds {
            Holds::Nothing => (false, None),
            Holds::Lease(_) => (true, None),
            Holds::Cost(ask) => (false, Some(ask.id())),
        };
        let request = ThrottleRequest {
            action: action.to_owned(),
            key,
            quantity,
            lease,
            // The backend starts no store step it cannot answer within this wait.
            timeout_ms: Some(self.config.backend.timeout_ms),
            // ... counted from here, when the backend could only read it late (a stall).
            sent_at_ms: Some(host.now_ns() / 1_000_000),
            decision_id,
            reservation_id,
        };
        let body = serde_json::to_vec(&request).map_err(|e| Failure::encode(&e.to_string()))?;
        self.send_http(host, &self.config.backend.path, body)
    }

    /// Starts the gRPC callout (`ShouldRateLimit` with one descriptor); `Err` as above.
    fn dispatch_grpc(
        &self,
        host: &mut dyn Host,
        action: &str,
        key: &str,
        quantity: u64,
    ) -> Result<u32, Failure> {
        let backend = &self.config.backend;
        // The action was validated at configuration and the quantity bounded to 10^9.
        let message = Action::parse(action)
            .ok()
            .and_then(|a| crate::rls::request(&a, key, quantity))
            .ok_or_else(|| Failure::encode(&format!("action {action:?} x {quantity}")))?;
        let call = GrpcCall {
            service: backend.grpc_service.clone(),
            message,
            timeout_ms: backend.timeout_ms,
        };
        host.dispatch_grpc(&call)
            .map_err(|e| Failure::not_started(&e))
    }
}

mod answer;
mod cost;

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod cost_tests;

#[cfg(test)]
mod grpc_tests;

#[cfg(test)]
mod grpc_client_tests;

#[cfg(test)]
mod lease_tests;

#[cfg(test)]
mod all_tests;

#[cfg(test)]
mod stream_tests;

#[cfg(test)]
mod pocket_tests;

#[cfg(test)]
mod returns_tests;
