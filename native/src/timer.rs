//! A wake-up for Envoy's main thread, only when there is work for it. The dynamic-module ABI has
//! no `on_tick`: neither a worker nor a configuration gets a timer of its own, so the count
//! reports and cost commits (`relay.rs`) and the exchange stream's deadlines and reopens
//! (`stream.rs`) each keep one thread that commits an event on a configuration scheduler, which
//! Envoy runs on its main thread.
//!
//! The thread does not tick on a fixed cadence: it sleeps until a tick is asked for, by
//! [`Alarm::arm_at`] (a tick at a given time: a decision's deadline, a reopen's backoff, the
//! next report) or [`Alarm::poke`] (a tick within one period: a worker queued a commit or
//! counted something), so an idle Envoy's main thread is never woken by it (nor is the thread
//! itself). Each tick clears what was asked; the main thread's turn asks again for whatever work
//! it leaves behind (decisions still waiting, reports still to send).
//!
//! # No lost wake-up
//!
//! The race to rule out: the main thread's turn decides "nothing left" while a worker is just
//! queuing work. Every atomic here is `SeqCst`, and each party keeps one order:
//!
//! - a worker (or the main thread) first makes its work visible under a lock (the stream's
//!   state, or the worker's own state), then asks ([`Alarm::arm_at`] / [`Alarm::poke`]);
//! - the timer thread first clears what was asked (`near`, then `due`), then commits the event;
//!   the main thread's turn then takes those same locks and looks for work.
//!
//! If the worker's locked section came before the turn's, the turn sees the work and handles it
//! (or asks for the next tick itself). If it came after, the clearing happened before the worker
//! asked (clear → commit → turn → the turn's unlock → the worker's lock → its ask), so the ask
//! is not wiped out: `due` only ever goes down between two clears, and a poke finding `near`
//! clear sets it and unparks the thread. The fast paths that ask nothing (a tick at or before
//! `at` is already due, `near` already set) are safe for the same reason: what they read was
//! written by an ask that no clear has consumed yet (a clear the asker could see would have
//! been read instead), so the tick that consumes it commits a turn that locks after the
//! asker's section and sees its work. The thread itself cannot miss an ask: `park` returns at
//! once when `unpark` came first, and the loop reads `due` and `near` again after every wake.
//!
//! Clock: wall-clock ns since the Unix epoch, the clock of the deadlines it serves
//! (`Host::now_ns`); a park is at most [`MAX_PARK`] long, so a clock that jumps is read again
//! soon.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `due` when no tick is asked for.
const NEVER: u64 = u64::MAX;

/// The longest single sleep while a tick is due (the due time is checked again after it).
pub const MAX_PARK: Duration = Duration::from_secs(1);

/// The wall clock, ns since the Unix epoch (0 before it).
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    /// When the next tick is due ([`NEVER`]: none asked for).
    due: AtomicU64,
    /// A tick within one period was asked for ([`Alarm::poke`]) and has not fired yet.
    near: AtomicBool,
    period_ns: u64,
    /// The timer's thread, to unpark (unset if it could not be spawned: nothing ever ticks).
    thread: OnceLock<Thread>,
}

/// Asks the timer for ticks, from any thread; cheap to clone.
#[derive(Debug, Clone)]
pub struct Alarm(Arc<Shared>);

impl Alarm {
    /// A tick at `at_ns` (at once if that has passed), unless one is due by then already.
    pub fn arm_at(&self, at_ns: u64) {
        let shared = &*self.0;
        if shared.due.load(SeqCst) <= at_ns {
            return;
        }
        if shared.due.fetch_min(at_ns, SeqCst) > at_ns {
            shared.unpark();
        }
    }

    /// A tick within one period from now. Cheap while one is already asked for (one load): the
    /// hot path of a worker that may have queued work.
    pub fn poke(&self) {
        let shared = &*self.0;
        if shared.near.load(SeqCst) {
            return;
        }
        if !shared.near.swap(true, SeqCst) {
            shared.unpark();
        }
    }

