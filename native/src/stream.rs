//! `protocol: grpc_stream` over one long-lived exchange stream per configuration, on Envoy's
//! main thread (the native build's counterpart of the wasm build's per-worker stream).
//!
//! The dynamic-module ABI gives a worker no stream that outlives its request: a filter's
//! `start_http_stream` ends with the request, and the configuration's
//! `http_filter_config_start_http_stream` runs on the main thread only. So one stream,
//! `sluice.v1.DecisionExchange/Stream` (gRPC framing written by hand), is kept by the main thread,
//! and each decision makes two thread hops:
//!
//! 1. the worker registers the decision in the shared [`Exchanger`] (the wasm build's
//!    host-independent waiting table, ids, deadlines, backoff and probes) and appends its frame to
//!    the outbox; the first frame of a batch wakes the main thread (the configuration's
//!    scheduler, [`STREAM_EVENT`]);
//! 2. the main thread writes the whole outbox as one DATA frame on the stream;
//! 3. a reply frame arrives on the main thread, which puts it in the waiting request's
//!    [`Mailbox`] and commits that request's own scheduler;
//! 4. the worker's `on_http_filter_scheduled` hands it to the request's flow (resume or reply).
//!
//! A request gone before its answer: Envoy's filter scheduler holds a weak pointer to its filter
//! and does nothing once the filter is destroyed, and the mailbox (owning the scheduler) lives
//! as long as either side holds it, so a late commit is safe and the answer is dropped.
//!
//! Everything else is the wasm build's: no stream (before the first open, after a close, or with
//! `exchange::MAX_WAITING` waiting) sends the decision as a unary `DecisionExchange/Call`; a
//! stream that closes or is refused fails its waiters at once (their failure mode applies) and
//! is reopened after 100 ms doubling to 5 s; while it is down for a reason that persists,
//! requests fail at once except one unary probe per backoff interval.
//!
//! Deadlines and reopens are kept by a timer thread ([`Timer`]) that wakes the main thread only
//! when one is due: a worker that puts a decision on the stream arms it for that decision's
//! deadline; while decisions are waiting, each turn arms it again one tick later (the tick:
//! `backend.timeout_ms / 4`, at least 5 ms), so an overdue decision fails within a tick of its
//! deadline; a closed stream arms it for the end of its backoff ([`reopen_pause`]); an open
//! stream with nothing waiting disarms it. An idle Envoy's main thread is not woken at all
//! (`timer.rs` says why no wake-up is lost to a race).

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sluice_filter::config::{Config, Protocol};
use sluice_filter::exchange::{Exchanger, Outcome, Route, Waiting};
use sluice_filter::failure::log::FailureLog;
use sluice_filter::failure::{grpc, Failure};
use sluice_filter::host::Counter;

use crate::abi::{self, ConfigHandle, FilterScheduler, Level, Scheduler};
use crate::timer::{now_ns, Alarm, Timer};

mod pace;
mod wire;

use pace::{next_turn, reopen_pause, Link};
use wire::{split_frames, Opener, Queue};

/// The configuration scheduler's event for the stream's turn on the main thread (0 is the
/// count reports' timer).
pub const STREAM_EVENT: u64 = 1;

/// Envoy's stream reset reason `LocalReset` (ABI v0.2.0, `AsyncClient::StreamResetReason`): a
/// reset Envoy made itself, not one the backend or the connection caused.
const LOCAL_RESET: u32 = 2;

/// Whether `grpc_stream` decisions go over the main thread's stream when the filter's name does
/// not say (`filter_name` ending in `/stream` or `/unary`). The stream is the default: in one
/// callgrind run (benches/envoy/callgrind.sh) an allowed decision cost Envoy 324.4k instructions
/// per request over it, against 411.6k as a unary exchange and 401.8k over the HTTP callout.
pub const DEFAULT_STREAM: bool = true;

/// Whether the configuration named `name` sends its decisions over the main thread's stream.
pub fn wanted(name: &[u8], config: &Config) -> bool {
    if config.backend.protocol != Protocol::GrpcStream {
        return false;
    }
    if name.ends_with(b"/unary") {
        false
    } else if name.ends_with(b"/stream") {
        true
    } else {
        DEFAULT_STREAM
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a stream's close is said in Envoy's log as the failure log's warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    /// The failure log's warning line (at most one per reason per 10 s), with the fix.
    Warn,
    /// No warning: Envoy closed the stream itself (said at info level before).
    Quiet,
}

/// One request's way back from the main thread: its deliveries and its own scheduler.
#[derive(Debug)]
pub struct Mailbox {
    scheduler: FilterScheduler,
    inbox: Mutex<Vec<(u32, Outcome)>>,
}

impl Mailbox {
    /// A mailbox committing `scheduler` (the request's).
    pub fn new(scheduler: FilterScheduler) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            scheduler,
            inbox: Mutex::new(Vec::new()),
        })
    }

    /// Hands `what` for message `id` to the request (any thread): the decision route's status
    /// and body, or the failure that applies (timeout, the stream closed).
    fn post(&self, id: u32, what: Outcome) {
        locked(&self.inbox).push((id, what));
        self.scheduler.commit(u64::from(id));
    }

    /// What arrived (the request's worker, in `on_http_filter_scheduled`).
    pub fn take(&self) -> Vec<(u32, Outcome)> {
        std::mem::take(&mut *locked(&self.inbox))
    }
}

