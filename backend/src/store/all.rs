//! All-or-nothing checks (several limits on one request) ([`sluice_core::all`]): what a store is given
//! and what it answers. Both stores resolve each check to a state name (memory slot, Redis key);
//! checks naming the same state share one slot of the core decision.

use sluice_core::all::{Check, Part};
use sluice_core::{Decision, Mode, Rule};

/// One check as the store receives it: the rule that applies to the key (overrides already
/// resolved), the key and the units asked for.
#[derive(Debug, Clone, Copy)]
pub struct CheckRequest<'a> {
    /// The rule.
    pub rule: &'a Rule,
    /// The key (subject).
    pub key: &'a str,
    /// Units asked for; 0 peeks.
    pub quantity: u64,
    /// All or nothing with the request's other checks, or counted on its own
    /// (envoyproxy/ratelimit's semantics).
    pub part: Part,
}

/// A store's answer to an all-or-nothing request.
#[derive(Debug, Clone, PartialEq)]
pub struct AllOutcome {
    /// One decision per check, in order ([`sluice_core::all::AllDecision::decisions`]).
    pub decisions: Vec<Decision>,
    /// The first check an enforced rule denied; `None` when the request passes.
    pub denied: Option<usize>,
    /// Redis Cluster only: checks reserved before a later one denied whose refund found their
    /// key already changed by another request, so their debit stays (see docs/api.md). Always 0
    /// on the memory store and a single Redis node, where the request is one atomic step.
    pub unrefunded: usize,
}

/// The distinct state names of `checks` (by `name`, in first-seen order) and the core checks
/// pointing into them.
pub(crate) fn plan(
    checks: &[CheckRequest<'_>],
    name: impl Fn(&Rule, &str) -> String,
) -> (Vec<String>, Vec<Check>) {
    let mut names: Vec<String> = Vec::with_capacity(checks.len());
    let planned = checks
        .iter()
        .map(|c| {
            let own = name(c.rule, c.key);
            let slot = match names.iter().position(|n| *n == own) {
                Some(slot) => slot,
                None => {
                    names.push(own);
                    names.len() - 1
                }
            };
            Check {
                params: c.rule.params(),
                enforce: c.rule.mode() == Mode::Enforce,
                quantity: c.quantity,
                slot,
                part: c.part,
            }
        })
        .collect();
    (names, planned)
}
