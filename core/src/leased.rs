//! Deciding a request together with a lease grant ("reserve up to n"), for all six algorithms.
//!
//! An allowed request of quantity q ≥ 1, under a rule with a lease and from a caller that can
//! hold one ([`offer`]), also takes k = [`grant_units`]`(max, remaining)` units, where
//! `remaining` is what the key has left after q: never more than `max`, never more than half of
//! what is left. The algorithm then decides q + k from the same state at the same instant: one
//! debit, so the state after a grant is exactly the state after a plain request of q + k, and the
//! answer (`remaining`, `level`, `reset_after`) is that request's, so it already excludes the
//! granted units.
//!
//! Why q + k is always admissible: at one instant every algorithm is additive (deciding q then k
//! leaves the state deciding q + k leaves), and `remaining` after q is by definition how many
//! more units a debit at that instant admits. So the fallback below (answer the plain q decision,
//! grant nothing) is never taken for a state the algorithms produce; core/tests/lease_decide.rs
//! checks that on random histories. The Redis twins (backend/lua) compute the same k in the same
//! script call.
//!
//! `fixed_window`: a grant's ttl stops at the window's end, so the units of one window are spent
//! in that window and a window never admits more than its capacity; with under 1 ms of the window
//! left nothing is granted (the ttl is whole milliseconds).

use crate::decision::Decision;
use crate::lease::{grant_units, Lease, LeaseGrant};
use crate::params::Params;
use crate::rule::{Mode, Rule};
use crate::state::State;
use crate::time::{Nanos, NANOS_PER_MILLI};

/// A decision and the lease granted with it, if any. When `grant` is present, `decision` is the
/// decision of quantity + `grant.units`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Leased {
    /// The answer to the request (with the granted units already debited).
    pub decision: Decision,
    /// Units debited beyond the request, for the caller to admit itself.
    pub grant: Option<LeaseGrant>,
}

impl Leased {
    /// A decision with no grant.
    pub fn plain(decision: Decision) -> Leased {
        Leased {
            decision,
            grant: None,
        }
    }
}

/// The lease a request may receive under `rule`: the rule's lease when the caller asked for one
/// (`asked`: it can hold a lease) and the rule is enforced. A shadow rule never leases: it exists
/// to measure, request by request, what enforcing it would deny; units debited in advance would
/// count requests that never came, so its would-deny figures would no longer be what the rule
/// enforced per request would do (and a shadow rule denies nothing, so there is no callout
/// saved that its exactness should pay for).
pub fn offer(rule: &Rule, asked: bool) -> Option<Lease> {
    rule.lease()
        .filter(|_| asked && rule.mode() == Mode::Enforce)
}

/// How long a grant made with `decision` may be spent, in whole milliseconds: the lease's ttl,
/// and for `fixed_window` at most the time left in the current window (rounded down), which an
/// allowed decision reports as its `reset_after`.
pub fn grant_ttl_ms(params: &Params, lease: Lease, decision: &Decision) -> u64 {
    match params {
        Params::FixedWindow(_) => lease
            .ttl
            .millis()
            .min(decision.reset_after / NANOS_PER_MILLI),
        _ => lease.ttl.millis(),
    }
}

/// Units to grant beyond a plain decision of `quantity`: none for a peek or a denial, none when
/// the grant could not be spent (a `fixed_window` with under 1 ms left), else
/// [`grant_units`]`(max, remaining)`: the definition [`Params::decide_leased`] computes (from a
/// peek) and the Lua twins compute (from their plain decision); the tests hold both to it.
pub fn units_for(params: &Params, lease: Lease, quantity: u64, plain: &Decision) -> u64 {
    if quantity == 0 || !plain.allowed || grant_ttl_ms(params, lease, plain) == 0 {
        return 0;
    }
    grant_units(lease.max, plain.remaining)
}

impl Params {
    /// Like [`Params::decide_change`] (the new state only when something was admitted), also
    /// granting a lease when `lease` is given (see the module docs). With `lease: None`, or when
    /// nothing is granted, the answer is exactly [`Params::decide_change`]'s.
    pub fn decide_leased(
        &self,
        state: &State,
        now: Nanos,
        quantity: u64,
        lease: Option<Lease>,
    ) -> (Leased, Option<State>) {
        let plain = || {
            let (decision, change) = self.decide_change(state, now, quantity);
            (Leased::plain(decision), change)
        };
        let Some(lease) = lease.filter(|_| quantity > 0) else {
            return plain();
        };
        // What a plain decision of q would leave, from a peek (which copies no state, unlike an
        // admission: a sliding log's admission copies its entries): every algorithm admits q ≥ 1
        // exactly when q ≤ a peek's remaining, and then leaves remaining − q
        // (core/tests/properties.rs), so this is [`units_for`] without deciding q itself.
        let (peek, _) = self.decide_change(state, now, 0);
        let Some(left) = peek.remaining.checked_sub(quantity) else {
            return plain();
        };
        let units = grant_units(lease.max, left);
        if units == 0 {
            return plain();
        }
        let (leased, change) = self.decide_change(state, now, quantity.saturating_add(units));
        let ttl_ms = grant_ttl_ms(self, lease, &leased);
        if !leased.allowed || ttl_ms == 0 {
            // A fixed_window with under 1 ms left (nothing could be spent), or, never for states
            // the algorithms produce, a q + k that does not fit: the plain decision is right.
            return plain();
        }
        let grant = LeaseGrant { units, ttl_ms };
        (
            Leased {
                decision: leased,
                grant: Some(grant),
            },
            change,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::tests::lease;
    use crate::params::WindowParams;
    use crate::time::NANOS_PER_SEC as S;

    #[test]
    fn a_fixed_window_grant_ends_with_the_window() {
        let p = Params::FixedWindow(WindowParams {
            window_ms: 60_000,
            capacity: 100,
            calendar: None,
        });
        // 59.5 s into the window: 500 ms left, less than the 1 s ttl.
        let (l, _) = p.decide_leased(
            &State::Fresh,
            59_500 * NANOS_PER_MILLI,
            1,
            Some(lease(10, "1s")),
        );
        assert_eq!(
            l.grant,
            Some(LeaseGrant {
                units: 10,
                ttl_ms: 500
            })
        );
        // 0.5 ms left: nothing could be spent, so nothing is granted.
        let now = 60 * S - NANOS_PER_MILLI / 2;
        let (l, s) = p.decide_leased(&State::Fresh, now, 1, Some(lease(10, "1s")));
        assert_eq!(l.grant, None);
        assert_eq!((l.decision, s), p.decide_change(&State::Fresh, now, 1));
    }
}
