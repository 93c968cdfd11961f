//! Token bucket with continuous refill: tokens (stored as nanoseconds, tokens × T) refill at the
//! rate up to T × capacity; a request takes T × quantity.
//!
//! A clock that steps back (now < last) is treated as no time passing: the tokens are as at
//! `last`, and `retry_after` / `reset_after` / `level` include the wait for the clock to get back
//! to `last`. A commit's debt is kept the same way (an empty bucket whose `last` lies ahead by
//! the debt: [`crate::commit`]).

use crate::decision::Decision;
use crate::params::MeterParams;
use crate::time::Nanos;

/// Tokens in the bucket at a moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenState {
    /// Tokens in nanoseconds of refill time (tokens × T).
    pub tokens: u64,
    /// When `tokens` was measured.
    pub last: Nanos,
}

impl TokenState {
    /// A full bucket: how a fresh key starts.
    pub fn full(p: MeterParams) -> TokenState {
        TokenState {
            tokens: p.tolerance(),
            last: 0,
        }
    }

    /// The tokens at `now` in ns, refilled since `last` up to the tolerance (as at `last` when
    /// the clock stepped back). What a decision and a commit read (the Lua twin: the prelude's
    /// `read_tokens`).
    pub fn tokens_at(self, p: MeterParams, now: Nanos) -> u64 {
        self.tokens
            .saturating_add(now.saturating_sub(self.last))
            .min(p.tolerance())
    }
}

/// Decides one request.
pub fn decide(
    p: MeterParams,
    state: TokenState,
    now: Nanos,
    quantity: u64,
) -> (Decision, TokenState) {
    let interval = p.interval.max(1);
    let tolerance = p.tolerance();
    let need = p.increment(quantity);
    let current = state.tokens_at(p, now);
    // After a clock step back the tokens are as they were at `last`: every wait starts there.
    let catch_up = state.last.saturating_sub(now);
    let allowed = current >= need;
    let (tokens, retry_after, next) = if allowed {
        let after = current - need;
        let next = if quantity == 0 {
            state
        } else {
            TokenState {
                tokens: after,
                last: now.max(state.last),
            }
        };
        (after, None, next)
    } else {
        (
            current,
            (need <= tolerance).then(|| need - current + catch_up),
            state,
        )
    };
    let used = tolerance - tokens;
    let decision = Decision {
        allowed,
        capacity: p.capacity,
        remaining: tokens / interval,
        retry_after,
        reset_after: if used > 0 { used + catch_up } else { 0 },
        // The wait for `last` counts as level: a bucket a commit left in debt (empty, refilling
        // only from `last`, crate::commit) stands above its capacity by the debt, as the other
        // meters do.
        level: (used + catch_up) as f64 / interval as f64,
    };
    (decision, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_continuously_up_to_capacity() {
        let p = MeterParams {
            interval: 1000,
            capacity: 3,
        };
        let (d, s) = decide(p, TokenState::full(p), 5_000, 3);
        assert!(d.allowed);
        assert_eq!(s.tokens, 0);
        let (d, _) = decide(p, s, 5_999, 1);
        assert_eq!(d.retry_after, Some(1));
        // Long idle never overfills.
        let (d, _) = decide(p, s, 1_000_000, 0);
        assert_eq!(d.remaining, 3);
    }
}