    /// Withdraws a tick asked for by [`Self::arm_at`] (not a poke). Only for an owner that
    /// holds the lock under which all of its work is queued, having seen there is none left
    /// (see the module's "No lost wake-up": an ask made after that lock is released is kept).
    pub fn disarm(&self) {
        self.0.due.store(NEVER, SeqCst);
    }

    /// When the next tick is due, if one is asked for by [`Self::arm_at`] (for tests).
    pub fn due(&self) -> Option<u64> {
        Some(self.0.due.load(SeqCst)).filter(|&d| d != NEVER)
    }

    /// The timer's period, in ns.
    pub fn period_ns(&self) -> u64 {
        self.0.period_ns
    }
}

impl Shared {
    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// The thread: sleeps until a tick is due, clears what was asked, calls `tick`.
    fn run(&self, tick: &mut dyn FnMut()) {
        loop {
            if self.stop.load(SeqCst) {
                return;
            }
            // A pending poke becomes a due time on every pass, not once: `fetch_min` never
            // postpones one already set, and a `disarm` that wiped it (an owner that pokes and
            // disarms the same timer) is undone at the next wake instead of leaving `near` set
            // with nothing due, which would swallow every later poke.
            if self.near.load(SeqCst) {
                self.due
                    .fetch_min(now_ns().saturating_add(self.period_ns), SeqCst);
            }
            let due = self.due.load(SeqCst);
            if due == NEVER {
                std::thread::park();
                continue;
            }
            let now = now_ns();
            if now < due {
                std::thread::park_timeout(Duration::from_nanos(due - now).min(MAX_PARK));
                continue;
            }
            // Clear first, then tick: an ask from now on is kept for the next tick.
            self.near.store(false, SeqCst);
            self.due.store(NEVER, SeqCst);
            if self.stop.load(SeqCst) {
                return;
            }
            tick();
        }
    }
}

/// The thread; dropping it stops the thread and waits for it, so no tick runs after its owner
/// (and the scheduler the tick commits on) is gone.
#[derive(Debug)]
pub struct Timer {
    alarm: Alarm,
    thread: Option<JoinHandle<()>>,
}

