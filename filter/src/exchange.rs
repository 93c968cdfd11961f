//! The exchange client: one long-lived gRPC stream per worker to the backend's
//! `sluice.v1.DecisionExchange/Stream` (`protocol: grpc_stream`), carrying the decision API's
//! requests as messages ([`sluice_core::exchange`]).
//!
//! Why: an HTTP (or unary gRPC) callout makes Envoy open, route and tear down an upstream stream
//! per request; a message on a stream that is already open costs Envoy one DATA frame each way.
//!
//! How it fits proxy-wasm: a stream belongs to the root context that opened it (one per worker),
//! so answers arrive at the root; [`Exchanger`] remembers which request context waits for which
//! message id, and the root hands each answer to that context (`abi.rs` switches to it with
//! `set_effective_context`). Envoy has no per-message timeout on a stream, so the root's tick
//! answers overdue requests as timed out ([`Exchanger::expired`]), at most a tick late.
//!
//! While no stream is open (before the first tick, after the backend closed it, or when
//! [`MAX_WAITING`] requests are in flight) [`Exchanger::send`] declines and the caller makes the
//! same exchange as one unary call (`DecisionExchange/Call`): nothing is refused for lack of a
//! stream. A stream that closes fails every request waiting on it at once (as a refused callout:
//! the failure mode applies), and is reopened on a later tick, at most once per
//! [`REOPEN_PAUSE_NS`].

use std::collections::HashMap;

use prost::Message;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest};

/// Requests one worker may have waiting on its stream; past it, requests go as unary calls.
pub const MAX_WAITING: usize = 4096;

/// Shortest pause between two attempts to open the stream (after one closed or failed to open).
pub const REOPEN_PAUSE_NS: u64 = 1_000_000_000;

/// What the exchanger needs from the host: open a stream, send on it.
pub trait StreamHost {
    /// Opens the stream (`DecisionExchange/Stream`); its token, or why it could not open.
    fn open_stream(&mut self) -> Result<u32, String>;
    /// Sends one message on the open stream `token`.
    fn send_message(&mut self, token: u32, message: &[u8]) -> Result<(), String>;
    /// Logs a warning.
    fn warn(&mut self, message: &str);
}

/// A request context waiting for its answer: who to hand it to, and by when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<W> {
    /// The message id (the request's callout token).
    pub id: u32,
    /// Envoy's id of the request context (for `set_effective_context`).
    pub context_id: u32,
    /// Whoever takes the answer (the request's flow, in `abi.rs`).
    pub waiter: W,
    /// Past this time the request is answered as timed out.
    pub deadline_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    /// No stream; the next attempt to open one is not before this time.
    Closed { retry_at_ns: u64 },
    /// Open (Envoy's token).
    Open { token: u32 },
}

/// One worker's stream and the requests waiting on it.
#[derive(Debug)]
pub struct Exchanger<W> {
    stream: Stream,
    next_id: u32,
    waiting: HashMap<u32, Waiting<W>>,
}

impl<W> Default for Exchanger<W> {
    fn default() -> Self {
        Exchanger {
            stream: Stream::Closed { retry_at_ns: 0 },
            next_id: 1,
            waiting: HashMap::new(),
        }
    }
}

impl<W> Exchanger<W> {
    /// The open stream's token, if any.
    pub fn token(&self) -> Option<u32> {
        match self.stream {
            Stream::Open { token } => Some(token),
            Stream::Closed { .. } => None,
        }
    }

    /// Requests waiting for an answer.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Opens the stream if none is open and the pause after the last failure has passed (the
    /// root calls this on every tick). A stream that fails to open is retried after the pause.
    pub fn ensure_open(&mut self, host: &mut dyn StreamHost, now_ns: u64) {
        let Stream::Closed { retry_at_ns } = self.stream else {
            return;
        };
        if now_ns < retry_at_ns {
            return;
        }
        self.stream = match host.open_stream() {
            Ok(token) => Stream::Open { token },
            Err(e) => {
                host.warn(&format!(
                    "sluice: the decision exchange stream could not open ({e}); unary calls until it does"
                ));
                Stream::Closed {
                    retry_at_ns: now_ns.saturating_add(REOPEN_PAUSE_NS),
                }
            }
        };
    }

    /// Sends `POST {path}` with `body` on the stream for the request context `context_id`;
    /// `Some(id)` when sent (its answer comes back through [`Exchanger::on_message`] or
    /// [`Exchanger::expired`]), `None` when there is no open stream, the waiting table is full or
    /// the send failed: the caller then makes a unary call instead.
    pub fn send(
        &mut self,
        host: &mut dyn StreamHost,
        path: &str,
        body: Vec<u8>,
        context_id: u32,
        waiter: W,
        deadline_ns: u64,
    ) -> Option<u32> {
        let token = self.token()?;
        if self.waiting.len() >= MAX_WAITING {
            return None;
        }
        let id = self.fresh_id();
        let message = ExchangeRequest {
            id: u64::from(id),
            path: path.to_owned(),
            body,
        }
        .encode_to_vec();
        if let Err(e) = host.send_message(token, &message) {
            // The stream is unusable; the close callback (if any) finds nothing of ours waiting.
            host.warn(&format!(
                "sluice: sending on the decision exchange stream failed ({e}); reopening"
            ));
            self.stream = Stream::Closed { retry_at_ns: 0 };
            return None;
        }
        self.waiting.insert(
            id,
            Waiting {
                id,
                context_id,
                waiter,
                deadline_ns,
            },
        );
        Some(id)
    }

    /// An id not waiting now (ids wrap; 0 is never used).
    fn fresh_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.waiting.contains_key(&id) {
                return id;
            }
        }
    }

    /// A message arrived on stream `token`: the waiting request it answers and the answer, or
    /// `None` for a message that does not decode or answers no one (already timed out).
    pub fn on_message(&mut self, token: u32, bytes: &[u8]) -> Option<(Waiting<W>, ExchangeReply)> {
        if self.token() != Some(token) {
            return None;
        }
        let reply = ExchangeReply::decode(bytes).ok()?;
        let id = u32::try_from(reply.id).ok()?;
        let waiting = self.waiting.remove(&id)?;
        Some((waiting, reply))
    }

    /// Stream `token` closed (the backend went away, or Envoy gave up on it): every request
    /// waiting on it, to be failed now. The stream is reopened on a tick after the pause.
    pub fn on_close(&mut self, token: u32, now_ns: u64) -> Vec<Waiting<W>> {
        if self.token() != Some(token) {
            return Vec::new();
        }
        self.stream = Stream::Closed {
            retry_at_ns: now_ns.saturating_add(REOPEN_PAUSE_NS),
        };
        let mut failed: Vec<Waiting<W>> = self.waiting.drain().map(|(_, w)| w).collect();
        failed.sort_by_key(|w| w.id);
        failed
    }

    /// Requests whose deadline has passed at `now_ns`, removed: to be answered as timed out.
    pub fn expired(&mut self, now_ns: u64) -> Vec<Waiting<W>> {
        let overdue: Vec<u32> = self
            .waiting
            .values()
            .filter(|w| w.deadline_ns <= now_ns)
            .map(|w| w.id)
            .collect();
        let mut expired: Vec<Waiting<W>> = overdue
            .iter()
            .filter_map(|id| self.waiting.remove(id))
            .collect();
        expired.sort_by_key(|w| w.id);
        expired
    }
}

#[cfg(test)]
mod tests;
