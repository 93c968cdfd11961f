//! All-or-nothing checks (several limits on one request): the request passes only if every check allows
//! it, and a denied request consumes nothing from any of its limits.
//!
//! Checks are decided in order, each against the state the earlier ones left (two checks on the
//! same state slot, e.g. the same action and key twice, see each other's debit). The first check
//! an enforced rule denies decides the answer; then no state changes at all, and every other
//! check's result is a peek (quantity 0) of the unchanged state, so the limit headers show what
//! each limit really has left. A shadow rule's would-deny never denies (it is reported in its
//! result, as for one check). A check [`Part::OnItsOwn`] is counted on its own, as
//! envoyproxy/ratelimit counts each descriptor of a request: it never denies the request, and a
//! quantity that does not fit takes what is left (the peer's counter goes past the limit; see
//! docs/rls.md, "Whose semantics"). No leases: a lease is spent by one filter for one key, and
//! granting units of several limits at once would tie them to a request set nobody tracks.
//!
//! This is the reference the stores are held to: the memory store runs it under every involved
//! shard lock, the Redis store's `throttle_all.lua` is its twin in one script call.

use crate::decision::Decision;
use crate::params::Params;
use crate::state::State;
use crate::time::Nanos;

/// One check of an all-or-nothing request, resolved to its rule's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// The rule's parameters.
    pub params: Params,
    /// Whether the rule is enforced (a shadow rule never denies).
    pub enforce: bool,
    /// Units asked for (0 peeks).
    pub quantity: u64,
    /// Index of the state this check reads and writes in the `states` slice: checks naming the
    /// same (action, algorithm, key) share one slot.
    pub slot: usize,
    /// How the check takes part in its request.
    pub part: Part,
}

impl Check {
    /// The parameters the check is counted with: its rule's, with one unit more for
    /// [`Part::PastTheLimit`].
    pub fn counted_params(&self) -> Params {
        match self.part {
            Part::PastTheLimit => self.params.one_past(),
            Part::AllOrNothing | Part::OnItsOwn => self.params,
        }
    }

    /// What the check would answer for quantity 0 on `state` (nothing changes).
    pub fn peek(&self, state: &State, now: Nanos) -> Decision {
        let d = self.counted_params().decide_change(state, now, 0).0;
        match self.part {
            Part::PastTheLimit => peer_view(d, self.params.capacity(), 0),
            Part::AllOrNothing | Part::OnItsOwn => d,
        }
    }
}

/// How a check takes part in its request: all or nothing with the others (sluice's own
/// semantics), or on its own (envoyproxy/ratelimit's, where every descriptor is counted whatever
/// the others answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Part {
    /// An enforced rule's denial denies the request, and then nothing changes anywhere.
    #[default]
    AllOrNothing,
    /// Never denies the request; denied, it debits what is left of its limit (nothing when
    /// nothing is left), so that a debit too large for what is left still fills the limit.
    OnItsOwn,
    /// envoyproxy/ratelimit's counting: on its own, with room for one unit past the capacity
    /// (the peer's counter passes its limit, and past it only that it is past changes a later
    /// answer, so the counter is kept at most one past), and decided as the peer decides: over
    /// when the counter after it is past the capacity ([`peer_view`]).
    PastTheLimit,
}

/// A decision made with one unit of room past `capacity` ([`Part::PastTheLimit`]), as
/// envoyproxy/ratelimit answers it: allowed only when the counter after it is within the
/// capacity, with one unit less remaining; otherwise over with nothing remaining, to retry when
/// the key resets (never, for more units than the capacity).
pub fn peer_view(d: Decision, capacity: u64, quantity: u64) -> Decision {
    let within = d.allowed && d.remaining > 0;
    Decision {
        allowed: within,
        capacity,
        remaining: if within { d.remaining - 1 } else { 0 },
        retry_after: match (within, quantity > capacity) {
            (true, _) | (false, true) => None,
            (false, false) => d.retry_after.or(Some(d.reset_after)),
        },
        level: d.level,
        reset_after: d.reset_after,
    }
}

/// What [`decide_all`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct AllDecision {
    /// One decision per check, in order (see the module docs for a denied request).
    pub decisions: Vec<Decision>,
    /// The first check an enforced rule denied; `None` when the request passes.
    pub denied: Option<usize>,
    /// Per state slot: the new state to store, `None` when it is unchanged (always `None` for a
    /// denied request).
    pub changes: Vec<Option<State>>,
}

impl AllDecision {
    /// Whether the request passes.
    pub fn allowed(&self) -> bool {
        self.denied.is_none()
    }
}

/// Decides every check at `now` against `states` (indexed by [`Check::slot`]; a slot out of
/// range reads as a fresh state and is never written). Pure: the caller stores `changes` in one
/// atomic step.
pub fn decide_all(checks: &[Check], states: &[State], now: Nanos) -> AllDecision {
    let fresh = State::Fresh;
    let original = |slot: usize| states.get(slot).unwrap_or(&fresh);
    let mut changes: Vec<Option<State>> = vec![None; states.len()];
    let mut decisions = Vec::with_capacity(checks.len());
    for (index, check) in checks.iter().enumerate() {
        let current = changes
            .get(check.slot)
            .and_then(Option::as_ref)
            .unwrap_or_else(|| original(check.slot));
        let params = check.counted_params();
        let (mut decision, mut change) = params.decide_change(current, now, check.quantity);
        if !decision.allowed && check.part != Part::AllOrNothing {
            // Takes what is left: the limit is full after it.
            if decision.remaining > 0 && check.quantity > 0 {
                change = params.decide_change(current, now, decision.remaining).1;
            }
        }
        if check.part == Part::PastTheLimit {
            decision = peer_view(decision, check.params.capacity(), check.quantity);
        }
        // A check on its own never denies the request.
        if check.part == Part::AllOrNothing && !decision.allowed && check.enforce {
            let decisions = checks
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == index {
                        decision
                    } else {
                        c.peek(original(c.slot), now)
                    }
                })
                .collect();
            return AllDecision {
                decisions,
                denied: Some(index),
                changes: vec![None; states.len()],
            };
        }
        if let (Some(next), Some(slot)) = (change, changes.get_mut(check.slot)) {
            *slot = Some(next);
        }
        decisions.push(decision);
    }
    AllDecision {
        decisions,
        denied: None,
        changes,
    }
}
