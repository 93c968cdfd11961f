//! The denial cache: after the backend denies (action, key, quantity) with a retry time D, the
//! filter answers the same request 429 locally, from proxy-wasm shared data (shared by every
//! worker), until D has passed, with no callout.
//!
//! # When this is exact
//!
//! A cached denial is exact when the backend would have denied every one of those requests too.
//! That needs two things of the algorithm, given the rule and the store are unchanged:
//!
//! 1. A denial changes no state (true of all six: core's shared convention, and the Lua twins).
//! 2. Once denied at `t0` with retry D, the same request is denied at every `t` in `[t0, t0 + D)`,
//!    whatever other requests arrive meanwhile. Other requests can only be admitted (adding
//!    usage), never remove usage, so it suffices that with no admissions the answer stays "deny"
//!    until `t0 + D`, i.e. that D is the *first* time the request fits:
//!    - `gcra`: denied while `t < tat + increment − tolerance`; D is exactly that distance, and tat
//!      only grows. Exact.
//!    - `leaky_bucket`: the level falls linearly at one ns per ns; D = level + need − tolerance is
//!      the first moment it fits. Exact.
//!    - `token_bucket`: tokens rise linearly; D = need − tokens is the first moment. Exact.
//!    - `fixed_window`: the count only grows inside the window; D = the window's end. Exact.
//!    - `sliding_log`: entries expire in order; D = the moment the entry that must go expires, and
//!      no earlier moment has enough room. Exact.
//!    - `sliding_window`: inside the current window the weighted previous count falls
//!      monotonically, so the fit condition `prev × (W − e) ≤ room × W` becomes true once and stays
//!      true; core's `first_fit_ms` returns the first such millisecond, else the first in the next
//!      window, where the condition is again monotone, else two windows on. So D is the first moment
//!      the backend would admit. Exact *with respect to the backend's answers*, which is what the
//!      cache must reproduce (the algorithm itself is an approximation of a true sliding count).
//!
//! So every algorithm qualifies; [`is_exact`] still decides per algorithm, so that a new one must
//! be reasoned about before its denials are cached (the match has no wildcard).
//!
//! Rounding and latency are handled conservatively: the backend reports D rounded *up* to whole
//! milliseconds and decided at some moment after the filter sent the callout, so the entry expires
//! at `sent + D_ms − 1 ms`, which is never later than the backend's own `decided + D`.
//!
//! What the cache cannot see: a rule changed or a key reset through the admin API during D. The
//! `max_ttl_ms` bound (default 1 s) caps how long such a stale denial can last.
//!
//! # Memory bound
//!
//! Entries live in a fixed number of slots (`slots`, default 65,536): the slot is a hash of the
//! identity, and the entry stores the full identity, so a collision is a miss, never a wrong
//! answer. Identities longer than [`MAX_IDENTITY`] bytes are not cached (those keys always go to
//! the backend, which stores them by digest).

use sluice_core::Algorithm;

/// Longest identity (action, quantity, key) that is cached.
pub const MAX_IDENTITY: usize = 512;

const NS_PER_MS: u64 = 1_000_000;
const VERSION: u8 = 1;
const HEADER_LEN: usize = 1 + 8 * 6;

/// Whether a denial under `algorithm` can be answered locally for its whole retry time.
/// See the module docs for the reasoning per algorithm.
pub fn is_exact(algorithm: Algorithm) -> bool {
    match algorithm {
        Algorithm::Gcra
        | Algorithm::LeakyBucket
        | Algorithm::TokenBucket
        | Algorithm::FixedWindow
        | Algorithm::SlidingLog
        | Algorithm::SlidingWindow => true,
    }
}

/// A remembered denial, with what the 429's headers need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// When the callout that was denied was sent (host clock, ns).
    pub sent_ns: u64,
    /// Until when the denial holds (exclusive).
    pub expires_ns: u64,
    /// When the key would be idle again.
    pub reset_ns: u64,
    /// The limit reported by the backend.
    pub limit: u64,
    /// The policy window in milliseconds.
    pub window_ms: u64,
    /// Remaining at the denial.
    pub remaining: u64,
}

