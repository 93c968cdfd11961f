//! Exact sliding log: the time of every admitted request over the last window. A request at `now`
//! counts the entries with `t + W > now`. Memory grows with capacity, hence its lower cap.

use std::collections::VecDeque;

use crate::decision::Decision;
use crate::params::WindowParams;
use crate::time::Nanos;

/// Admission times, oldest first (never decreasing: a clock step back reuses the newest time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    /// One entry per admitted unit of quantity.
    pub entries: VecDeque<Nanos>,
}

impl SlidingLogState {
    /// The index of the first live entry at `now` (one with t + W > now; `entries.len()` when
    /// none is): the entries before it have left a window of `window` ns. What a decision and a
    /// commit read (the Lua twin: the prelude's `read_log`).
    pub fn live_from(&self, window: Nanos, now: Nanos) -> usize {
        self.entries
            .iter()
            .position(|t| t.saturating_add(window) > now)
            .unwrap_or(self.entries.len())
    }
}

/// Decides one request. The new state comes back only when something was admitted (`None`: the
/// input is unchanged), so a denial copies no log.
pub fn decide(
    p: WindowParams,
    state: &SlidingLogState,
    now: Nanos,
    quantity: u64,
) -> (Decision, Option<SlidingLogState>) {
    let window = p.window_ns();
    let live_from = state.live_from(window, now);
    let live = (state.entries.len() - live_from) as u64;
    let allowed = quantity <= p.capacity.saturating_sub(live);
    if allowed && quantity > 0 {
        let mut entries: VecDeque<Nanos> = state.entries.iter().skip(live_from).copied().collect();
        let at = entries.back().map_or(now, |newest| now.max(*newest));
        entries.extend(std::iter::repeat_n(at, quantity as usize));
        let count = entries.len() as u64;
        let decision = Decision {
            allowed,
            capacity: p.capacity,
            remaining: p.capacity.saturating_sub(count),
            retry_after: None,
            reset_after: (at + window).saturating_sub(now),
            level: count as f64,
        };
        return (decision, Some(SlidingLogState { entries }));
    }
    let retry_after = if allowed || quantity > p.capacity {
        None
    } else {
        // The (live + quantity − capacity)-th oldest live entry must expire first.
        let must_expire = (live + quantity - p.capacity) as usize;
        state
            .entries
            .get(live_from + must_expire - 1)
            .map(|t| (t + window).saturating_sub(now))
    };
    let decision = Decision {
        allowed,
        capacity: p.capacity,
        remaining: p.capacity.saturating_sub(live),
        retry_after,
        reset_after: state
            .entries
            .back()
            .filter(|_| live > 0)
            .map_or(0, |t| (t + window).saturating_sub(now)),
        level: live as f64,
    };
    (decision, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_waits_for_the_right_entry_to_expire() {
        let p = WindowParams {
            window_ms: 1,
            capacity: 3,
            calendar: None,
        };
        let mut s = SlidingLogState::default();
        for t in [100, 200, 300] {
            s = decide(p, &s, t, 1).1.expect("admitted");
        }
        // Quantity 2 needs the two oldest (100 and 200) gone: at 200 + 1 ms.
        let (d, _) = decide(p, &s, 400, 2);
        assert_eq!(d.retry_after, Some(200 + 1_000_000 - 400));
    }
}
