//! How a decision's answer ends a request: the callout's, the exchange's or the gRPC call's
//! answer classified ([`super::classify`]), then resume with the rate-limit headers, a 429 (and
//! the denial cache remembers it), or the failure mode. Split from `flow.rs` so that file keeps
//! the way in (route → key → lease → cache → callout) and this one the way out.

use crate::cache::{self, Entry};
use crate::config::{FailureMode, UnknownAction};
use crate::exchange::Outcome;
use crate::failure::mode::When;
use crate::failure::{self, Failure};
use crate::host::{Counter, Host};
use crate::lease::asking::LeaseAnswer;
use crate::lease::{self, Lease};
use crate::reply::{
    self, Reply, CACHE_HEADER, FAILURE_HEADER, SHADOW_HEADER, UNKNOWN_ACTION_HEADER,
};
use crate::report::Event;
use sluice_core::headers::{self, RateLimit};
use sluice_core::wire::{ThrottleAllResponse, ThrottleResponse};

use super::{
    classify, classify_all, unknown_check, Answer, DeniedBy, Flow, Holds, Next, Numbers, Pending,
};

impl Flow {
    /// The callout answered (or timed out: Envoy reports that as a 504).
    pub fn on_callout_response(
        &mut self,
        host: &mut dyn Host,
        token: u32,
        status: Option<&[u8]>,
        body: &[u8],
    ) {
        let several = self.pending.as_ref().is_some_and(|p| p.all().is_some());
        let protocol = self.config.backend.protocol;
        let answer = if several {
            classify_all(protocol, status, body)
        } else {
            classify(protocol, status, body)
        };
        if let (Answer::UnknownAction, Some(p)) = (&answer, self.pending.as_mut()) {
            // A route with all-or-nothing checks: the 404 names the check (`checks[i].action`), so the
            // reply names that action rather than the route's first.
            let named = unknown_check(body).and_then(|i| p.all()?.get(i).cloned());
            if let Some(action) = named {
                p.action = action;
            }
        }
        self.answered(host, token, answer);
    }

    /// An exchange answered (on the worker's stream, or as a unary call): the reply is read as
    /// an HTTP callout's answer; a failed call applies the failure mode.
    pub fn on_exchange_answer(&mut self, host: &mut dyn Host, token: u32, outcome: Outcome) {
        match outcome {
            Ok((status, body)) => {
                let status = status.to_string();
                self.on_callout_response(host, token, Some(status.as_bytes()), &body);
            }
            Err(failure) => self.on_failure(host, token, failure),
        }
    }

    /// The gRPC callout answered: `status` is its gRPC status (0 OK; a timeout is 4
    /// DEADLINE_EXCEEDED, a backend that is down 14 UNAVAILABLE), `message` the response.
    pub fn on_grpc_response(
        &mut self,
        host: &mut dyn Host,
        token: u32,
        status: u32,
        message: &[u8],
    ) {
        let answer = crate::rls::classify(status, message);
        self.answered(host, token, answer);
    }

    /// The callout `token` failed before any answer could be read (an exchange that timed out on
    /// the tick, a stream that closed, a unary call or gRPC callout that ended with a gRPC
    /// status): the failure mode applies, with the failure as classified.
    pub fn on_failure(&mut self, host: &mut dyn Host, token: u32, failure: Failure) {
        self.answered(host, token, Answer::Failure(failure));
    }

