//! Fixed windows aligned to the clock: window i covers [i × W, (i + 1) × W) since the Unix epoch,
//! or, with a calendar, a day, week or month from its midnight (crate::calendar), so every
//! replica and Redis agree on boundaries. Cheapest; allows up to 2 × capacity across a window
//! edge.

use crate::decision::Decision;
use crate::params::WindowParams;
use crate::time::Nanos;

/// The count of the window that holds `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    /// Start of the counted window.
    pub start: Nanos,
    /// Quantity admitted in it.
    pub count: u64,
}

impl FixedWindowState {
    /// The window that counts at `now` and its count: now's window, or a stored one that starts
    /// later (another replica's clock ran ahead), which stays current until its end; an earlier
    /// stored window counts 0. What a decision and a commit read (the Lua twin: the prelude's
    /// `read_fixed_window`).
    pub fn current(self, p: WindowParams, now: Nanos) -> FixedWindowState {
        let start = p.bounds(now).0.max(self.start);
        let count = if self.start == start { self.count } else { 0 };
        FixedWindowState { start, count }
    }
}

/// Decides one request.
pub fn decide(
    p: WindowParams,
    state: FixedWindowState,
    now: Nanos,
    quantity: u64,
) -> (Decision, FixedWindowState) {
    let FixedWindowState { start, count } = state.current(p, now);
    let end = p.bounds(start).1;
    let allowed = quantity <= p.capacity.saturating_sub(count);
    let (count, retry_after, next) = if allowed {
        let after = count + quantity;
        let next = if quantity == 0 {
            state
        } else {
            FixedWindowState {
                start,
                count: after,
            }
        };
        (after, None, next)
    } else {
        (
            count,
            (quantity <= p.capacity).then(|| end.saturating_sub(now)),
            state,
        )
    };
    let decision = Decision {
        allowed,
        capacity: p.capacity,
        remaining: p.capacity.saturating_sub(count),
        retry_after,
        reset_after: if count > 0 {
            end.saturating_sub(now)
        } else {
            0
        },
        level: count as f64,
    };
    (decision, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_SEC as S;

    #[test]
    fn windows_are_clock_aligned() {
        let p = WindowParams {
            window_ms: 60_000,
            capacity: 2,
            calendar: None,
        };
        let (_, s) = decide(p, Default::default(), 61 * S, 2);
        assert_eq!(s.start, 60 * S);
        let (d, _) = decide(p, s, 119 * S, 1);
        assert_eq!(d.retry_after, Some(S));
        let (d, _) = decide(p, s, 120 * S, 2);
        assert!(d.allowed);
    }

    #[test]
    fn a_calendar_month_resets_on_the_first() {
        use crate::calendar::{Calendar, CalendarUnit};
        let p = WindowParams {
            window_ms: CalendarUnit::Month.longest_ms(),
            capacity: 1_000_000,
            calendar: Some(Calendar::utc(CalendarUnit::Month)),
        };
        // 2024-02-29T23:59:59Z, then 2024-03-01T00:00Z.
        let last = 1_709_251_199 * S;
        let (d, s) = decide(p, Default::default(), last, 999_999);
        assert_eq!(d.reset_after, S);
        let (d, s) = decide(p, s, last, 2);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(S));
        let (d, s) = decide(p, s, last + S, 1_000_000);
        assert!(d.allowed);
        assert_eq!(s.start, last + S);
        // March has 31 days.
        assert_eq!(d.reset_after, 31 * 86_400 * S);
    }

    #[test]
    fn windows_of_30_and_365_days_are_epoch_aligned_to_the_ns() {
        const D: u64 = 86_400 * S;
        // (window in days, now, quantity): reset to the epoch-aligned edge, exact in ns.
        for days in [30u64, 365] {
            let w = days * D;
            let p = WindowParams {
                window_ms: days * 86_400_000,
                capacity: 3,
                calendar: None,
            };
            // 1 ns before an edge: the 365-day window 57 starts 2026-12-18T00:00Z (57 × 365 days).
            let edge = (1_795_000_000 * S / w + 1) * w;
            let now = edge - 1;
            let (d, s) = decide(p, Default::default(), now, 3);
            assert!(d.allowed);
            assert_eq!((d.remaining, d.reset_after), (0, 1));
            let (d, s) = decide(p, s, now, 1);
            assert_eq!((d.allowed, d.retry_after), (false, Some(1)));
            let (d, s) = decide(p, s, edge, 1);
            assert!(d.allowed);
            assert_eq!((s.start, d.reset_after), (edge, w));
            // 123,456,789 ns after an edge: the rest of the window, past 2^53 ns for a year.
            let later = edge + 123_456_789;
            let (d, _) = decide(p, s, later, 3);
            assert_eq!(d.retry_after, Some(w - 123_456_789));
            assert_eq!(d.reset_after, w - 123_456_789);
        }
        assert_eq!(
            (1_795_000_000 * S / (365 * D) + 1) * 365 * D,
            1_797_552_000 * S
        );
    }
}
