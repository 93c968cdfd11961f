//! Fixed windows aligned to the clock: window i covers [i × W, (i + 1) × W) since the Unix epoch,
//! so every replica and Redis agree on boundaries. Cheapest; allows up to 2 × capacity across a
//! window edge.

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

/// Decides one request.
pub fn decide(
    p: WindowParams,
    state: FixedWindowState,
    now: Nanos,
    quantity: u64,
) -> (Decision, FixedWindowState) {
    let window = p.window_ns();
    let start = (now - now % window).max(state.start);
    let end = start + window;
    let count = if state.start == start { state.count } else { 0 };
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
        };
        let (_, s) = decide(p, Default::default(), 61 * S, 2);
        assert_eq!(s.start, 60 * S);
        let (d, _) = decide(p, s, 119 * S, 1);
        assert_eq!(d.retry_after, Some(S));
        let (d, _) = decide(p, s, 120 * S, 2);
        assert!(d.allowed);
    }
}