impl Timer {
    /// Calls `tick` on a thread named `name` whenever asked through [`Self::alarm`] (a poke:
    /// within `period`, at least 1 ms), until dropped. What `tick` owns (its scheduler) is
    /// dropped on that thread after its last call. A thread that cannot be spawned leaves a
    /// timer that never ticks: the caller's work then waits for its next event instead (a
    /// request, an answer).
    pub fn start(name: &str, period: Duration, mut tick: impl FnMut() + Send + 'static) -> Timer {
        let period = period.max(Duration::from_millis(1));
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            due: AtomicU64::new(NEVER),
            near: AtomicBool::new(false),
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX),
            thread: OnceLock::new(),
        });
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || theirs.run(&mut tick))
            .ok();
        if let Some(thread) = &thread {
            // Set before anyone holds an `Alarm` (they get it from this timer, after `start`).
            let _ = shared.thread.set(thread.thread().clone());
        }
        Timer {
            alarm: Alarm(shared),
            thread,
        }
    }

    /// The handle to ask for ticks with.
    pub fn alarm(&self) -> Alarm {
        self.alarm.clone()
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.alarm.0.stop.store(true, SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    fn counting(period: Duration) -> (Timer, mpsc::Receiver<()>) {
        let (sent, ticks) = mpsc::channel();
        let timer = Timer::start("test-timer", period, move || {
            let _ = sent.send(());
        });
        (timer, ticks)
    }

    #[test]
    fn an_unasked_timer_never_ticks() {
        let (timer, ticks) = counting(Duration::from_millis(1));
        // 1 ms period: a fixed cadence would have ticked ~50 times in this wait.
        assert_eq!(
            ticks.recv_timeout(Duration::from_millis(50)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        drop(timer);
        // The thread is joined and the closure (with its sender) dropped: the channel is closed.
        assert!(ticks.recv().is_err());
    }

    #[test]
    fn arm_at_a_past_time_ticks_once_then_nothing_more() {
        let (timer, ticks) = counting(Duration::from_millis(1));
        let alarm = timer.alarm();
        alarm.arm_at(0);
        ticks.recv().unwrap();
        assert_eq!(alarm.due(), None, "the tick cleared its due time");
        assert_eq!(
            ticks.recv_timeout(Duration::from_millis(30)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // Asked again, it ticks again.
        alarm.arm_at(now_ns());
        ticks.recv().unwrap();
        drop(timer);
        while ticks.try_recv().is_ok() {}
        assert!(ticks.recv().is_err());
    }

    #[test]
    fn arm_at_keeps_the_earliest_time_asked() {
        // No thread runs these (a timer whose tick never comes: far future times).
        let (timer, _ticks) = counting(Duration::from_secs(3600));
        let alarm = timer.alarm();
        let later = now_ns() + 3_000_000_000_000;
        alarm.arm_at(later + 5);
        assert_eq!(alarm.due(), Some(later + 5));
        alarm.arm_at(later + 9);
        assert_eq!(alarm.due(), Some(later + 5));
        alarm.arm_at(later);
        assert_eq!(alarm.due(), Some(later));
        alarm.disarm();
        assert_eq!(alarm.due(), None);
        assert_eq!(alarm.period_ns(), 3_600_000_000_000);
    }

    #[test]
    fn a_poke_ticks_within_a_period_and_pokes_coalesce() {
        let (timer, ticks) = counting(Duration::from_millis(2));
        let alarm = timer.alarm();
        for _ in 0..100 {
            alarm.poke();
        }
        ticks.recv().unwrap();
        // A hundred pokes before the tick asked for one tick (a second could come only from a
        // poke racing the clear; none here).
        assert_eq!(
            ticks.recv_timeout(Duration::from_millis(30)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
    }

    #[test]
    fn a_disarm_after_a_poke_does_not_swallow_it_or_later_pokes() {
        let (timer, ticks) = counting(Duration::from_millis(20));
        let alarm = timer.alarm();
        alarm.poke();
        // Wait until the thread has turned the poke into a due time, then wipe it.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while alarm.due().is_none() && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
        alarm.disarm();
        ticks
            .recv_timeout(Duration::from_secs(10))
            .expect("the poke still ticks");
        alarm.poke();
        ticks
            .recv_timeout(Duration::from_secs(10))
            .expect("a later poke ticks too");
    }

    /// Workers make work visible, then poke or arm; every tick reads the work done so far. No
    /// work may be left unseen by a later tick (a lost wake-up): the last work is always seen.
    #[test]
    fn no_work_is_left_without_a_tick_after_it() {
        let work = Arc::new(AtomicUsize::new(0));
        let (sent, ticks) = mpsc::channel();
        let seen = Arc::clone(&work);
        let timer = Timer::start("test-timer", Duration::from_millis(1), move || {
            let _ = sent.send(seen.load(SeqCst));
        });
        const WORKERS: usize = 4;
        const ROUNDS: usize = 2000;
        let workers: Vec<_> = (0..WORKERS)
            .map(|i| {
                let alarm = timer.alarm();
                let work = Arc::clone(&work);
                std::thread::spawn(move || {
                    for r in 0..ROUNDS {
                        work.fetch_add(1, SeqCst);
                        if (i + r) % 2 == 0 {
                            alarm.poke();
                        } else {
                            alarm.arm_at(now_ns());
                        }
                        if r % 64 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        // A tick after the last work has to come (bounded: a lost wake-up fails, not hangs).
        let total = WORKERS * ROUNDS;
        loop {
            match ticks.recv_timeout(Duration::from_secs(10)) {
                Ok(n) if n == total => break,
                Ok(_) => {}
                Err(e) => panic!("no tick saw all the work: {e:?}"),
            }
        }
        drop(timer);
    }
}