type Waiter = Waiting<Arc<Mailbox>>;

/// The shared state: the exchanger, the frames not yet written, the reply bytes not yet a frame.
#[derive(Debug)]
struct State {
    ex: Exchanger<Arc<Mailbox>>,
    /// Frames for stream `outbox_token`, written by the main thread's next turn.
    outbox: Vec<u8>,
    outbox_token: Option<u32>,
    /// The main thread has been asked for a turn it has not taken yet.
    wake_pending: bool,
    /// When the closed stream is due to reopen (see [`reopen_pause`]); 0 when not known.
    reopen_at_ns: u64,
    /// Reply bytes of the open stream not yet a whole frame.
    inbound: Vec<u8>,
    /// The gRPC status seen on the open stream (trailers, or a trailers-only answer).
    status: Option<(u32, Option<String>)>,
    /// The stream's failures (refused, closed), logged as the wasm build's root logs its
    /// stream's: one line per reason per 10 s, with the fix.
    log: FailureLog,
}

/// One configuration's exchange stream, shared by its workers and the main thread.
#[derive(Debug)]
pub struct MainStream {
    config: Config,
    cluster: String,
    authority: String,
    state: Mutex<State>,
    wake: Arc<Scheduler>,
    timer: Mutex<Option<Timer>>,
    /// Asks the timer for a turn at a deadline or a reopen; armed and disarmed under `state`.
    alarm: Alarm,
    /// The deadline check's tick: `backend.timeout_ms / 4`, at least 5 ms, in ns.
    tick_ns: u64,
}