    pub(super) fn answered(&mut self, host: &mut dyn Host, token: u32, answer: Answer) {
        let Some(pending) = self.pending.take_if(|p| p.token == token) else {
            // An answer for no pending decision (its request was already decided, by a failure
            // or a timeout): a lease it carries was debited by the backend and is never stored.
            if let Answer::Decision(r) = &answer {
                let lost = Lease::of_answer(r, 0, 0, 0).map_or(0, |l| l.unspent_units());
                if lost > 0 {
                    host.count_by(Counter::LeaseUnitsLost, lost);
                }
            }
            host.warn(&format!(
                "sluice: callout response for unknown token {token}; ignored"
            ));
            return;
        };
        match answer {
            Answer::Decision(r) => self.decided(host, &pending, &r, Numbers::Exact),
            Answer::Estimated(r) => self.decided(host, &pending, &r, Numbers::Estimated),
            Answer::All(r) => self.decided_all(host, &pending, &r),
            Answer::UnknownAction => {
                host.count(Counter::UnknownAction);
                match self.config.unknown_action {
                    UnknownAction::Allow => {
                        self.response_headers
                            .push((UNKNOWN_ACTION_HEADER, "allow".to_owned()));
                        host.resume();
                    }
                    UnknownAction::Deny => Reply {
                        status: 403,
                        title: "Forbidden",
                        detail: format!(
                            "no rate-limit rule exists for action {:?}",
                            pending.action
                        ),
                        action: &pending.action,
                        grpc_status: reply::GRPC_UNKNOWN_ACTION_STATUS,
                        retry: None,
                        headers: vec![(UNKNOWN_ACTION_HEADER, "deny")],
                    }
                    .send(host),
                }
            }
            Answer::Failure(failure) => {
                // Sent, and not answered in time (or not at all): the backend may have decided
                // it anyway, after this worker stopped waiting. The report names it.
                if let Some(id) = pending.decision_id {
                    self.worker.gave_up(id);
                }
                let at = (pending.action_index, pending.action.as_str());
                let _ = self.fail(host, at, &failure, When::Later);
            }
        }
    }

    /// Response headers are on their way to the client: add the rate-limit headers (and, for a
    /// cost route whose actual cost is a response header, commit it).
    pub fn on_response_headers(&mut self, host: &mut dyn Host) {
        if let Some((i, limit)) = self.leased.take() {
            if let Some(route) = self.config.routes.get(i) {
                headers::render_each(&route.action, &limit, self.config.headers, &mut |n, v| {
                    host.add_response_header(n, v)
                });
            }
        }
        for (name, value) in std::mem::take(&mut self.response_headers) {
            host.add_response_header(name, value.as_bytes());
        }
        self.commit_on_headers(host);
    }

    /// A decision; one estimated without sluice's numbers is not cached.
    pub(super) fn decided(
        &mut self,
        host: &mut dyn Host,
        pending: &Pending,
        r: &ThrottleResponse,
        numbers: Numbers,
    ) {
        let mut limit = RateLimit::of(r);
        if !r.allowed {
            host.count(Counter::Denied);
            if numbers == Numbers::Exact {
                self.remember(host, pending, r);
            }
            self.deny(host, &pending.action, &limit, DeniedBy::Backend);
            return;
        }
        host.count(Counter::Allowed);
        self.reserved(host, pending);
        if let Holds::Lease(id) = pending.holds() {
            let now = host.now_ns();
            let grant_id = self.worker.next_grant_id();
            let granted = Lease::of_answer(r, pending.sent_ns, now, grant_id);
            let seen = match (&granted, r.would_deny) {
                (Some(_), _) => LeaseAnswer::Granted,
                (None, false) => LeaseAnswer::NoGrant {
                    remaining: r.remaining,
                },
                (None, true) => LeaseAnswer::Shadow,
            };
            self.worker.rule_leases().learn(pending.action_index, seen);
            if let Some(granted) = granted {
                let mut back = Vec::new();
                let slots = self.config.lease.slots;
                let stored = lease::table::store(host, id, slots, &granted, now, &mut back);
                // A fifth grant side by side is given back at once, not kept.
                let kept = stored && !back.iter().any(|b| b.grant.id == grant_id);
                if kept {
                    host.count(Counter::LeaseGrants);
                    for g in &granted.grants {
                        self.worker.watch().add(id, g.until_ns);
                    }
                    // What this Envoy can admit now: the backend's remaining (which excludes the
                    // lease) plus the units it just leased, as a leased admission reports it.
                    limit.remaining = limit.remaining.saturating_add(granted.live_units(now));
                }
                if !back.is_empty() {
                    self.worker.give_back(host, back);
                }
            }
        }
        self.response_headers = headers::render(&pending.action, &limit, self.config.headers);
        if r.would_deny {
            host.count(Counter::ShadowWouldDeny);
            host.set_request_header(SHADOW_HEADER, "would-deny");
            self.response_headers
                .push((SHADOW_HEADER, "would-deny".to_owned()));
        }
        host.resume();
    }

