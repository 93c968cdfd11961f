//! What the lease test files share: the fixed clock, the table size, a grant, an identity, an
//! idle host and a store whose returns are not looked at.

use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::ThrottleResponse;

use super::{identity, table, Lease};
use crate::fake_host::FakeHost;

pub(super) const MS: u64 = NANOS_PER_MILLI;
pub(super) const T0: u64 = 1_700_000_000_000 * MS;
pub(super) const SLOTS: u64 = 65_536;

/// A lease of `units` granted by a callout sent at `sent` (answered 2 ms later) with `ttl_ms`;
/// the backend's `remaining` is 40 of a capacity of 1000.
pub(super) fn granted_for(units: u64, sent: u64, ttl_ms: u64) -> Lease {
    let answer: ThrottleResponse = serde_json::from_str(&format!(
        r#"{{"allowed": true, "algorithm": "gcra", "mode": "enforce", "capacity": 1000,
        "remaining": 40, "retry_after_ms": null, "reset_after_ms": 6000, "level": 60.0,
        "window_ms": 10000, "lease": {{"units": {units}, "ttl_ms": {ttl_ms}}}}}"#
    ))
    .unwrap();
    Lease::of_answer(&answer, sent, sent + 2 * MS, sent).unwrap()
}

/// The identity of `key` under the action `reply`.
pub(super) fn id(key: &str) -> Vec<u8> {
    identity("reply", key)
}

/// A host at `T0` with no request of interest.
pub(super) fn host() -> FakeHost {
    let mut h = FakeHost::request("GET", "/");
    h.now = T0;
    h
}

/// A store whose returns are not looked at (`lost_tests` looks at them).
pub(super) fn store(
    h: &mut FakeHost,
    identity: &[u8],
    slots: u64,
    granted: &Lease,
    now: u64,
) -> bool {
    table::store(h, identity, slots, granted, now, &mut Vec::new())
}
