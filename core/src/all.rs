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
        let (decision, mut change) = check.params.decide_change(current, now, check.quantity);
        if !decision.allowed && check.part == Part::OnItsOwn {
            // Takes what is left: the limit is full after it, as the peer's counter is past it.
            if decision.remaining > 0 && check.quantity > 0 {
                change = check
                    .params
                    .decide_change(current, now, decision.remaining)
                    .1;
            }
        } else if !decision.allowed && check.enforce {
            let decisions = checks
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == index {
                        decision
                    } else {
                        c.params.decide_change(original(c.slot), now, 0).0
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
