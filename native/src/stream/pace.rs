//! When the exchange stream's main-thread turn is due: the pause before a failed stream is
//! reopened ([`reopen_pause`], held to `Exchanger` by a test) and the next turn after one
//! ([`next_turn`]). Pure functions of the stream's state and the clock.

#![forbid(unsafe_code)]

use sluice_filter::exchange::REOPEN_MAX_NS;

/// How long a stream that just failed waits before it is reopened, from the exchanger's
/// backoff before and after the failure: `Exchanger` reopens after the backoff it had (reset to
/// 100 ms first if the stream worked) and doubles it up to `REOPEN_MAX_NS`, so below the cap the
/// pause is half the new backoff, and at the cap (never reached from a reset) it is the old one.
/// Held to `Exchanger` by a test; were it ever wrong, a turn that finds the reopen not yet due
/// polls every tick instead ([`next_turn`]).
pub(super) fn reopen_pause(before_ns: u64, after_ns: u64) -> u64 {
    if after_ns < REOPEN_MAX_NS {
        after_ns / 2
    } else {
        before_ns
    }
}

/// Whether the exchange stream is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// Open: decisions go on it.
    Open,
    /// Closed (not yet opened, or failed): it reopens after its backoff.
    Closed,
}

/// When the stream's next turn is due, after a turn (or a close) at `now_ns` left `waiting`
/// decisions on it and the stream's `link` open or closed: while decisions wait, one tick later (each
/// armed its own deadline when sent; this keeps the check going for those still waiting); a
/// closed stream at its reopen time `reopen_at_ns` if still ahead, else one tick later (not due
/// yet for a reason not known here); nothing otherwise (`None`: the main thread sleeps).
pub(super) fn next_turn(
    link: Link,
    waiting: usize,
    reopen_at_ns: u64,
    now_ns: u64,
    tick_ns: u64,
) -> Option<u64> {
    let poll = now_ns.saturating_add(tick_ns);
    let deadlines = (waiting > 0).then_some(poll);
    let reopen = (link == Link::Closed).then_some(if reopen_at_ns > now_ns {
        reopen_at_ns
    } else {
        poll
    });
    match (deadlines, reopen) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_filter::exchange::{Exchanger, StreamHost};

    /// A stream host that opens when told to, and counts the attempts.
    struct Door {
        opens: bool,
        attempts: u32,
    }

    impl StreamHost for Door {
        fn open_stream(&mut self) -> Result<u32, String> {
            self.attempts += 1;
            if self.opens {
                Ok(7)
            } else {
                Err("ClusterNotFound".to_owned())
            }
        }
        fn send_message(&mut self, _token: u32, _message: &[u8]) -> Result<(), String> {
            Ok(())
        }
    }

    const MS: u64 = 1_000_000;

    /// `reopen_pause` names the exact time `Exchanger` next tries to open: not a ns before
    /// (the turn then would find nothing to do), not after (the reopen would be late). Through
    /// refusals up to the 5 s cap and beyond, and a close after a stream that worked.
    #[test]
    fn the_reopen_time_is_when_the_exchanger_next_tries() {
        let mut ex: Exchanger<()> = Exchanger::default();
        let mut door = Door {
            opens: false,
            attempts: 0,
        };
        let mut now = 1_000 * MS;
        let mut pauses = Vec::new();
        for _ in 0..9 {
            let before = ex.backoff_ns();
            assert!(ex.ensure_open(&mut door, now).is_some());
            // The turn's way: the pause is the backoff the refusal waited with.
            let at = now + before;
            assert_eq!(reopen_pause(before, ex.backoff_ns()), before);
            let attempts = door.attempts;
            assert!(ex.ensure_open(&mut door, at - 1).is_none());
            assert_eq!(door.attempts, attempts, "not due a ns early");
            pauses.push((at - now) / MS);
            now = at;
        }
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        // It opens at the time named, and a close of a stream that did not work waits the
        // current backoff (5 s: the cap).
        door.opens = true;
        assert!(ex.ensure_open(&mut door, now).is_none());
        assert_eq!(ex.token(), Some(7));
        now += MS;
        let before = ex.backoff_ns();
        let closed = ex.on_close(7, 14, None, now);
        assert!(closed.current);
        let pause = reopen_pause(before, ex.backoff_ns());
        assert_eq!(pause, 5000 * MS);
        let attempts = door.attempts;
        assert!(ex.ensure_open(&mut door, now + pause - 1).is_none());
        assert_eq!(door.attempts, attempts);
        assert!(ex.ensure_open(&mut door, now + pause).is_none());
        assert_eq!(door.attempts, attempts + 1);
        assert_eq!(ex.token(), Some(7));
        // A stream that lived past WORKED_AFTER_NS worked: its close waits 100 ms again.
        now += pause + sluice_filter::exchange::WORKED_AFTER_NS;
        let before = ex.backoff_ns();
        assert!(ex.on_close(7, 14, None, now).current);
        let pause = reopen_pause(before, ex.backoff_ns());
        assert_eq!(pause, 100 * MS);
        let attempts = door.attempts;
        assert!(ex.ensure_open(&mut door, now + pause - 1).is_none());
        assert_eq!(door.attempts, attempts);
        assert!(ex.ensure_open(&mut door, now + pause).is_none());
        assert_eq!(door.attempts, attempts + 1);
    }

    #[test]
    fn a_turn_is_asked_for_only_when_there_is_work() {
        let now = 50_000 * MS;
        let tick = 6 * MS;
        // Open, nothing waiting: idle, no turn at all.
        assert_eq!(next_turn(Link::Open, 0, 0, now, tick), None);
        assert_eq!(next_turn(Link::Open, 0, now + 500 * MS, now, tick), None);
        // Decisions waiting: their deadlines are checked every tick.
        assert_eq!(next_turn(Link::Open, 3, 0, now, tick), Some(now + tick));
        // Closed: at its reopen time; one tick on when that is not known or already past.
        assert_eq!(
            next_turn(Link::Closed, 0, now + 400 * MS, now, tick),
            Some(now + 400 * MS)
        );
        assert_eq!(next_turn(Link::Closed, 0, now, now, tick), Some(now + tick));
        assert_eq!(next_turn(Link::Closed, 0, 0, now, tick), Some(now + tick));
        // Both: the earlier.
        assert_eq!(
            next_turn(Link::Closed, 1, now + 400 * MS, now, tick),
            Some(now + tick)
        );
        assert_eq!(
            next_turn(Link::Closed, 1, now + MS, now, tick),
            Some(now + MS)
        );
    }
}
