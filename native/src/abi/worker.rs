//! One Envoy worker's state ([`LocalState`]: the configuration as the flows hold it, the
//! worker's counts, pockets and failure log, and the flows of its requests in progress), behind
//! the one lock that makes it reachable from Envoy's main thread ([`WorkerBound`]), which sends
//! the worker's count reports on a timer (the ABI gives a worker no timer).
//!
//! Why this module is the invariant's only keeper: the state holds `Rc`s and `RefCell`s (the
//! flow library is single-threaded, as the proxy-wasm host is), so sharing it across threads is
//! sound only while no clone of those `Rc`s exists outside the lock. Everything that could hand
//! one out is private here: [`LocalState`]'s fields, the flows (reached only through
//! [`FlowRef`], which forwards the flow's steps and never lends the flow itself: a `&mut Flow`
//! could be swapped out with `mem::replace`, `Rc`s and all), and the `Rc`s are made and dropped
//! only inside. [`Config`] and [`Worker`] hold no `Rc`. Code outside this module cannot break
//! the invariant with safe code, and is itself `forbid(unsafe_code)` (`scripts/lint.sh`).

use std::rc::Rc;
use std::sync::{Mutex, MutexGuard, PoisonError};

use sluice_filter::config::Config;
use sluice_filter::exchange::Outcome;
use sluice_filter::failure::Failure;
use sluice_filter::flow::{Flow, Next};
use sluice_filter::host::Host;
use sluice_filter::report::Worker;
use sluice_filter::route::RequestLine;

/// One worker's state for one configuration.
#[derive(Debug)]
pub struct LocalState {
    config: Rc<Config>,
    worker: Rc<Worker>,
    /// The flows of the worker's requests in progress (a slab: `None` is a free slot).
    flows: Vec<Option<Flow>>,
    free: Vec<usize>,
}

impl LocalState {
    /// The state of a worker that has seen no request of `config` yet.
    pub fn new(config: &Config) -> LocalState {
        LocalState {
            config: Rc::new(config.clone()),
            worker: Rc::new(Worker::new(config)),
            flows: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The configuration, as the flows hold it.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The worker's counts, pockets, commits and failure log.
    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// A new request's flow; its slot.
    pub fn start_flow(&mut self) -> usize {
        let flow = Flow::with_worker(Rc::clone(&self.config), Rc::clone(&self.worker));
        match self.free.pop() {
            Some(slot) => {
                if let Some(s) = self.flows.get_mut(slot) {
                    *s = Some(flow);
                }
                slot
            }
            None => {
                self.flows.push(Some(flow));
                self.flows.len() - 1
            }
        }
    }

    /// The flow in `slot`, to run one of its steps.
    pub fn flow(&mut self, slot: usize) -> Option<FlowRef<'_>> {
        match self.flows.get_mut(slot) {
            Some(Some(flow)) => Some(FlowRef(flow)),
            _ => None,
        }
    }

    /// Ends the flow in `slot`: its end step runs (`Flow::on_end`, unless `run_end` is false:
    /// its state is whatever a failure left), then it is dropped, here, and the slot is free.
    pub fn end_flow(&mut self, slot: usize, host: Option<&mut dyn Host>) {
        let Some(mut flow) = self.flows.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if let Some(host) = host {
            flow.on_end(host);
        }
        drop(flow);
        self.free.push(slot);
    }
}

/// One request's flow, borrowed under the lock: its steps, never the flow itself.
#[derive(Debug)]
pub struct FlowRef<'a>(&'a mut Flow);

impl FlowRef<'_> {
    /// `Flow::on_request_line`.
    pub fn on_request_line(&mut self, host: &mut dyn Host, line: &RequestLine) -> Next {
        self.0.on_request_line(host, line)
    }

    /// `Flow::on_response_headers`.
    pub fn on_response_headers(&mut self, host: &mut dyn Host) {
        self.0.on_response_headers(host);
    }

    /// `Flow::on_response_trailers`.
    pub fn on_response_trailers(&mut self, host: &mut dyn Host) {
        self.0.on_response_trailers(host);
    }

    /// `Flow::on_callout_response`.
    pub fn on_callout_response(
        &mut self,
        host: &mut dyn Host,
        token: u32,
        status: Option<&[u8]>,
        body: &[u8],
    ) {
        self.0.on_callout_response(host, token, status, body);
    }

    /// `Flow::on_grpc_response`.
    pub fn on_grpc_response(&mut self, host: &mut dyn Host, token: u32, status: u32, body: &[u8]) {
        self.0.on_grpc_response(host, token, status, body);
    }

    /// `Flow::on_exchange_answer`.
    pub fn on_exchange_answer(&mut self, host: &mut dyn Host, token: u32, outcome: Outcome) {
        self.0.on_exchange_answer(host, token, outcome);
    }

    /// `Flow::on_failure`.
    pub fn on_failure(&mut self, host: &mut dyn Host, token: u32, failure: Failure) {
        self.0.on_failure(host, token, failure);
    }
}

/// A worker's [`LocalState`], reachable from the main thread for its reports. Every access, the
/// worker's own included, goes through [`WorkerBound::lock`]: the worker takes it once per hook
/// (uncontended but for the main thread's turn, once per report period), so no lock is shared
/// between workers.
#[derive(Debug)]
pub struct WorkerBound(Mutex<LocalState>);

// SAFETY: `LocalState` is not `Send`/`Sync` only because of the `Rc`s and `RefCell`s inside it.
// Every `Rc` it holds (the flows' included) is made, kept and dropped inside it, and this module
// lends none out (see the module's doc): no clone exists outside the mutex, and the mutex
// serialises every access (reference counts included) across the worker and the main thread.
unsafe impl Send for WorkerBound {}
// SAFETY: as above.
unsafe impl Sync for WorkerBound {}

impl WorkerBound {
    /// Wraps one worker's state.
    pub fn new(state: LocalState) -> WorkerBound {
        WorkerBound(Mutex::new(state))
    }

    /// The state, for one hook (a poisoned lock is taken anyway: a panic was caught at a hook
    /// and the state is what the flow left, as after any early return).
    pub fn lock(&self) -> MutexGuard<'_, LocalState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether some thread (this one included) holds the lock now (the glue's tests: nothing is
    /// handed to Envoy while it is held).
    #[cfg(test)]
    pub fn is_locked(&self) -> bool {
        matches!(self.0.try_lock(), Err(std::sync::TryLockError::WouldBlock))
    }
}