/// The identity a cache entry is for.
pub fn identity(action: &str, quantity: u64, key: &str) -> Option<Vec<u8>> {
    let id = format!("{action}\n{quantity}\n{key}").into_bytes();
    (id.len() <= MAX_IDENTITY).then_some(id)
}

/// The shared-data key of the slot an identity lives in.
pub fn slot_key(identity: &[u8], slots: u64) -> String {
    format!("sluice.denial.{}", fnv1a(identity) % slots.max(1))
}

/// The entry to store for a denial, or `None` when the denial is too short to cache.
/// `retry_after_ms` is the backend's rounded-up retry time; `max_ttl_ms` the configured cap.
pub fn entry_for(
    sent_ns: u64,
    retry_after_ms: u64,
    reset_after_ms: u64,
    max_ttl_ms: u64,
    limit: u64,
    window_ms: u64,
    remaining: u64,
) -> Option<Entry> {
    // The true retry time is more than retry_after_ms − 1 ms (it was rounded up).
    let hold_ms = retry_after_ms.saturating_sub(1).min(max_ttl_ms);
    if hold_ms == 0 {
        return None;
    }
    Some(Entry {
        sent_ns,
        expires_ns: sent_ns.saturating_add(hold_ms.saturating_mul(NS_PER_MS)),
        reset_ns: sent_ns.saturating_add(reset_after_ms.saturating_mul(NS_PER_MS)),
        limit,
        window_ms,
        remaining,
    })
}

/// Serialises an entry with its identity.
pub fn encode(entry: &Entry, identity: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + identity.len());
    out.push(VERSION);
    for n in [
        entry.sent_ns,
        entry.expires_ns,
        entry.reset_ns,
        entry.limit,
        entry.window_ms,
        entry.remaining,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(identity);
    out
}

/// The entry stored in `bytes` if it is for `identity` and holds at `now` (`sent ≤ now <
/// expires`: a clock that stepped back before the denial is a miss, not a longer denial).
pub fn lookup(bytes: &[u8], identity: &[u8], now_ns: u64) -> Option<Entry> {
    let (head, stored_id) = (bytes.get(..HEADER_LEN)?, bytes.get(HEADER_LEN..)?);
    if head.first() != Some(&VERSION) || stored_id != identity {
        return None;
    }
    let field = |i: usize| -> Option<u64> {
        let start = 1 + 8 * i;
        let raw: [u8; 8] = head.get(start..start + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(raw))
    };
    let entry = Entry {
        sent_ns: field(0)?,
        expires_ns: field(1)?,
        reset_ns: field(2)?,
        limit: field(3)?,
        window_ms: field(4)?,
        remaining: field(5)?,
    };
    (entry.sent_ns <= now_ns && now_ns < entry.expires_ns).then_some(entry)
}

