//! What a worker has learnt of each action's rule: whether it grants leases. It decides only
//! whether a miss marks the lease entry before asking for a grant (`table::ask`): marking costs
//! a shared-data write per callout, worth it for a rule that leases (it keeps concurrent misses
//! from taking one grant each) and a waste for one that never does (most rules, with the default
//! `lease.enabled: true`), which would also fill the table with marks.
//!
//! An action starts unknown, and is marked while unknown. An answer to a request that asked for
//! a lease teaches it: a grant means the rule leases; an allowed, enforced answer with at least 2
//! units left and no grant means it does not (a rule with a lease grants at least one unit
//! whenever 2 or more are left after the request, core's `lease::grant_units`; the only other
//! reason for no grant, a `fixed_window` with under 1 ms left, is rare and corrected by the next
//! answer). Misses of a rule known not to lease still ask for a lease (without a mark), so a rule
//! that gains one is learnt from its first grant.

/// What is known of one action's rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Leases {
    /// Nothing yet: mark.
    #[default]
    Unknown,
    /// It granted a lease: mark.
    Granted,
    /// An answer that would have carried a grant did not: do not mark.
    Never,
}

/// Per action index (the configuration's actions; beyond the table, always unknown).
#[derive(Debug, Default)]
pub struct RuleLeases {
    by_action: Vec<Leases>,
}

/// An allowed answer to a request that asked for a lease, as [`RuleLeases::learn`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// It carried a grant.
    Granted,
    /// Allowed and enforced, with no grant, `remaining` units left.
    NoGrant {
        /// The units the backend said are left.
        remaining: u64,
    },
    /// Allowed in shadow mode (it would have denied): says nothing about the rule's leases.
    Shadow,
}

impl RuleLeases {
    /// All unknown, for `actions` actions.
    pub fn new(actions: usize) -> RuleLeases {
        RuleLeases {
            by_action: vec![Leases::Unknown; actions],
        }
    }

    /// Whether a miss of this action marks the entry before asking for a grant.
    pub fn marks(&self, action_index: usize) -> bool {
        self.by_action.get(action_index) != Some(&Leases::Never)
    }

    /// Learns from an allowed answer to a request that asked for a lease.
    pub fn learn(&mut self, action_index: usize, answer: LeaseAnswer) {
        let Some(seen) = self.by_action.get_mut(action_index) else {
            return;
        };
        match answer {
            LeaseAnswer::Granted => *seen = Leases::Granted,
            LeaseAnswer::NoGrant { remaining } if remaining >= 2 => *seen = Leases::Never,
            LeaseAnswer::NoGrant { .. } | LeaseAnswer::Shadow => {}
        }
    }
}
