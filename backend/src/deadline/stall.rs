//! A stalled backend process (SIGSTOP, a VM pause, a long GC-like freeze of the host) reads what
//! arrived during the stall only when it resumes, and stamps it then: counted from that stamp,
//! every such request would get its full budget although its caller gave up long ago, and the
//! decisions made for it (debited, recorded) would be ones Envoy never acted on.
//!
//! So a decision request carries its sender's clock (`sent_at_ms`), and this module counts a
//! request's deadline from when it was sent, not when it was read, **when this process has just
//! stood still**:
//!
//! - **The stall gate.** A watchdog thread ticks every [`TICK`] on the monotonic clock. A gap of
//!   more than [`STALL_GAP`] between ticks (or, for a request read before the watchdog has run
//!   again, since the last tick) means the process stood still; for [`AFTER_STALL`] after that,
//!   the sender's clock is consulted. Outside it, nothing changes: a sender whose clock steps (an
//!   NTP correction) cannot make a healthy backend refuse anything.
//! - **Offsets are learned, not assumed.** The clocks of Envoy's host and the backend's may
//!   differ. The age a request shows, `now_ms - sent_at_ms` by the two clocks, is the transit
//!   plus that offset; its least value over the last one to two [`FLOOR_WINDOW`]s (the
//!   **floor**) is the offset plus the fastest transit. A request's **excess** over the floor is
//!   how long it waited beyond a fresh request, and its deadline counts from `read - excess`.
//!   With several Envoy hosts the floor is the least over all of them; a host whose clock is
//!   behind the others by more than the margin left makes its requests look older only within
//!   the gate.
//!
//! What is left: a stall shorter than [`STALL_GAP`] is not seen (its requests lose at most that
//! much, as a busy host's would); a stall that starts while a request is being decided makes it
//! late, which the deadline's late accounting already counts.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::clock::now_ms;

/// How often the watchdog ticks.
pub const TICK: Duration = Duration::from_millis(10);
/// A gap between ticks beyond which the process is taken to have stood still: five ticks (a
/// thread woken this late on a busy host opens the gate too, which costs nothing when clocks are
/// fine).
pub const STALL_GAP: Duration = Duration::from_millis(50);
/// How long after a stall the sender's clock is consulted: what queued during the stall is read
/// within milliseconds of the resume; seconds leave room for a slow drain.
pub const AFTER_STALL: Duration = Duration::from_secs(5);
/// Width of one window of the floor; the floor is the least age over the current and the
/// previous window, so it follows a drifting clock within a minute and survives a stall of up to
/// one window.
pub const FLOOR_WINDOW: Duration = Duration::from_secs(30);

const fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// The floor windows and the stall gate, on nanoseconds since an arbitrary base (pure: times are
/// passed in; [`arrival`] feeds it the process's clocks). Lock-free: decisions read and update it
/// from every thread.
#[derive(Debug)]
pub struct StallWatch {
    /// The last tick (ns since the base; 0: none yet).
    last_tick: AtomicU64,
    /// When the last stall was seen to end (ns since the base; 0: never).
    resumed: AtomicU64,
    /// Two floor windows: (window number + 1, least age in ms seen in it).
    windows: [(AtomicU64, AtomicI64); 2],
}

impl Default for StallWatch {
    fn default() -> StallWatch {
        StallWatch::new()
    }
}

impl StallWatch {
    /// Nothing seen yet.
    pub const fn new() -> StallWatch {
        StallWatch {
            last_tick: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            windows: [
                (AtomicU64::new(0), AtomicI64::new(i64::MAX)),
                (AtomicU64::new(0), AtomicI64::new(i64::MAX)),
            ],
        }
    }

    /// The watchdog's tick at `now_ns`: a gap beyond [`STALL_GAP`] since the last one records a
    /// stall that ended now, and is returned (for the log).
    pub fn tick(&self, now_ns: u64) -> Option<Duration> {
        let last = self.last_tick.swap(now_ns, Ordering::AcqRel);
        let gap = now_ns.saturating_sub(last);
        if last != 0 && gap > ns(STALL_GAP) {
            self.resumed.store(now_ns, Ordering::Release);
            return Some(Duration::from_nanos(gap));
        }
        None
    }

    /// Whether the process stood still just now: a tick overdue (the watchdog has not run since
    /// the resume yet), or a stall that ended within [`AFTER_STALL`].
    pub fn gate(&self, now_ns: u64) -> bool {
        let last = self.last_tick.load(Ordering::Acquire);
        let resumed = self.resumed.load(Ordering::Acquire);
        (last != 0 && now_ns.saturating_sub(last) > ns(STALL_GAP))
            || (resumed != 0 && now_ns.saturating_sub(resumed) < ns(AFTER_STALL))
    }

    /// Adds an age (ms, may be negative with skewed clocks) to the floor and returns the floor.
    fn floor(&self, now_ns: u64, age_ms: i64) -> i64 {
        let window = now_ns / ns(FLOOR_WINDOW) + 1;
        let (id, least) = &self.windows[(window % 2) as usize];
        if id.swap(window, Ordering::AcqRel) == window {
            least.fetch_min(age_ms, Ordering::AcqRel);
        } else {
            least.store(age_ms, Ordering::Release);
        }
        self.windows
            .iter()
            .filter(|(id, _)| {
                let held = id.load(Ordering::Acquire);
                held == window || held + 1 == window
            })
            .map(|(_, least)| least.load(Ordering::Acquire))
            .fold(age_ms, i64::min)
    }

