//! Sliding window: two clock-aligned counters, the previous window weighted by how much of it
//! still overlaps the last W. Approximate, O(1) memory.
//!
//! With e = milliseconds elapsed in the current window, a request passes when
//! `previous × (W − e) ≤ (capacity − current − quantity) × W` (all in whole milliseconds and
//! integers, so the Lua twin computes the same in doubles without rounding).

use crate::decision::Decision;
use crate::params::WindowParams;
use crate::time::{Nanos, NANOS_PER_MILLI};

/// Counters of the current and previous windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// Index of the current window (start = index × W since the epoch).
    pub index: u64,
    /// Quantity admitted in window `index`.
    pub current: u64,
    /// Quantity admitted in window `index − 1`.
    pub previous: u64,
}

impl SlidingWindowState {
    /// The counters as they stand at `now_ms` in windows of `window_ms`, and the ms elapsed in
    /// the current window: rolled forward to now's window (the current count becomes the
    /// previous one after one window, both 0 after two), or, when the clock stepped back before
    /// the stored window, that window from its start. What a decision and a commit read (the Lua
    /// twin: the prelude's `read_sliding_window`).
    pub fn at(self, window_ms: u64, now_ms: u64) -> (SlidingWindowState, u64) {
        let w = window_ms;
        let (index, elapsed) = if now_ms / w >= self.index {
            (now_ms / w, now_ms % w)
        } else {
            (self.index, 0)
        };
        let (current, previous) = match index - self.index {
            0 => (self.current, self.previous),
            1 => (0, self.current),
            _ => (0, 0),
        };
        let counters = SlidingWindowState {
            index,
            current,
            previous,
        };
        (counters, elapsed)
    }
}

/// Decides one request.
pub fn decide(
    p: WindowParams,
    state: SlidingWindowState,
    now: Nanos,
    quantity: u64,
) -> (Decision, SlidingWindowState) {
    let w = p.window_ms;
    let cap = p.capacity;
    let (now_counters, elapsed) = state.at(w, now / NANOS_PER_MILLI);
    let (index, current, previous) = (
        now_counters.index,
        now_counters.current,
        now_counters.previous,
    );
    let fits = |prev: u64, cur: u64, e: u64| {
        cap.checked_sub(cur + quantity).is_some_and(|room| {
            u128::from(prev) * u128::from(w - e) <= u128::from(room) * u128::from(w)
        })
    };
    let allowed = fits(previous, current, elapsed);
    let window_start = index * w * NANOS_PER_MILLI;
    let (current, retry_after, next) = if allowed {
        let next = if quantity == 0 {
            state
        } else {
            SlidingWindowState {
                index,
                current: current + quantity,
                previous,
            }
        };
        (current + quantity, None, next)
    } else {
        let retry = first_fit_ms(w, cap, previous, current, quantity)
            .map(|at_ms| (window_start + at_ms * NANOS_PER_MILLI).saturating_sub(now));
        (current, retry, state)
    };
    let weighted_prev_ceil =
        (u128::from(previous) * u128::from(w - elapsed)).div_ceil(u128::from(w));
    let remaining =
        u128::from(cap.saturating_sub(current)).saturating_sub(weighted_prev_ceil) as u64;
    let reset_after = if current > 0 {
        (window_start + 2 * w * NANOS_PER_MILLI).saturating_sub(now)
    } else if previous > 0 {
        (window_start + w * NANOS_PER_MILLI).saturating_sub(now)
    } else {
        0
    };
    let decision = Decision {
        allowed,
        capacity: cap,
        remaining,
        retry_after,
        reset_after,
        level: previous as f64 * (w - elapsed) as f64 / w as f64 + current as f64,
    };
    (decision, next)
}

/// Milliseconds after the current window's start at which `quantity` first fits, if ever.
fn first_fit_ms(w: u64, cap: u64, previous: u64, current: u64, quantity: u64) -> Option<u64> {
    if quantity > cap {
        return None;
    }
    // Later in this window: previous × (W − e) ≤ room × W  ⇔  e ≥ W − ⌊room × W / previous⌋.
    if let Some(room) = cap.checked_sub(current + quantity) {
        if let Some(share) = (room * w).checked_div(previous) {
            let e = w.saturating_sub(share);
            if e < w {
                return Some(e);
            }
        }
    }
    // Next window: current becomes previous and the new current is empty.
    let room = cap - quantity;
    let e = (room * w)
        .checked_div(current)
        .map_or(0, |share| w.saturating_sub(share));
    if e < w {
        return Some(w + e);
    }
    Some(2 * w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_window_weighs_by_its_overlap() {
        let p = WindowParams {
            window_ms: 1000,
            capacity: 10,
            calendar: None,
        };
        let s = SlidingWindowState {
            index: 1,
            current: 10,
            previous: 0,
        };
        // At 25% into window 2, the previous 10 weigh 7.5: two more fit, three do not.
        let now = 2_250 * NANOS_PER_MILLI;
        let (d, _) = decide(p, s, now, 2);
        assert!(d.allowed);
        let (d, _) = decide(p, s, now, 3);
        assert!(!d.allowed);
        // 3 fit when 10 × (1000 − e) ≤ 7 × 1000, e ≥ 300 ms.
        assert_eq!(d.retry_after, Some(50 * NANOS_PER_MILLI));
    }
}