    /// The answer for a route with all-or-nothing checks: every policy in `RateLimit-Policy` and
    /// `RateLimit`, the most restrictive in `X-RateLimit-*` and `Retry-After`; a denial's
    /// problem+json names the check that denied.
    pub(super) fn decided_all(
        &mut self,
        host: &mut dyn Host,
        pending: &Pending,
        r: &ThrottleAllResponse,
    ) {
        let names = pending.all().unwrap_or_default();
        let denied = r.denied.as_ref().map(|d| d.index);
        if r.results.len() != names.len() || denied.is_some_and(|i| i >= names.len()) {
            let at = (pending.action_index, pending.action.as_str());
            let failure = Failure::bad_response("results that do not match the route's checks");
            let _ = self.fail(host, at, &failure, When::Later);
            return;
        }
        let policies: Vec<(&str, RateLimit)> = names
            .iter()
            .zip(&r.results)
            .map(|(name, result)| (name.as_str(), RateLimit::of(result)))
            .collect();
        let rendered = headers::render_all(&policies, denied, self.config.headers);
        if !r.allowed {
            host.count(Counter::Denied);
            let (action, retry) = denied
                .and_then(|i| policies.get(i))
                .map_or((pending.action.as_str(), None), |(name, limit)| {
                    (*name, limit.retry_after_ms)
                });
            let headers = rendered.iter().map(|(n, v)| (*n, v.as_str())).collect();
            Reply::denied(action, retry, self.config.grpc_denied_status, headers).send(host);
            return;
        }
        host.count(Counter::Allowed);
        self.response_headers = rendered;
        if r.results.iter().any(|x| x.would_deny) {
            host.count(Counter::ShadowWouldDeny);
            host.set_request_header(SHADOW_HEADER, "would-deny");
            self.response_headers
                .push((SHADOW_HEADER, "would-deny".to_owned()));
        }
        host.resume();
    }

    /// Stores a denial in the cache when it is exact to answer it locally (see `cache.rs`).
    pub(super) fn remember(&self, host: &mut dyn Host, pending: &Pending, r: &ThrottleResponse) {
        let Some(id) = pending.cached_as() else {
            return;
        };
        // `is_exact` is true for all six algorithms: an exhaustive guard (no wildcard), so a new
        // algorithm is not cached before its exactness is argued in cache.rs.
        if pending.quantity == 0 || !cache::is_exact(r.algorithm) {
            return;
        }
        let dc = &self.config.denial_cache;
        if let Some(entry) = Entry::of_denial(r, pending.sent_ns, host.now_ns(), dc.max_ttl_ms) {
            host.shared_set(&cache::slot_key(id, dc.slots), &cache::encode(&entry, id));
        }
    }

    pub(super) fn deny(
        &mut self,
        host: &mut dyn Host,
        action: &str,
        limit: &RateLimit,
        by: DeniedBy,
    ) {
        let rendered = headers::render(action, limit, self.config.headers);
        let mut headers: Vec<(&str, &str)> =
            rendered.iter().map(|(n, v)| (*n, v.as_str())).collect();
        if by == DeniedBy::Cache {
            headers.push((CACHE_HEADER, "hit"));
        }
        let grpc_status = self.config.grpc_denied_status;
        Reply::denied(action, limit.retry_after_ms, grpc_status, headers).send(host);
    }

    /// The backend could not decide: apply the failure mode, count the failure by reason and
    /// log it (at most one line per reason per 10 s on this worker, `failure::log`). `when`: inside
    /// the request-headers callback (answer with [`Next`]), or later, after a callout (resume or
    /// reply).
    pub(super) fn fail(
        &mut self,
        host: &mut dyn Host,
        (action_index, action): (usize, &str),
        failure: &Failure,
        when: When,
    ) -> Next {
        host.count(failure.reason.counter());
        let line = self
            .worker
            .failures()
            .request(failure, host.now_ns(), &self.config);
        if let Some(line) = line {
            host.warn(&line);
        }
        let reason = failure.header.as_str();
        let mode = self.config.failure_mode;
        self.worker
            .record(action_index, Event::failed(reason, mode));
        if mode == FailureMode::Allow {
            self.response_headers
                .push((FAILURE_HEADER, reason.to_owned()));
        }
        failure::mode::apply(&self.config, host, action, failure, when)
    }
}
