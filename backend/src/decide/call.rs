//! One decision's store step under its caller's deadline ([`crate::deadline`] holds the
//! deadline's arithmetic; this runs a step of the shared state's store under it).
//!
//! - No deadline (tools, RLS without `grpc-timeout`): the step runs under the store deadline, as
//!   every store call does ([`App::store_call`]).
//! - A deadline whose time left is below the store's recent latency: no step is started, the
//!   answer is [`Miss::NotStarted`] (503 `deadline_exceeded`), nothing is debited, and a probe of
//!   the store's latency is sent if one is due ([`crate::deadline::latency`]).
//! - Otherwise the step is started (a store that answers at once is answered with no task), then
//!   spawned, and waited for at most the time left (and the store
//!   deadline). Past it the caller gets [`Miss::Late`], and the step, which cannot be called back
//!   (an EVALSHA already sent runs to its end), finishes on its own, bounded by the store
//!   deadline; what it debited is handed to the `late` callback, never to the caller's answer.
//!   A caller that hangs up (its connection closed, the handler dropped) is late the same way.
//! - A step whose answer is here only after its caller stopped waiting (the deadline and its
//!   margin passed: the process stood still while the step ran) is late too: it is handed to
//!   `late` and never decided, whichever of the answer and the timer was seen first.
//!
//! Every step's duration (success or timeout) is a sample of the latency estimate.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::oneshot;

use crate::deadline::error::micros;
use crate::deadline::latency::LatencyEstimate;
use crate::deadline::{Admission, Deadline, DecideError, Miss};
use crate::state::App;
use crate::store::{HealthStore, StoreError};

/// Runs `step` (a decision's store step, owning what it needs) under `deadline`; `late` receives
/// its result if it finishes after its caller gave up.
pub async fn run<T, F, L>(
    app: &App,
    deadline: Option<Deadline>,
    step: F,
    late: L,
) -> Result<T, DecideError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, StoreError>> + Send + 'static,
    L: FnOnce(Result<T, StoreError>) + Send + 'static,
{
    let bound = app.store_deadline;
    let latency = app.latency.clone();
    let metrics = app.metrics.clone();
    let Some(deadline) = deadline else {
        let result = timed(&latency, bound, step).await;
        if let Err(e) = &result {
            metrics.store_error(e);
        }
        return Ok(result?);
    };
    let now = Instant::now();
    let wait = match deadline.admit(now, latency.estimate()) {
        Admission::Refuse {
            remaining,
            estimate,
        } => {
            probe(app.store.clone(), latency, bound, now);
            metrics.deadline_exceeded("not_started");
            return Err(Miss::NotStarted {
                remaining_us: micros(remaining),
                estimate_us: micros(estimate),
            }
            .into());
        }
        Admission::Start(remaining) => remaining.min(bound),
    };
    let late = LateOnce::new(late);
    let mut running = Box::pin(async move {
        let result = timed(&latency, bound, step).await;
        if let Err(e) = &result {
            metrics.store_error(e);
        }
        result
    });
    // A store that answers without waiting (the memory store) is answered here, with no task;
    // a Redis step has sent its command by now and goes on in its own task.
    if let Some(result) = (&mut running).now_or_never() {
        return on_time(app, &deadline, now, result, &late);
    }
    let (tx, mut rx) = oneshot::channel();
    let task_late = late.clone();
    tokio::spawn(async move {
        let result = running.await;
        // The receiver is gone or closed: the caller gave up before this answer.
        if let Err(result) = tx.send(result) {
            task_late.call(result);
        }
    });
    match tokio::time::timeout(wait, &mut rx).await {
        Ok(Ok(result)) => on_time(app, &deadline, now, result, &late),
        Ok(Err(_)) => {
            Err(StoreError::Unavailable("the store step ended without an answer".into()).into())
        }
        Err(_) => {
            // Closing first makes the hand-over exact: either the answer is already here (and
            // answered if on time), or the step will find the channel closed and count what it
            // did as late. Never both, never neither.
            rx.close();
            match rx.try_recv() {
                Ok(result) => on_time(app, &deadline, now, result, &late),
                Err(_) => {
                    app.metrics.deadline_exceeded("late");
                    Err(Miss::Late {
                        waited_us: micros(now.elapsed()),
                    }
                    .into())
                }
            }
        }
    }
}

/// The step's `result`, answered unless its caller has given up by now (the process stood still
/// while the step ran): then it goes to `late` and the caller gets [`Miss::Late`]. An answer
/// taken within the margin is still answered, as it always was: it can reach its caller.
fn on_time<T, L>(
    app: &App,
    deadline: &Deadline,
    started: Instant,
    result: Result<T, StoreError>,
    late: &LateOnce<L>,
) -> Result<T, DecideError>
where
    L: FnOnce(Result<T, StoreError>),
{
    let now = Instant::now();
    if deadline.given_up(now) {
        late.call(result);
        app.metrics.deadline_exceeded("late");
        return Err(Miss::Late {
            waited_us: micros(now.saturating_duration_since(started)),
        }
        .into());
    }
    Ok(result?)
}

/// The `late` callback, called at most once from whichever side finds the answer late.
struct LateOnce<L>(Arc<Mutex<Option<L>>>);

impl<L> Clone for LateOnce<L> {
    fn clone(&self) -> Self {
        LateOnce(Arc::clone(&self.0))
    }
}

impl<L> LateOnce<L> {
    fn new(late: L) -> LateOnce<L> {
        LateOnce(Arc::new(Mutex::new(Some(late))))
    }

    fn call<T>(&self, result: Result<T, StoreError>)
    where
        L: FnOnce(Result<T, StoreError>),
    {
        let taken = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(late) = taken {
            late(result);
        }
    }
}

/// Runs `step` under `bound`, adding its duration to `latency` when it answered or timed out
/// (a refused connection says nothing about how long a step takes).
async fn timed<T>(
    latency: &LatencyEstimate,
    bound: Duration,
    step: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let started = Instant::now();
    let result = match tokio::time::timeout(bound, step).await {
        Ok(r) => r,
        Err(_) => Err(StoreError::Timeout(
            u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
        )),
    };
    if matches!(result, Ok(_) | Err(StoreError::Timeout(_))) {
        let now = Instant::now();
        latency.observe(now.saturating_duration_since(started), now);
    }
    result
}

/// Sends a latency probe (a store `PING`) if one is due at `now`.
fn probe(
    store: Arc<dyn HealthStore>,
    latency: Arc<LatencyEstimate>,
    bound: Duration,
    now: Instant,
) {
    if !latency.probe_due(now) {
        return;
    }
    tokio::spawn(async move {
        let _ = timed(&latency, bound, store.ping()).await;
        latency.probe_done();
    });
}
