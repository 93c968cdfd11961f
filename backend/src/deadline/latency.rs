//! The store's recent latency: what a decision's store step is expected to take, so that a step
//! whose answer cannot arrive before its caller's deadline is not started (it would debit for a
//! request the caller lets through unchecked).
//!
//! An exponentially weighted mean of the durations of decision store steps, quick to rise (half
//! way to a slower sample) and slower to fall (a quarter of the way to a faster one): starting a
//! step that arrives late costs a debit nobody acts on, refusing one that would have been in time
//! costs a request decided by the filter's failure mode, so the estimate errs on the slow side
//! but one fast answer after a spike already brings it most of the way down.
//!
//! While the estimate refuses every step, no step produces a new sample; so a refusal asks for a
//! probe ([`LatencyEstimate::probe_due`]): at most one at a time and one per [`PROBE_EVERY`], a
//! store `PING` (it debits nothing) whose duration is a sample like any other. A store that got
//! fast again is seen within a few probes.
//!
//! Lock-free: two atomics per replica, updated with a compare-and-swap loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Least time between two probes while the estimate refuses steps.
pub const PROBE_EVERY: Duration = Duration::from_millis(20);

/// The store's recent latency (one per store, so one per replica).
#[derive(Debug)]
pub struct LatencyEstimate {
    /// When this estimate was made: the origin of `last_sample_ns`.
    origin: Instant,
    /// The estimate in nanoseconds; 0 = no sample yet.
    ewma_ns: AtomicU64,
    /// When the last sample or probe started, in nanoseconds since `origin`.
    last_sample_ns: AtomicU64,
    /// A probe is in flight.
    probing: AtomicBool,
}

impl LatencyEstimate {
    /// An estimate with no sample yet (every step may start), its clock starting at `origin`.
    pub fn new(origin: Instant) -> LatencyEstimate {
        LatencyEstimate {
            origin,
            ewma_ns: AtomicU64::new(0),
            last_sample_ns: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// The current estimate (zero before the first sample).
    pub fn estimate(&self) -> Duration {
        Duration::from_nanos(self.ewma_ns.load(Ordering::Relaxed))
    }

    /// Adds a sample: a store step (or probe) that took `took`, ending at `now`.
    pub fn observe(&self, took: Duration, now: Instant) {
        let sample = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .ewma_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    sample
                } else if sample > old {
                    old + (sample - old) / 2
                } else {
                    old - (old - sample) / 4
                })
            });
        self.last_sample_ns
            .fetch_max(self.since_origin(now), Ordering::Relaxed);
    }

    /// Whether to send a probe now (a step was just refused): true for at most one caller at a
    /// time, and only once [`PROBE_EVERY`] has passed since the last sample or probe. The caller
    /// then probes and calls [`LatencyEstimate::probe_done`].
    pub fn probe_due(&self, now: Instant) -> bool {
        let now_ns = self.since_origin(now);
        let last = self.last_sample_ns.load(Ordering::Relaxed);
        let every = u64::try_from(PROBE_EVERY.as_nanos()).unwrap_or(u64::MAX);
        if now_ns.saturating_sub(last) < every {
            return false;
        }
        if self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.last_sample_ns.fetch_max(now_ns, Ordering::Relaxed);
        true
    }

    /// The probe asked for by [`LatencyEstimate::probe_due`] ended (its sample, if any, already
    /// observed).
    pub fn probe_done(&self) {
        self.probing.store(false, Ordering::Release);
    }

    fn since_origin(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn rises_fast_falls_slower() {
        let t0 = Instant::now();
        let e = LatencyEstimate::new(t0);
        assert_eq!(e.estimate(), Duration::ZERO);
        e.observe(MS, t0);
        assert_eq!(e.estimate(), MS, "the first sample is the estimate");
        e.observe(41 * MS, t0);
        assert_eq!(e.estimate(), 21 * MS, "half way up");
        e.observe(41 * MS, t0);
        assert_eq!(e.estimate(), 31 * MS);
        e.observe(MS, t0);
        assert_eq!(
            e.estimate(),
            31 * MS - 30 * MS / 4,
            "a quarter of the way down"
        );
        for _ in 0..40 {
            e.observe(MS, t0);
        }
        assert!(e.estimate() < MS + MS / 10, "{:?}", e.estimate());
    }

    #[test]
    fn slow_redis_is_learned_in_one_or_two_steps() {
        // Redis answering in 30-60 ms against the filter's 25 ms (23 ms of budget).
        let t0 = Instant::now();
        let e = LatencyEstimate::new(t0);
        e.observe(Duration::from_micros(300), t0);
        e.observe(45 * MS, t0);
        assert!(e.estimate() < 23 * MS, "one slow step is not yet enough");
        e.observe(45 * MS, t0);
        assert!(e.estimate() > 23 * MS, "{:?}", e.estimate());
        let fresh = LatencyEstimate::new(t0);
        fresh.observe(31 * MS, t0);
        assert!(
            fresh.estimate() > 23 * MS,
            "a fresh replica learns from its first step"
        );
    }

    #[test]
    fn probes_one_at_a_time_and_not_too_often() {
        let t0 = Instant::now();
        let e = LatencyEstimate::new(t0);
        e.observe(45 * MS, t0 + 100 * MS);
        assert!(!e.probe_due(t0 + 110 * MS), "a sample 10 ms ago");
        assert!(e.probe_due(t0 + 120 * MS));
        assert!(!e.probe_due(t0 + 200 * MS), "one probe at a time");
        e.observe(MS, t0 + 201 * MS);
        e.probe_done();
        assert!(
            !e.probe_due(t0 + 210 * MS),
            "the probe's own sample is recent"
        );
        assert!(e.probe_due(t0 + 221 * MS));
        e.probe_done();
        // A probe that got no sample (the store failed) still spaces the next one.
        assert!(!e.probe_due(t0 + 230 * MS));
        assert!(e.probe_due(t0 + 241 * MS));
    }
}
