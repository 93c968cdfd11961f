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
//! So every algorithm qualifies today. [`is_exact`] is kept as an exhaustive guard, not as a
//! runtime filter: its `match` has no wildcard, so a seventh algorithm does not compile until
//! someone has reasoned about it here.
//!
//! # Two times per entry: the hold and the retry deadline
//!
//! An entry keeps two different instants, because they answer two different questions:
//!
//! - **hold** (`hold_until_ns`): until when the filter may answer locally. It is conservative
//!   twice over. The backend reports D rounded *up* to whole milliseconds and decided at some
//!   moment after the filter sent the callout, so the hold ends at `sent + D − 1 ms`, never later
//!   than the backend's own `decided + D`; and it is capped by `max_ttl_ms` (default 1 s), the
//!   longest a rule loosened or a key reset through the admin API can still be denied here.
//! - **retry deadline** (`retry_at_ns`): what the cached 429 tells the client. It is the backend's
//!   own deadline, `answered + D`, taken from when the answer arrived (never before the backend
//!   decided), so the cached `Retry-After` counts down to the same moment as the backend's answer
//!   did and never tells a client to come back too soon. Deriving it from the hold instead (as
//!   the first version did) told a client denied for 60 s to retry after 1 s.
//!
//! The reset deadline (`reset_at_ns`) is taken from the answer too; capacity, policy window and
//! remaining are copied from it, so a cached 429 renders the same headers, counted down.
//!
//! # Memory bound
//!
//! Entries live in a fixed number of slots (`slots`, default 65,536): the slot is a hash of the
//! identity, and the entry stores the full identity, so a collision is a miss, never a wrong
//! answer. An identity is at most 64 (action) + 1 + 10 (quantity) + 1 + 128 (key, bounded by
//! [`crate::key::MAX_KEY_BYTES`]) bytes, so every key can be cached and an entry is under 300
//! bytes.

use sluice_core::headers::RateLimit;
use sluice_core::time::{ceil_millis, NANOS_PER_MILLI};
use sluice_core::wire::ThrottleResponse;
use sluice_core::Algorithm;

/// Format version, the first byte of an entry: an entry in another layout (left in shared data
/// by an older filter in the same VM) is a miss.
const VERSION: u8 = 2;
const FIELDS: usize = 7;
const HEADER_LEN: usize = 1 + 8 * FIELDS;

/// Whether a denial under `algorithm` can be answered locally for its whole retry time: true for
/// all six. This is an exhaustive guard, kept so that a new algorithm must be reasoned about
/// (module docs) before its denials are cached: the match has no wildcard.
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

/// A remembered denial: when it may be answered locally, and what the 429 then says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// When the callout that was denied was sent (host clock, ns): the hold starts here.
    pub sent_ns: u64,
    /// Until when the denial is answered locally (exclusive): `sent + D − 1 ms`, capped by
    /// `max_ttl_ms`.
    pub hold_until_ns: u64,
    /// When the backend said the same request would pass: `answered + D`. `Retry-After` counts
    /// down to this.
    pub retry_at_ns: u64,
    /// When the key would be idle again: `answered + reset_after_ms`.
    pub reset_at_ns: u64,
    /// The rule's capacity (the quota of the headers).
    pub capacity: u64,
    /// The policy window in milliseconds.
    pub window_ms: u64,
    /// Remaining at the denial.
    pub remaining: u64,
}

impl Entry {
    /// The entry for a backend denial, or `None` when there is nothing to cache: an allowed answer,
    /// no retry time (the request can never pass), or a retry too short to hold (≤ 1 ms).
    /// `sent_ns` is when the callout left, `answered_ns` when its answer arrived.
    pub fn of_denial(
        r: &ThrottleResponse,
        sent_ns: u64,
        answered_ns: u64,
        max_ttl_ms: u64,
    ) -> Option<Entry> {
        if r.allowed {
            return None;
        }
        let retry_ms = r.retry_after_ms?;
        // The true retry time is more than retry_ms − 1 ms (it was rounded up).
        let hold_ms = retry_ms.saturating_sub(1).min(max_ttl_ms);
        if hold_ms == 0 {
            return None;
        }
        // A clock stepped back between send and answer: the deadline is at least sent + D.
        let answered_ns = answered_ns.max(sent_ns);
        let after = |base: u64, ms: u64| base.saturating_add(ms.saturating_mul(NANOS_PER_MILLI));
        Some(Entry {
            sent_ns,
            hold_until_ns: after(sent_ns, hold_ms),
            retry_at_ns: after(answered_ns, retry_ms),
            reset_at_ns: after(answered_ns, r.reset_after_ms),
            capacity: r.capacity,
            window_ms: r.window_ms,
            remaining: r.remaining,
        })
    }

    /// Whether the entry answers a request at `now`: `sent ≤ now < hold_until` (a clock that
    /// stepped back before the denial is a miss, not a longer denial).
    pub fn holds_at(&self, now_ns: u64) -> bool {
        self.sent_ns <= now_ns && now_ns < self.hold_until_ns
    }

    /// What a 429 answered from this entry at `now` says: the backend's numbers, with the retry
    /// and reset times counted down to the backend's own deadlines (rounded up to whole ms, as
    /// the backend rounds).
    pub fn rate_limit(&self, now_ns: u64) -> RateLimit {
        RateLimit {
            quota: self.capacity,
            window_ms: self.window_ms,
            remaining: self.remaining,
            reset_after_ms: ceil_millis(self.reset_at_ns.saturating_sub(now_ns)),
            retry_after_ms: Some(ceil_millis(self.retry_at_ns.saturating_sub(now_ns))),
        }
    }

