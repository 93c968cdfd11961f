//! A worker's commits of cost reservations (`POST /v1/commit`), sent from the root context.
//!
//! Why from the root: a commit is due when the response ends, just before Envoy deletes the
//! request's context, and a callout made from that context would be cancelled with it. So the
//! request queues the commit on its worker ([`crate::report::Worker`]) and the root's tick sends
//! it (as a unary exchange with `protocol: grpc_stream`, an HTTP callout to `backend.cluster` with
//! `http`), at most a tick after the response ended.
//!
//! A commit that fails (no answer, a timeout, a 5xx, a callout that could not start) is sent
//! again at the next tick with the same id, at most [`COMMIT_ATTEMPTS`] times in all: the backend
//! applies one id once, so a copy whose first twin was applied changes nothing. A commit refused
//! with a 4xx is not sent again (the same body would be refused again). A commit given up leaves
//! the reservation debited (never more than the request asked for: the budget holds), counted in
//! `sluice.cost_commits_failed`.
//!
//! The same queue gives leased units back (`lease::returns`: a grant's commit, pushed with
//! [`Commits::push_return`]): an accepted one adds its units to `sluice.lease_units_returned`, one
//! given up adds them to `sluice.lease_units_lost` (debited, never spent, not given back).

use std::collections::{HashMap, VecDeque};

use sluice_core::wire::CommitRequest;

use crate::config::{Config, Protocol};
use crate::host::{Callout, Counter, ExchangeCall, Host};

/// The decision API's commit path.
pub const COMMIT_PATH: &str = "/v1/commit";

/// Attempts per commit (the first and the retries), all with the same id.
pub const COMMIT_ATTEMPTS: u32 = 4;

/// Commits one worker may hold (queued and in flight); past it a commit is given up (counted).
pub const MAX_COMMITS: usize = 4096;

/// How long one commit attempt may take, in ms (a commit is off the request path).
pub const COMMIT_TIMEOUT_MS: u64 = 1000;

/// One commit and the attempts it has had.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Queued {
    request: CommitRequest,
    attempts: u32,
    /// A lease return (`lease::returns`): the units it gives back.
    returning: Option<u64>,
}

/// A worker's commits: waiting for the next tick, and sent (awaiting their answer) by callout token.
#[derive(Debug, Default)]
pub struct Commits {
    queue: VecDeque<Queued>,
    sent: HashMap<u32, Queued>,
    /// The next number of this worker's commit ids.
    next: u64,
    /// A commit was given up since the last one accepted (so it is logged once, not per commit).
    failing: bool,
}

impl Commits {
    /// A fresh commit id: the worker's reporter id (128 random bits) and a counter, unique per
    /// request. Not the client's `x-request-id`: a client repeating one would make the backend
    /// skip its later commits as duplicates, and with them their extra debits.
    pub fn next_id(&mut self, reporter: &str) -> String {
        self.next = self.next.wrapping_add(1);
        format!("{reporter}:{}", self.next)
    }

    /// Commits queued, or sent and not yet answered.
    pub fn queued_or_sent(&self) -> usize {
        self.queue.len() + self.sent.len()
    }

    /// Queues a commit for the next tick; given up (counted) when the worker holds too many.
    pub fn push(&mut self, host: &mut dyn Host, request: CommitRequest) {
        self.enqueue(host, request, None);
    }

    /// Queues a lease return giving `units` back (`lease::returns`), as [`Commits::push`].
    pub fn push_return(&mut self, host: &mut dyn Host, request: CommitRequest, units: u64) {
        self.enqueue(host, request, Some(units));
    }

    fn enqueue(&mut self, host: &mut dyn Host, request: CommitRequest, returning: Option<u64>) {
        let q = Queued {
            request,
            attempts: 0,
            returning,
        };
        if self.queued_or_sent() >= MAX_COMMITS {
            self.give_up(host, &q, "could not be queued (too many commits waiting)");
            return;
        }
        self.queue.push_back(q);
    }

