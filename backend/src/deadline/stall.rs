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
//!   plus that offset; its least value (the **floor**) is the offset plus the fastest transit. A
//!   request's **excess** over the floor is how long it waited beyond a fresh request, and its
//!   deadline counts from `read - excess`. With several Envoy hosts the floor is the least over
//!   all of them; a host whose clock is behind the others by more than the margin left makes
//!   its requests look older only within the gate.
//! - **The floor is learned outside the gate only, and kept until traffic replaces it.** It is
//!   the least age over the current [`FLOOR_WINDOW`] and the last earlier window that saw a
//!   request read outside the gate, however long ago that was: windows turn over with traffic,
//!   not with time. So neither a stall of any length nor a quiet spell before it (no decision
//!   traffic for minutes) leaves the gate without the offset learned before, and a request read
//!   during the gate (an old one, queued by the stall) never teaches it. A floor follows a
//!   drifting clock within two windows of traffic. A process that has read no request outside
//!   the gate yet assumes the two clocks agree (floor 0).
//!
//! What is left: a stall shorter than [`STALL_GAP`] is not seen (its requests lose at most that
//! much, as a busy host's would); a stall that starts while a request is being decided makes it
//! late: a step whose answer comes after its deadline is counted as late, not decided
//! ([`crate::decide::call`]), and a decision made just before the process stood still whose answer left
//! after its sender gave up is withdrawn when the sender's report names it
//! ([`crate::activity`], "edge"). A clock that steps while no traffic flows (the floor kept
//! from before is then off by the step) misjudges requests read in the gate by that step until
//! two windows of traffic have passed.

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
/// Width of one window of the floor: the floor is the least age over the current window and
/// the last earlier one with traffic read outside the gate, so it follows a drifting clock
/// within a minute of traffic and is never lost to a stall or a quiet spell.
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
    /// The last tick before the last stall: it began within a [`TICK`] after (0: never).
    began: AtomicU64,
    /// Stalls seen so far.
    stalls: AtomicU64,
    /// The floor window being filled (window number + 1; 0: none yet).
    window: AtomicU64,
    /// The least age (ms) read outside the gate in that window.
    current: AtomicI64,
    /// The least age of the last earlier window that had any (`i64::MAX`: none).
    previous: AtomicI64,
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
            began: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            window: AtomicU64::new(0),
            current: AtomicI64::new(i64::MAX),
            previous: AtomicI64::new(i64::MAX),
        }
    }

    /// The watchdog's tick at `now_ns`: a gap beyond [`STALL_GAP`] since the last one records a
    /// stall that ended now, and is returned (for the log).
    pub fn tick(&self, now_ns: u64) -> Option<Duration> {
        let last = self.last_tick.swap(now_ns, Ordering::AcqRel);
        let gap = now_ns.saturating_sub(last);
        if last != 0 && gap > ns(STALL_GAP) {
            self.began.store(last, Ordering::Release);
            self.resumed.store(now_ns, Ordering::Release);
            self.stalls.fetch_add(1, Ordering::AcqRel);
            return Some(Duration::from_nanos(gap));
        }
        None
    }

    /// Stalls seen so far, and the last tick before the last one (it began within a [`TICK`]
    /// after that; 0 when none was seen).
    pub fn last_stall(&self) -> (u64, u64) {
        let stalls = self.stalls.load(Ordering::Acquire);
        (stalls, self.began.load(Ordering::Acquire))
    }

    /// Whether the process stood still just now: a tick overdue (the watchdog has not run since
    /// the resume yet), or a stall that ended within [`AFTER_STALL`].
    pub fn gate(&self, now_ns: u64) -> bool {
        let last = self.last_tick.load(Ordering::Acquire);
        let resumed = self.resumed.load(Ordering::Acquire);
        (last != 0 && now_ns.saturating_sub(last) > ns(STALL_GAP))
            || (resumed != 0 && now_ns.saturating_sub(resumed) < ns(AFTER_STALL))
    }

    /// Learns an age (ms, may be negative with skewed clocks) read outside the gate: the current
    /// window's least; a request in a later window starts that one, and the window it ends
    /// becomes the previous (however long ago its traffic was).
    fn learn(&self, now_ns: u64, age_ms: i64) {
        let window = now_ns / ns(FLOOR_WINDOW) + 1;
        let held = self.window.load(Ordering::Acquire);
        if held < window
            && self
                .window
                .compare_exchange(held, window, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let ended = self.current.swap(age_ms, Ordering::AcqRel);
            if ended != i64::MAX {
                self.previous.store(ended, Ordering::Release);
            }
            return;
        }
        // This window (or an older one, read late, or a race lost to the thread that turned the
        // window over): a valid sample all the same.
        self.current.fetch_min(age_ms, Ordering::AcqRel);
    }

    /// The floor: the least age of the current window and the previous one (`None`: nothing
    /// learned yet).
    fn floor(&self) -> Option<i64> {
        let least = self
            .current
            .load(Ordering::Acquire)
            .min(self.previous.load(Ordering::Acquire));
        (least != i64::MAX).then_some(least)
    }

    /// How much earlier than its read a request should count as arrived: its excess age over the
    /// floor while the gate is open, else zero (and its age is learned). `now_ns` is the
    /// monotonic read time, `now_ms` and `sent_at_ms` the two wall clocks.
    pub fn excess(&self, now_ns: u64, now_ms: u64, sent_at_ms: u64) -> Duration {
        let age = i64::try_from(now_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(sent_at_ms).unwrap_or(i64::MAX));
        if !self.gate(now_ns) {
            self.learn(now_ns, age);
            return Duration::ZERO;
        }
        // Nothing learned yet: the clocks are taken to agree.
        let floor = self.floor().unwrap_or(0);
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

/// Stalls this process has seen, and when the last one began (at the latest: it began within a
/// [`TICK`] after), on the monotonic clock. `(0, None)` before the first.
pub fn last_stall() -> (u64, Option<Instant>) {
    let g = global();
    let (stalls, began) = g.watch.last_stall();
    let at = (stalls > 0).then(|| g.base + Duration::from_nanos(began));
    (stalls, at)
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

    /// A backend that ticked every 10 ms up to `from_ms` and learned ages of `age_ms` (a 300 ms
    /// clock offset plus 1-2 ms of transit) from requests read at each of `traffic_ms`.
    fn learned(traffic_ms: &[u64], until_ms: u64) -> StallWatch {
        let w = StallWatch::new();
        let mut t = 10;
        for &at in traffic_ms {
            while t <= at {
                w.tick(t * MS);
                t += 10;
            }
            assert_eq!(w.excess(at * MS, wall(at), wall(at) - 302), Duration::ZERO);
            assert_eq!(w.excess(at * MS, wall(at), wall(at) - 301), Duration::ZERO);
        }
        while t <= until_ms {
            w.tick(t * MS);
            t += 10;
        }
        w
    }

    fn wall(t_ms: u64) -> u64 {
        1_700_000_000_000 + t_ms
    }

    /// Whether a request sent at `sent_ms` (the sender's clock, 300 ms behind) with a 25 ms
    /// timeout and read at `read_ms` may start a store step (a fresh store).
    fn admitted(w: &StallWatch, sent_ms: u64, read_ms: u64) -> bool {
        let excess = w.excess(read_ms * MS, wall(read_ms), wall(sent_ms) - 300);
        let base = Instant::now();
        let read = base + Duration::from_secs(3600);
        let deadline = super::super::Deadline::new(read - excess, Duration::from_millis(25));
        matches!(
            deadline.admit(read, Duration::ZERO),
            super::super::Admission::Start(_)
        )
    }

    #[test]
    fn any_stall_refuses_exactly_what_its_sender_gave_up_on() {
        // (traffic before, the stall's start, its length): 15 s; 90 s (longer than both floor
        // windows); 20 s after 90 s with no decision traffic; 200 s after an hour's quiet.
        let cases: [(&[u64], u64, u64); 4] = [
            (&[1_000, 2_000], 3_000, 15_000),
            (&[1_000, 40_000, 70_000], 71_000, 90_000),
            (&[1_000, 2_000], 92_000, 20_000),
            (&[1_000], 3_601_000, 200_000),
        ];
        for (traffic, stop, length) in cases {
            let w = learned(traffic, stop);
            let resumed = stop + length;
            // Sent during the stall, read after it: refused, the oldest and the youngest that
            // its sender (25 ms) gave up on; read before the watchdog ran again, and after.
            assert!(!admitted(&w, stop + 1, resumed + 1), "{length}: oldest");
            assert!(
                !admitted(&w, resumed - 24, resumed + 1),
                "{length}: gave up"
            );
            w.tick((resumed + 2) * MS);
            assert!(w.gate((resumed + 3) * MS));
            assert!(!admitted(&w, resumed - 30, resumed + 3), "{length}");
            // Its sender still waits (sent 22 ms before the read, 1 ms of transit): decided.
            assert!(
                admitted(&w, resumed - 19, resumed + 3),
                "{length}: still waited for"
            );
            assert!(admitted(&w, resumed + 2, resumed + 3), "{length}: fresh");
            // The edge: a request counts from its send plus the fastest transit (1 ms), and its
            // deadline keeps the 2 ms margin: refused from 24 ms after its send (its sender gives
            // up at 25 ms), started below.
            assert!(!admitted(&w, resumed - 21, resumed + 3), "{length}: 24 ms");
            assert!(admitted(&w, resumed - 20, resumed + 3), "{length}: 23 ms");
        }
    }

    #[test]
    fn requests_read_in_the_gate_teach_the_floor_nothing() {
        let w = learned(&[1_000], 2_000);
        // 120 s stopped: the queued requests are read with ages up to 120 s.
        let resumed = 122_000;
        for sent in (2_000..resumed).step_by(1_000) {
            w.excess(resumed * MS, wall(resumed), wall(sent) - 300);
        }
        assert_eq!(w.floor(), Some(301));
        // Past the gate, the floor is still the one learned before.
        let later = resumed + 6_000;
        let mut t = resumed;
        while t <= later {
            w.tick(t * MS);
            t += 10;
        }
        assert!(!w.gate(later * MS));
        assert_eq!(
            w.excess(later * MS, wall(later), wall(later) - 305),
            Duration::ZERO
        );
        assert_eq!(w.floor(), Some(301));
    }

    #[test]
    fn windows_turn_over_with_traffic_not_with_time() {
        let w = StallWatch::new();
        let window = ns(FLOOR_WINDOW);
        assert_eq!(
            w.floor(),
            None,
            "nothing learned: the clocks are taken to agree"
        );
        w.learn(0, 5);
        w.learn(MS, 9);
        assert_eq!(w.floor(), Some(5));
        // An hour of quiet, then traffic: the window before it is kept.
        w.learn(120 * window, 7);
        assert_eq!(
            w.floor(),
            Some(5),
            "the last window with traffic still counts"
        );
        // The sender's clock stepped back 1 s (its requests look 1 s older): after two windows
        // of traffic the old floor is gone.
        w.learn(121 * window, 1_007);
        assert_eq!(w.floor(), Some(7));
        w.learn(122 * window, 1_008);
        assert_eq!(w.floor(), Some(1_007));
        // A clock ahead: negative ages, at once.
        w.learn(122 * window + MS, -3);
        assert_eq!(w.floor(), Some(-3));
    }

    #[test]
    fn without_a_learned_floor_the_clocks_are_taken_to_agree() {
        let w = StallWatch::new();
        for t in 1..=10 {
            w.tick(t * 10 * MS);
        }
        // Stopped from 100 ms to 20 s before any request: ages count as they read.
        let resumed = 20_000 * MS;
        assert_eq!(
            w.excess(resumed, 1_000_020_000, 1_000_005_000),
            Duration::from_millis(15_000)
        );
        assert_eq!(
            w.excess(resumed, 1_000_020_000, 1_000_020_001),
            Duration::ZERO
        );
    }

    #[test]
    fn the_last_stall_is_counted_with_its_start() {
        let w = StallWatch::new();
        assert_eq!(w.last_stall(), (0, 0));
        w.tick(10 * MS);
        w.tick(20 * MS);
        assert_eq!(w.last_stall(), (0, 0));
        assert_eq!(w.tick(5_020 * MS), Some(Duration::from_millis(5_000)));
        assert_eq!(w.last_stall(), (1, 20 * MS));
        w.tick(5_030 * MS);
        assert_eq!(w.last_stall(), (1, 20 * MS));
    }
}