    fn fields(&self) -> [u64; FIELDS] {
        [
            self.sent_ns,
            self.hold_until_ns,
            self.retry_at_ns,
            self.reset_at_ns,
            self.capacity,
            self.window_ms,
            self.remaining,
        ]
    }
}

/// The identity a cache entry is for: action, quantity and the (bounded) key.
pub fn identity(action: &str, quantity: u64, key: &str) -> Vec<u8> {
    format!("{action}\n{quantity}\n{key}").into_bytes()
}

/// The shared-data key of the slot an identity lives in.
pub fn slot_key(identity: &[u8], slots: u64) -> String {
    format!("sluice.denial.{}", fnv1a(identity) % slots.max(1))
}

/// Serialises an entry with its identity: the version byte, seven little-endian u64 in the order
/// of [`Entry`]'s fields, then the identity.
pub fn encode(entry: &Entry, identity: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + identity.len());
    out.push(VERSION);
    for n in entry.fields() {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(identity);
    out
}

/// The entry stored in `bytes` if it is for `identity`, in this layout, and holds at `now`.
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
        hold_until_ns: field(1)?,
        retry_at_ns: field(2)?,
        reset_at_ns: field(3)?,
        capacity: field(4)?,
        window_ms: field(5)?,
        remaining: field(6)?,
    };
    entry.holds_at(now_ns).then_some(entry)
}

/// FNV-1a, 64 bit: a fast, dependency-free slot hash (collisions only cost a miss).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::params::Params;
    use sluice_core::{Rule, State};

    const MS: u64 = NANOS_PER_MILLI;
    const T0: u64 = 1_700_000_000_000 * MS;

    /// A backend denial with retry `retry_ms`, as the decision API sends it.
    fn denial(algorithm: &str, retry_ms: Option<u64>, reset_ms: u64) -> ThrottleResponse {
        serde_json::from_value(serde_json::json!({
            "allowed": false, "algorithm": algorithm, "mode": "enforce", "capacity": 16,
            "remaining": 0, "retry_after_ms": retry_ms, "reset_after_ms": reset_ms,
            "level": 16.0, "window_ms": 32_000,
        }))
        .unwrap()
    }

    #[test]
    fn entries_round_trip_and_hold_only_inside_their_interval() {
        let e = Entry::of_denial(&denial("gcra", Some(500), 2_000), T0, T0, 1_000).unwrap();
        assert_eq!(
            e.hold_until_ns,
            T0 + 499 * MS,
            "rounded-up retry time minus 1 ms"
        );
        let id = identity("reply", 1, "alice");
        let bytes = encode(&e, &id);
        assert_eq!(lookup(&bytes, &id, T0), Some(e));
        assert_eq!(lookup(&bytes, &id, T0 + 499 * MS - 1), Some(e));
        assert_eq!(lookup(&bytes, &id, T0 + 499 * MS), None);
        assert_eq!(lookup(&bytes, &id, T0 - MS), None, "clock stepped back");
        let other = identity("reply", 1, "bob");
        assert_eq!(lookup(&bytes, &other, T0), None, "slot collision is a miss");
        assert_eq!(lookup(&bytes[..10], &id, T0), None, "truncated");
        assert_eq!(lookup(&[], &id, T0), None);
        let mut old_layout = bytes.clone();
        old_layout[0] = 1;
        assert_eq!(lookup(&old_layout, &id, T0), None, "another layout");
    }

    #[test]
    fn max_ttl_caps_the_hold_but_not_the_retry_deadline() {
        // sliding_log 5/min: the backend says 60 s; the cache holds 1 s and still says 60 s.
        let answered = T0 + 3 * MS;
        let e = Entry::of_denial(
            &denial("sliding_log", Some(60_000), 60_000),
            T0,
            answered,
            1_000,
        )
        .unwrap();
        assert_eq!(e.hold_until_ns, T0 + 1_000 * MS);
        assert_eq!(e.retry_at_ns, answered + 60_000 * MS);
        // 11 ms after the answer, the cached 429 counts down from the backend's deadline.
        let limit = e.rate_limit(answered + 11 * MS);
        assert_eq!(limit.retry_after_ms, Some(59_989));
        assert_eq!(limit.reset_after_ms, 59_989);
        assert_eq!(
            (limit.quota, limit.window_ms, limit.remaining),
            (16, 32_000, 0)
        );
        // A fraction of a millisecond left rounds up, as the backend rounds.
        let limit = e.rate_limit(answered + 11 * MS + 1);
        assert_eq!(limit.retry_after_ms, Some(59_989));
    }

    #[test]
    fn the_retry_deadline_never_precedes_the_send_time_plus_d() {
        // The host clock stepped back between send and answer.
        let e =
            Entry::of_denial(&denial("gcra", Some(5_000), 5_000), T0, T0 - 7 * MS, 1_000).unwrap();
        assert_eq!(e.retry_at_ns, T0 + 5_000 * MS);
    }

    #[test]
    fn what_is_not_cached() {
        assert_eq!(
            Entry::of_denial(&denial("gcra", Some(1), 1), T0, T0, 1_000),
            None
        );
        assert_eq!(
            Entry::of_denial(&denial("gcra", Some(0), 0), T0, T0, 1_000),
            None
        );
        assert_eq!(
            Entry::of_denial(&denial("gcra", None, 0), T0, T0, 1_000),
            None,
            "can never pass"
        );
        let mut allowed = denial("gcra", Some(500), 500);
        allowed.allowed = true;
        assert_eq!(
            Entry::of_denial(&allowed, T0, T0, 1_000),
            None,
            "shadow would-deny passed"
        );
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
            let params: Params = rule.params();
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
