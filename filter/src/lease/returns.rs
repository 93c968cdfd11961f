//! Giving leased units back: a grant taken out of the lease table with units left becomes a
//! commit of that grant (`POST /v1/commit`, core's [`CommitRequest`]), sent from the worker's
//! commit queue on the root's tick (`crate::cost::Commits`, as a cost route's commit).
//!
//! Why a commit: a grant is a reservation the backend decided in one step with its request,
//! `granted` units for the key; what the filter spent of it is its actual cost. The commit then
//! gives back `granted − spent` as far as the algorithm can (core's `commit`: a fixed window
//! only within the grant's window, a meter not what has leaked since), the same rules a cost
//! route's refund follows, with nothing new on the wire. The id is the grant's (`lease-<id>`,
//! 16 hex digits drawn by the worker that stored it): the backend applies one id once per
//! action and key, so a return sent again after a lost answer refunds once.
//!
//! `reserved_at_ms` is when the callout that earned the grant left (its `from`): at or before
//! the backend's decision, so a meter's refund is never too large and a sliding log never
//! removes an entry newer than the grant.

use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::CommitRequest;

use super::Return;

/// The commit id of the grant `id`.
pub fn commit_id(id: u64) -> String {
    format!("lease-{id:016x}")
}

/// The commit that gives `r`'s units back, or `None` when its identity is not `action\nkey`
/// (never for an entry this filter wrote).
pub fn commit(r: &Return) -> Option<CommitRequest> {
    let at = r.identity.iter().position(|&b| b == b'\n')?;
    let action = std::str::from_utf8(r.identity.get(..at)?).ok()?;
    let key = String::from_utf8_lossy(r.identity.get(at + 1..)?).into_owned();
    let granted = r.grant.granted.max(r.grant.units);
    Some(CommitRequest {
        action: action.to_owned(),
        key,
        reserved: granted,
        actual: granted - r.grant.units,
        id: commit_id(r.grant.id),
        reserved_at_ms: r.grant.from_ns / NANOS_PER_MILLI,
        timeout_ms: None,
        sent_at_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{identity, Grant};

    #[test]
    fn a_return_commits_the_units_left_of_what_was_granted_under_the_grants_id() {
        let r = Return {
            identity: identity("reply", "alice"),
            grant: Grant {
                units: 70,
                from_ns: 1_700_000_000_123 * NANOS_PER_MILLI + 456,
                until_ns: 0,
                id: 0xabc,
                granted: 100,
            },
        };
        let c = commit(&r).unwrap();
        assert_eq!((c.action.as_str(), c.key.as_str()), ("reply", "alice"));
        assert_eq!((c.reserved, c.actual), (100, 30));
        assert_eq!(c.id, "lease-0000000000000abc");
        assert_eq!(c.reserved_at_ms, 1_700_000_000_123);
        assert!(c.validate().is_ok());
        let odd = Return {
            identity: b"no newline".to_vec(),
            ..r
        };
        assert_eq!(commit(&odd), None);
    }
}