    /// Sends every queued commit (the root's tick).
    pub fn send(&mut self, host: &mut dyn Host, config: &Config) {
        let queued: Vec<Queued> = self.queue.drain(..).collect();
        for mut q in queued {
            q.attempts += 1;
            q.request.sent_at_ms = Some(host.now_ns() / 1_000_000);
            q.request.timeout_ms = Some(COMMIT_TIMEOUT_MS);
            match start(host, config, &q.request) {
                Ok(token) => {
                    self.sent.insert(token, q);
                }
                Err(e) => self.retry(host, q, &format!("could not start: {e}")),
            }
        }
    }

    /// The answer to callout `token`, if it is a commit's (`status` is `:status`; a timeout
    /// arrives as 504 or without one). `false`: not a commit's token.
    pub fn answered(&mut self, host: &mut dyn Host, token: u32, status: Option<&[u8]>) -> bool {
        let Some(q) = self.sent.remove(&token) else {
            return false;
        };
        let status = status.and_then(|s| std::str::from_utf8(s).ok());
        match status {
            Some(s) if s.len() == 3 && s.starts_with('2') => {
                match q.returning {
                    Some(units) => host.count_by(Counter::LeaseUnitsReturned, units),
                    None => host.count(Counter::CostCommits),
                }
                self.failing = false;
            }
            Some(s) if s.len() == 3 && s.starts_with('4') => {
                self.give_up(host, &q, &format!("was refused with status {s}"));
            }
            other => {
                let why = format!("answered status {}", other.unwrap_or("none"));
                self.retry(host, q, &why);
            }
        }
        true
    }

    /// A failed attempt: queued again for the next tick (same id), or given up after
    /// [`COMMIT_ATTEMPTS`].
    fn retry(&mut self, host: &mut dyn Host, q: Queued, why: &str) {
        if q.attempts >= COMMIT_ATTEMPTS {
            self.give_up(host, &q, &format!("{why} ({} attempts)", q.attempts));
            return;
        }
        if q.returning.is_none() {
            host.count(Counter::CostCommitRetries);
        }
        self.queue.push_back(q);
    }

    fn give_up(&mut self, host: &mut dyn Host, q: &Queued, why: &str) {
        let line = match q.returning {
            Some(units) => {
                host.count_by(Counter::LeaseUnitsLost, units);
                format!("sluice: a lease return {why}; its units stay debited (sluice.lease_units_lost counts them)")
            }
            None => {
                host.count(Counter::CostCommitsFailed);
                format!("sluice: a cost commit {why}; its reservation stays debited (sluice.cost_commits_failed counts them)")
            }
        };
        if !std::mem::replace(&mut self.failing, true) {
            host.warn(&line);
        }
    }
}

/// Starts one commit: an exchange with `protocol: grpc_stream`, an HTTP callout with `http`.
fn start(host: &mut dyn Host, config: &Config, request: &CommitRequest) -> Result<u32, String> {
    let body = serde_json::to_vec(request).map_err(|e| format!("encode: {e}"))?;
    let backend = &config.backend;
    match backend.protocol {
        Protocol::GrpcStream => host
            .exchange(&ExchangeCall {
                path: COMMIT_PATH.to_owned(),
                body,
                timeout_ms: COMMIT_TIMEOUT_MS,
            })
            .map_err(|f| format!("{} ({})", f.reason.name(), f.seen)),
        Protocol::Http => host.dispatch(&Callout::post_json(
            &backend.cluster,
            COMMIT_PATH,
            &backend.authority,
            body,
            COMMIT_TIMEOUT_MS,
        )),
        // Refused at configuration (`routes[i].cost`): RLS has no commit.
        Protocol::Grpc => Err("backend.protocol grpc cannot commit".to_owned()),
    }
}

#[cfg(test)]
mod tests;