    /// How much earlier than its read a request should count as arrived: its excess age over the
    /// floor while the gate is open, else zero. `now_ns` is the monotonic read time, `now_ms` and
    /// `sent_at_ms` the two wall clocks.
    pub fn excess(&self, now_ns: u64, now_ms: u64, sent_at_ms: u64) -> Duration {
        let age = i64::try_from(now_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(sent_at_ms).unwrap_or(i64::MAX));
        let floor = self.floor(now_ns, age);
        if !self.gate(now_ns) {
            return Duration::ZERO;
        }
        Duration::from_millis(u64::try_from(age.saturating_sub(floor)).unwrap_or(0))
    }
}

/// The process's watchdog and the base of its nanoseconds.
struct Global {
    base: Instant,
    watch: StallWatch,
}

fn global() -> &'static Global {
    static GLOBAL: OnceLock<Global> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("sluice-stall-watch".into())
            .spawn(|| loop {
                std::thread::sleep(TICK);
                let g = global();
                if let Some(gap) = g.watch.tick(since(g.base, Instant::now())) {
                    // Loud, and rare: a stall long enough to matter is seconds, not a scheduling
                    // hiccup, which is logged at debug only.
                    if gap >= Duration::from_secs(1) {
                        tracing::warn!(stalled_ms = gap.as_millis() as u64, "this process stood still (SIGSTOP, a VM pause, an overloaded host); for the next 5 s, decision requests count their timeout from when their sender sent them, so what queued meanwhile is refused unstarted (deadline_exceeded), not decided late");
                    } else {
                        tracing::debug!(stalled_ms = gap.as_millis() as u64, "the stall watchdog ticked late");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the stall watchdog; requests read after a stall of this process are decided with their full budget");
        }
        Global {
            base: Instant::now(),
            watch: StallWatch::new(),
        }
    })
}

fn since(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// When a request read at `read` and sent at `sent_at_ms` (its sender's clock) counts as arrived:
/// `read`, or earlier by its excess age when this process has just stood still (see the module).
/// The first call starts the watchdog.
pub fn arrival(read: Instant, sent_at_ms: Option<u64>) -> Instant {
    let Some(sent) = sent_at_ms else {
        return read;
    };
    let g = global();
    let excess = g
        .watch
        .excess(since(g.base, Instant::now()), now_ms(), sent);
    read.checked_sub(excess).unwrap_or(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn without_a_stall_the_senders_clock_changes_nothing() {
        let w = StallWatch::new();
        for t in 1..=100 {
            w.tick(t * 10 * MS);
        }
        // Fresh requests, 40 ms of skew: no excess; an old one (a sender clock step): none either.
        assert_eq!(w.excess(1000 * MS, 50_040, 50_000), Duration::ZERO);
        assert_eq!(w.excess(1001 * MS, 50_041, 40_000), Duration::ZERO);
    }

    #[test]
    fn after_a_stall_requests_count_from_when_they_were_sent() {
        let w = StallWatch::new();
        let wall = |t_ms: u64| 1_700_000_000_000 + t_ms;
        // Before: ticks every 10 ms, requests 1-2 ms old by a clock 300 ms behind the backend's.
        for t in 1..=100 {
            w.tick(t * 10 * MS);
        }
        w.excess(1000 * MS, wall(1000), wall(1000) - 302);
        w.excess(1000 * MS, wall(1000), wall(1000) - 301);
        // Stopped from 1 s to 16 s. A request read before the watchdog ran again: sent at 6 s.
        let resumed = 16_000 * MS;
        assert!(w.gate(resumed + MS), "the overdue tick opens the gate");
        let e = w.excess(resumed + MS, wall(16_001), wall(6_000) - 300);
        assert_eq!(e, Duration::from_millis(10_001 - 1));
        // The watchdog runs: the stall is recorded; a request sent just before the resume.
        assert_eq!(
            w.tick(resumed + 2 * MS),
            Some(Duration::from_millis(15_002))
        );
        let e = w.excess(resumed + 3 * MS, wall(16_003), wall(15_990) - 300);
        assert_eq!(e, Duration::from_millis(13 - 1));
        // A fresh one: no excess. After AFTER_STALL the gate closes.
        assert_eq!(
            w.excess(resumed + 4 * MS, wall(16_004), wall(16_003) - 300),
            Duration::ZERO
        );
        let later = resumed + ns(AFTER_STALL) + 20 * MS;
        let mut t = resumed + 12 * MS;
        while t <= later {
            w.tick(t);
            t += 10 * MS;
        }
        assert_eq!(w.excess(later, wall(30_000), 0), Duration::ZERO);
    }

    #[test]
    fn the_floor_forgets_windows_older_than_the_previous_one() {
        let w = StallWatch::new();
        let window = ns(FLOOR_WINDOW);
        assert_eq!(w.floor(0, 5), 5);
        assert_eq!(w.floor(MS, 9), 5);
        assert_eq!(w.floor(window, 7), 5, "the previous window still counts");
        assert_eq!(w.floor(2 * window, 8), 7, "the first window has gone");
        assert_eq!(
            w.floor(2 * window + MS, -3),
            -3,
            "a clock behind: negative ages"
        );
    }
}
