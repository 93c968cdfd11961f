//! The name of one piece of throttle state in the memory store: one string, so a key costs one
//! allocation and a lookup builds nothing else.

use sluice_core::{Action, Algorithm};

/// The name of a rule's key: a tag for the algorithm, the action, `/`, then the client's key.
///
/// Actions are `[A-Za-z0-9_.:-]` (no `/`), so the first `/` always ends the action and no two
/// (action, key) pairs share a name, whatever the key holds. The algorithm is part of the name so
/// a rule that changes algorithm starts its keys fresh.
pub(crate) fn rule_slot(action: &Action, algorithm: Algorithm, key: &str) -> String {
    let action = action.as_str();
    let mut name = String::with_capacity(1 + action.len() + 1 + key.len());
    name.push(algorithm_tag(algorithm));
    name.push_str(action);
    name.push('/');
    name.push_str(key);
    name
}

/// The name of a redis-cell compatible `cl.throttle` key: its own namespace (`#`, which no rule
/// tag uses).
pub(crate) fn cell_slot(key: &str) -> String {
    let mut name = String::with_capacity(1 + key.len());
    name.push('#');
    name.push_str(key);
    name
}

/// One letter per algorithm (an exhaustive match: a new algorithm must pick its own).
fn algorithm_tag(algorithm: Algorithm) -> char {
    match algorithm {
        Algorithm::FixedWindow => 'F',
        Algorithm::SlidingLog => 'L',
        Algorithm::SlidingWindow => 'W',
        Algorithm::LeakyBucket => 'B',
        Algorithm::Gcra => 'G',
        Algorithm::TokenBucket => 'T',
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::action;

    #[test]
    fn names_never_collide_across_actions_keys_algorithms_or_cells() {
        let names = [
            rule_slot(&action("a:b"), Algorithm::Gcra, "c"),
            rule_slot(&action("a"), Algorithm::Gcra, "b:c"),
            rule_slot(&action("a"), Algorithm::Gcra, "b/c"),
            rule_slot(&action("a-b"), Algorithm::Gcra, "c"),
            rule_slot(&action("a"), Algorithm::TokenBucket, "b/c"),
            cell_slot("Ga/b/c"),
            cell_slot("a"),
        ];
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        let tags: std::collections::HashSet<char> =
            Algorithm::ALL.iter().map(|a| algorithm_tag(*a)).collect();
        assert_eq!(tags.len(), Algorithm::ALL.len());
        assert!(!tags.contains(&'#'));
    }
}
