//! A periodic wake-up for Envoy's main thread. The dynamic-module ABI has no `on_tick`: neither a
//! worker nor a configuration gets a timer of its own, so the count reports (`relay.rs`) and the
//! exchange stream's deadlines and reopens (`stream.rs`) each keep one thread that sleeps for a
//! period and then commits an event on a configuration scheduler, which Envoy runs on its main
//! thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The thread; dropping it stops the thread and waits for it, so no tick runs after its owner
/// (and the scheduler the tick commits on) is gone.
#[derive(Debug)]
pub struct Timer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Timer {
    /// Calls `tick` every `period` (at least 1 ms) on a thread named `name`, until dropped. What
    /// `tick` owns (its scheduler) is dropped on that thread after its last call. A thread that
    /// cannot be spawned leaves a timer that never ticks: the caller's periodic work then waits
    /// for its next event instead (a request, an answer).
    pub fn start(name: &str, period: Duration, mut tick: impl FnMut() + Send + 'static) -> Timer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let period = period.max(Duration::from_millis(1));
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(period);
                    if !flag.load(Ordering::Relaxed) {
                        tick();
                    }
                }
            })
            .ok();
        Timer { stop, thread }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn ticks_until_dropped_and_never_after() {
        let (sent, ticks) = mpsc::channel();
        let timer = Timer::start("test-timer", Duration::from_millis(1), move || {
            let _ = sent.send(());
        });
        // Two ticks arrive (each waited for, not slept for).
        for _ in 0..2 {
            ticks.recv().unwrap();
        }
        drop(timer);
        // The thread is joined and the closure (with its sender) dropped: the channel is closed.
        while ticks.try_recv().is_ok() {}
        assert!(ticks.recv().is_err());
    }
}