/// FNV-1a, 64 bit: a fast, dependency-free slot hash (collisions only cost a miss).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::params::Params;
    use sluice_core::{Rule, State};

    const MS: u64 = NS_PER_MS;

    #[test]
    fn entries_round_trip_and_hold_only_inside_their_interval() {
        let e = entry_for(1_000 * MS, 500, 2_000, 1_000, 16, 32_000, 0).unwrap();
        assert_eq!(e.expires_ns, 1_499 * MS, "rounded-up retry time minus 1 ms");
        let id = identity("reply", 1, "alice").unwrap();
        let bytes = encode(&e, &id);
        assert_eq!(lookup(&bytes, &id, 1_000 * MS), Some(e));
        assert_eq!(lookup(&bytes, &id, 1_499 * MS - 1), Some(e));
        assert_eq!(lookup(&bytes, &id, 1_499 * MS), None);
        assert_eq!(lookup(&bytes, &id, 999 * MS), None, "clock stepped back");
        let other = identity("reply", 1, "bob").unwrap();
        assert_eq!(
            lookup(&bytes, &other, 1_000 * MS),
            None,
            "slot collision is a miss"
        );
        assert_eq!(lookup(&bytes[..10], &id, 1_000 * MS), None, "truncated");
        assert_eq!(lookup(&[], &id, 1_000 * MS), None);
    }

    #[test]
    fn max_ttl_caps_and_tiny_retries_are_not_cached() {
        let e = entry_for(0, 60_000, 60_000, 1_000, 1, 60_000, 0).unwrap();
        assert_eq!(e.expires_ns, 1_000 * MS);
        assert_eq!(entry_for(0, 1, 1, 1_000, 1, 1, 0), None);
        assert_eq!(entry_for(0, 0, 0, 1_000, 1, 1, 0), None);
    }

    #[test]
    fn long_identities_are_not_cached() {
        assert!(identity("a", 1, &"k".repeat(600)).is_none());
        assert!(identity("a", 1, "k").is_some());
    }

    #[test]
    fn slots_are_bounded() {
        for k in 0..200 {
            let key = slot_key(format!("a\n1\n{k}").as_bytes(), 7);
            let n: u64 = key.rsplit('.').next().unwrap().parse().unwrap();
            assert!(n < 7);
        }
    }

    /// The exactness claim, checked against core's own transitions: for each algorithm, fill a
    /// key, take a denial at t0 with retry D, then probe every algorithm at many instants inside
    /// [t0, t0 + D): all must be denied, and at t0 + D the request must pass.
    #[test]
    fn a_denial_holds_for_exactly_its_retry_time_in_every_algorithm() {
        let rules = [
            r#"{"action": "a", "algorithm": "gcra", "capacity": 3, "rate": {"count": 7, "period": "1s"}}"#,
            r#"{"action": "a", "algorithm": "leaky_bucket", "capacity": 3, "rate": {"count": 7, "period": "1s"}}"#,
            r#"{"action": "a", "algorithm": "token_bucket", "capacity": 3, "rate": {"count": 7, "period": "1s"}}"#,
            r#"{"action": "a", "algorithm": "fixed_window", "capacity": 3, "window": "1s"}"#,
            r#"{"action": "a", "algorithm": "sliding_log", "capacity": 3, "window": "1s"}"#,
            r#"{"action": "a", "algorithm": "sliding_window", "capacity": 3, "window": "1s"}"#,
        ];
        for json in rules {
            let rule = Rule::from_json_str(json).unwrap();
            assert!(is_exact(rule.algorithm()));
            let params = Params::of(&rule);
            // Several starting phases, with admissions spread out so windows and logs differ.
            for phase in [0u64, 137 * MS + 5, 999 * MS, 1_500 * MS + 3] {
                let mut state = State::Fresh;
                let mut t = 10_000 * MS + phase;
                let mut denial = None;
                for _ in 0..20 {
                    let (d, next) = params.decide(&state, t, 1);
                    state = next;
                    if !d.allowed {
                        denial = d.retry_after.map(|r| (t, r));
                        break;
                    }
                    t += 90 * MS;
                }
                let (t0, retry) = denial.unwrap_or_else(|| panic!("{json}: never denied"));
                let steps = 200u64;
                for i in 0..steps {
                    let t = t0 + retry * i / steps;
                    let (d, after) = params.decide(&state, t, 1);
                    assert!(
                        !d.allowed,
                        "{json} phase {phase}: allowed at t0 + {}",
                        t - t0
                    );
                    assert_eq!(after, state, "{json}: a denial changed state");
                }
                let (d, _) = params.decide(&state, t0 + retry - 1, 1);
                assert!(!d.allowed, "{json}: allowed 1 ns early");
                let (d, _) = params.decide(&state, t0 + retry, 1);
                assert!(
                    d.allowed,
                    "{json} phase {phase}: still denied at t0 + retry"
                );
            }
        }
    }
}