impl MainStream {
    /// The stream of `config`, woken through `scheduler` (a configuration scheduler of its own).
    pub fn new(scheduler: Scheduler, config: &Config) -> MainStream {
        let wake = Arc::new(scheduler);
        let tick = Duration::from_millis((config.backend.timeout_ms / 4).max(5));
        let ticker = Arc::clone(&wake);
        let timer = Timer::start("sluice-stream", tick, move || ticker.commit(STREAM_EVENT));
        let alarm = timer.alarm();
        // The first turn opens the stream.
        wake.commit(STREAM_EVENT);
        MainStream {
            config: config.clone(),
            cluster: config.backend.cluster.clone(),
            authority: config.backend.authority.clone(),
            state: Mutex::new(State {
                ex: Exchanger::default(),
                outbox: Vec::new(),
                outbox_token: None,
                wake_pending: true,
                reopen_at_ns: 0,
                inbound: Vec::new(),
                status: None,
                log: FailureLog::default(),
            }),
            wake,
            timer: Mutex::new(Some(timer)),
            alarm,
            tick_ns: u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Stops the timer (the configuration goes away; main thread).
    pub fn stop(&self) {
        drop(locked(&self.timer).take());
    }

    /// A worker sends `POST {path}` with `body` for the request whose mailbox is `mailbox`;
    /// see [`Route`]. A frame goes out on the main thread's next turn.
    pub fn send(
        &self,
        path: &str,
        body: Vec<u8>,
        mailbox: &Arc<Mailbox>,
        deadline_ns: u64,
        now_ns: u64,
    ) -> Route {
        let mut guard = locked(&self.state);
        let State {
            ex,
            outbox,
            outbox_token,
            wake_pending,
            reopen_at_ns,
            ..
        } = &mut *guard;
        let backoff = ex.backoff_ns();
        let sent = ex.send(
            &mut Queue {
                outbox,
                token: outbox_token,
            },
            path,
            body,
            0,
            Arc::clone(mailbox),
            deadline_ns,
            now_ns,
        );
        if let Route::Stream(_) = sent.route {
            // Its deadline is kept from now on (under the lock: see `timer.rs`).
            self.alarm.arm_at(deadline_ns);
        }
        if sent.orphaned.is_some() {
            // The send failed and gave up the stream: it reopens after its backoff.
            *reopen_at_ns = now_ns.saturating_add(reopen_pause(backoff, ex.backoff_ns()));
            self.alarm.arm_at(*reopen_at_ns);
        }
        // A stream that is not open is opened on the main thread's next turn (after its backoff).
        let wake = !std::mem::replace(wake_pending, true);
        drop(guard);
        if wake {
            self.wake.commit(STREAM_EVENT);
        }
        if let Some((failure, orphans)) = sent.orphaned {
            fail_all(orphans, &failure);
        }
        sent.route
    }

    /// A unary exchange ended (its probes end the down state). An answer while the stream is
    /// closed brings its reopen forward to now: the main thread's turn comes at once.
    pub fn on_unary(&self, result: Result<(), &Failure>, now_ns: u64) {
        let mut st = locked(&self.state);
        st.ex.on_unary(result, now_ns);
        if result.is_ok() && st.ex.token().is_none() {
            st.reopen_at_ns = now_ns;
            self.alarm.arm_at(now_ns);
        }
    }

    /// The main thread's turn: open the stream if due, time out overdue requests, write the
    /// outbox.
    pub fn turn(&self, handle: ConfigHandle, counters: &[Option<usize>]) {
        let now = now_ns();
        let (refused, opened, expired, frames) = {
            let mut st = locked(&self.state);
            st.wake_pending = false;
            let was_open = st.ex.token().is_some();
            let backoff = st.ex.backoff_ns();
            let refused = st.ex.ensure_open(
                &mut Opener {
                    handle,
                    cluster: &self.cluster,
                    authority: &self.authority,
                },
                now,
            );
            if refused.is_some() {
                st.reopen_at_ns = now.saturating_add(backoff);
            }
            let opened = if !was_open { st.ex.token() } else { None };
            if opened.is_some() {
                st.inbound.clear();
                st.status = None;
            }
            let expired = st.ex.expired(now);
            let frames = match (st.outbox_token, st.ex.token()) {
                (Some(t), Some(open)) if t == open && !st.outbox.is_empty() => {
                    Some((t, std::mem::take(&mut st.outbox)))
                }
                _ => {
                    st.outbox.clear();
                    None
                }
            };
            // The next turn, if anything is left for one (under the lock: see `timer.rs`).
            let link = if st.ex.token().is_some() {
                Link::Open
            } else {
                Link::Closed
            };
            match next_turn(link, st.ex.waiting(), st.reopen_at_ns, now, self.tick_ns) {
                Some(at) => self.alarm.arm_at(at),
                None => self.alarm.disarm(),
            }
            (refused, opened, expired, frames)
        };
        if opened.is_some() {
            count(handle, counters, Counter::ExchangeStreamsOpened);
        }
        if let Some(failure) = refused {
            self.note(&failure, now);
        }
        fail_all(expired, &Failure::timed_out());
        if let Some((token, bytes)) = frames {
            if !handle.stream_send_data(u64::from(token), &bytes) {
                self.close(
                    handle,
                    counters,
                    token,
                    grpc::UNAVAILABLE,
                    Some("sending on the exchange stream failed".to_owned()),
                    Note::Warn,
                );
            }
        }
    }

    /// Response headers or trailers of stream `id`: a gRPC status, or an HTTP status that is not
    /// 200 (no gRPC server answered), is kept for its end.
    pub fn on_headers(&self, id: u64, headers: &[(Vec<u8>, Vec<u8>)]) {
        let Ok(token) = u32::try_from(id) else {
            return;
        };
        let value = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name.as_bytes()))
                .map(|(_, v)| v.as_slice())
        };
        let status = if let Some(code) = value("grpc-status") {
            let message = value("grpc-message").map(|m| String::from_utf8_lossy(m).into_owned());
            Some((grpc::parse_status(code), message))
        } else {
            match value(":status") {
                None | Some(b"200") => None,
                other => {
                    let (code, seen) = grpc::of_http_status(other);
                    Some((code, Some(seen)))
                }
            }
        };
        if let Some(status) = status {
            let mut st = locked(&self.state);
            if st.ex.token() == Some(token) {
                st.status = Some(status);
            }
        }
    }

    /// Data on stream `id`: every whole reply frame is handed to its request.
    pub fn on_data(&self, handle: ConfigHandle, counters: &[Option<usize>], id: u64, bytes: &[u8]) {
        let Ok(token) = u32::try_from(id) else {
            return;
        };
        let mut answered = Vec::new();
        let mut bad = false;
        {
            let mut st = locked(&self.state);
            if st.ex.token() != Some(token) {
                return;
            }
            st.inbound.extend_from_slice(bytes);
            let inbound = std::mem::take(&mut st.inbound);
            let (messages, rest) = split_frames(&inbound);
            for message in messages {
                if let Some((waiting, reply)) = st.ex.on_message(token, message) {
                    answered.push((waiting, reply));
                }
            }
            match rest {
                Some(rest) => st.inbound = rest.to_vec(),
                None => bad = true,
            }
            if !bad && st.ex.waiting() == 0 {
                // Every decision answered: no deadline left to keep (the stream is open).
                self.alarm.disarm();
            }
        }
        for (waiting, reply) in answered {
            waiting
                .waiter
                .post(waiting.id, Ok((reply.status, reply.body)));
        }
        if bad {
            // Closed (and said) before the reset, so that a reset callback Envoy makes from inside
            // `reset_http_stream` finds the stream over and is not taken for Envoy's own close.
            self.close(
                handle,
                counters,
                token,
                grpc::UNKNOWN,
                Some("a compressed or oversized frame on the exchange stream".to_owned()),
                Note::Warn,
            );
            handle.reset_http_stream(id);
        }
    }

    /// Stream `id` ended: completed (`reset` none) or reset with Envoy's reason.
    pub fn on_end(
        &self,
        handle: ConfigHandle,
        counters: &[Option<usize>],
        id: u64,
        reset: Option<u32>,
    ) {
        let Ok(token) = u32::try_from(id) else {
            return;
        };
        let seen = {
            let st = locked(&self.state);
            if st.ex.token() == Some(token) {
                st.status.clone()
            } else {
                None
            }
        };
        if seen.is_none() && reset == Some(LOCAL_RESET) {
            // Envoy reset the stream itself: at shutdown (before the configuration goes), or when
            // the cluster is removed. Not the backend failing: no warning. The waiters still fail
            // now and the stream reopens if Envoy goes on (a missing cluster is then said).
            abi::log(
                Level::Info,
                &format!(
                    "sluice: Envoy closed the exchange stream to cluster \"{}\" (shutdown or the cluster removed)",
                    self.cluster
                ),
            );
            let message = Some("Envoy closed the exchange stream".to_owned());
            self.close(
                handle,
                counters,
                token,
                grpc::UNAVAILABLE,
                message,
                Note::Quiet,
            );
            return;
        }
        let (code, message) = match (seen, reset) {
            (Some(status), _) => status,
            (None, Some(reason)) => (
                grpc::UNAVAILABLE,
                Some(format!("the exchange stream was reset (reason {reason})")),
            ),
            (None, None) => (
                grpc::UNKNOWN,
                Some("the exchange stream ended without a gRPC status".to_owned()),
            ),
        };
        self.close(handle, counters, token, code, message, Note::Warn);
    }

    /// Stream `token` is over: its waiters fail now; the current stream reopens after backoff;
    /// Envoy's log says why (the failure log's line) when `note` is [`Note::Warn`].
    fn close(
        &self,
        handle: ConfigHandle,
        counters: &[Option<usize>],
        token: u32,
        code: u32,
        message: Option<String>,
        note: Note,
    ) {
        let now = now_ns();
        let closed = {
            let mut st = locked(&self.state);
            let backoff = st.ex.backoff_ns();
            let closed = st.ex.on_close(token, code, message.as_deref(), now);
            if closed.current {
                // Reopened after its backoff: the turn is asked for then.
                st.reopen_at_ns = now.saturating_add(reopen_pause(backoff, st.ex.backoff_ns()));
                self.alarm.arm_at(st.reopen_at_ns);
                st.inbound.clear();
                st.status = None;
                if st.outbox_token == Some(token) {
                    st.outbox.clear();
                }
            }
            closed
        };
        if closed.current {
            count(handle, counters, Counter::ExchangeStreamsClosed);
            if note == Note::Warn {
                self.note(&closed.failure, now);
            }
        }
        fail_all(closed.waiting, &closed.failure);
    }

    /// The stream could not open or closed: Envoy's log says why (the failure log's line).
    fn note(&self, failure: &Failure, now: u64) {
        let line = locked(&self.state).log.stream(failure, now, &self.config);
        if let Some(line) = line {
            abi::log(Level::Warn, &line);
        }
    }
}

fn fail_all(waiting: Vec<Waiter>, failure: &Failure) {
    for w in waiting {
        w.waiter.post(w.id, Err(failure.clone()));
    }
}

fn count(handle: ConfigHandle, counters: &[Option<usize>], counter: Counter) {
    if let Some(Some(id)) = counters.get(counter.index()) {
        handle.increment(*id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_the_grpc_stream_default_and_the_filter_name_picks() {
        let config = Config::from_json(
            br#"{"backend": {"cluster": "c"}, "routes": [{"action": "a", "key": {"source": "header", "name": "x"}}]}"#,
        )
        .unwrap();
        assert_eq!(config.backend.protocol, Protocol::GrpcStream);
        assert!(wanted(b"sluice", &config));
        assert!(wanted(b"sluice/stream", &config));
        assert!(!wanted(b"sluice/unary", &config));
        let http = Config::from_json(
            br#"{"backend": {"cluster": "c", "protocol": "http"}, "routes": [{"action": "a", "key": {"source": "header", "name": "x"}}]}"#,
        )
        .unwrap();
        assert!(!wanted(b"sluice/stream", &http));
    }
}
