//! Leases: units the backend debited in advance for one (action, key), which this Envoy admits
//! itself, with no callout, until they are spent or their ttl passes.
//!
//! The filter asks for a lease on every HTTP callout (`ThrottleRequest.lease`; the rule decides
//! whether one is granted). An allowed answer may carry `lease: {units, ttl_ms}`; the filter
//! stores it in proxy-wasm shared data ([`table`]), so every worker of this Envoy spends from
//! the same lease, and takes `quantity` units from it for each later request of that key, each
//! take a check-and-set, so no unit is spent twice. A take from a lease with plenty left also
//! moves a few units (at most 16) into the worker's own [`pocket`], in the same check-and-set:
//! that worker's next admissions of the key are taken from there with no hostcall at all.
//!
//! # One grant in flight per identity
//!
//! A miss (no live units for the identity) that calls out first marks the entry: a grant is
//! being asked for until `asking_until` (the send + the callout's timeout) ([`table::ask`]).
//! Misses of the same identity that find the mark call out without asking for a lease: each is
//! decided exactly, quantity by quantity, with no units taken in advance. The grant's store
//! clears the mark; a lost answer (a timeout, a failure, a denial) leaves it to expire, so it can
//! never stop grants for longer than one callout timeout. Before, 32 concurrent misses of a cold
//! key each took a whole grant.
//!
//! # Units given back
//!
//! Each grant carries an id (drawn by the worker that stored it) and the units it was granted. A
//! grant that expires with units left is taken out of the entry by a check-and-set (by a take, a
//! store, or the worker's tick sweep, [`table::sweep`], whichever comes first: each grant once)
//! and its units are given back to the backend as a commit of that grant: reserved = the units
//! granted, actual = the units spent, id `lease-<grant id>` ([`returns`]); the backend applies
//! one id once, so a retried return refunds once. A grant that cannot be kept (the table refuses
//! the write, a fifth grant side by side, another identity's entry replaced) is given back the
//! same way. What a return cannot reach is counted in `sluice.lease_units_lost`: pocket units
//! that expire on their worker (at most 16 per worker and identity), a grant whose answer came
//! after its request ended, a return the backend refused or never accepted.
//!
//! # What an entry holds
//!
//! Up to [`MAX_GRANTS`] grants for one identity, each `{units left, from, until, id, granted}`:
//! grants that arrive while an earlier one is still live (a grant asked while the marker had
//! expired, or a new grant while the last units of the previous one are still live) are kept
//! side by side, each with its own expiry, and spent soonest-expiring first. A grant beyond
//! [`MAX_GRANTS`] is given back whole.
//!
//! - `from` is when the callout left (`sent`), `until` is `sent + ttl_ms`. The backend counts the
//!   ttl from when it answered, which is after `sent`: the filter's window is never later than
//!   the backend's, so `fixed_window`'s cap at the window's end holds here too. A clock that
//!   stepped back before `from` makes a grant unusable, never longer-lived.
//! - The header numbers of the newest answer: capacity, policy window, the backend's `remaining`
//!   (which already excludes the leased units) and when the key is idle again (`reset_at`).
//!
//! # Headers on a leased admission
//!
//! `remaining` = the backend's remaining at the newest grant + the units still live in this
//! Envoy's lease after this admission: what this Envoy can still admit right now, to the best of
//! its knowledge (other Envoys spend from the global remaining meanwhile; the next callout
//! corrects it). The allowed answer that brings a grant says the same: the backend's remaining +
//! the granted units. `reset` counts down to the newest answer's own deadline; spending leased
//! units does not move it, since they were debited already. No `Retry-After`: it is an admission.
//!
//! With pockets, "this Envoy's lease" is, as this worker knows it, the shared entry's live units
//! plus this worker's pocket after the admission:
//!
//! - a take from the shared table: the entry as written (backend remaining + its live units,
//!   after the take and the chunk) + the pocket's units (including the chunk just taken), which
//!   is what the take alone said before pockets;
//! - a take from the pocket: the shared entry as this worker last wrote it (`seen`: its backend
//!   remaining, its units still live now, its reset deadline, quota and window) + the pocket's
//!   units after the take. Other workers' spending since is not seen, nor their pockets (at most
//!   16 units each), as other Envoys' spending is not.
//!
//! On one worker the count goes down by `quantity` per admission whichever way it was taken.

use sluice_core::headers::RateLimit;
use sluice_core::limits::{MAX_LEASE_TTL_MS, MAX_LEASE_UNITS};
use sluice_core::time::{ceil_millis, NANOS_PER_MILLI};
use sluice_core::wire::ThrottleResponse;

pub mod pocket;
pub mod table;

pub mod asking;
pub mod returns;
pub mod watch;

/// Layout version, the first byte of an entry: an entry of another layout (an older filter in
/// the same VM) is treated as free.
const VERSION: u8 = 2;
/// Most grants one entry keeps side by side.
pub const MAX_GRANTS: usize = 4;
/// Version, grant count, then capacity, window_ms, remaining, reset_at, asking_until.
const HEAD_LEN: usize = 2 + 8 * 5;
/// Units, from, until, id, granted.
const GRANT_LEN: usize = 8 * 5;

/// Units of one grant and when they may be spent: `from ≤ now < until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Units not spent yet.
    pub units: u64,
    /// When the callout that earned them left (host clock, ns).
    pub from_ns: u64,
    /// `from + ttl` (exclusive).
    pub until_ns: u64,
    /// The grant's id, drawn by the worker that stored it: its return's commit id
    /// (`lease-<id>`, [`returns`]). 0 on a part taken for a pocket (never returned).
    pub id: u64,
    /// Units the backend granted: a return commits `actual = granted − units`.
    pub granted: u64,
}

/// Units to give back to the backend: a grant taken out of the table with units left, and the
/// identity it was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Return {
    /// `action\nkey`.
    pub identity: Vec<u8>,
    /// The grant as it left the table (`units` are the ones to give back).
    pub grant: Grant,
}

/// Adds every grant of `grants` with units left to `out`, as returns for `identity`.
pub fn give_back(out: &mut Vec<Return>, identity: &[u8], grants: impl IntoIterator<Item = Grant>) {
    for grant in grants.into_iter().filter(|g| g.units > 0) {
        out.push(Return {
            identity: identity.to_vec(),
            grant,
        });
    }
}

impl Grant {
    fn live_at(&self, now_ns: u64) -> bool {
        self.units > 0 && self.from_ns <= now_ns && now_ns < self.until_ns
    }
}

/// The lease of one (action, key): its grants and the newest answer's header numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The rule's capacity (the quota of the headers).
    pub capacity: u64,
    /// The policy window in milliseconds.
    pub window_ms: u64,
    /// The backend's `remaining` at the newest grant (leased units excluded).
    pub remaining: u64,
    /// When the key is idle again, per the newest answer (host clock, ns).
    pub reset_at_ns: u64,
    /// A grant for this identity is being asked for until then (host clock, ns; 0: none): other
    /// misses call out without asking for one ([`table::ask`]).
    pub asking_until_ns: u64,
    /// At most [`MAX_GRANTS`].
    pub grants: Vec<Grant>,
}

impl Lease {
    /// The lease an answer grants, or `None`: not an admission (a denial or a shadow
    /// would-deny), no grant, or a grant of nothing. Units and ttl are capped at core's bounds,
    /// whatever the answer says. `sent_ns` is when the callout left, `answered_ns` when the
    /// answer arrived, `id` the grant's id (see [`Grant::id`]).
    pub fn of_answer(
        r: &ThrottleResponse,
        sent_ns: u64,
        answered_ns: u64,
        id: u64,
    ) -> Option<Lease> {
        let grant = r.lease?;
        if !r.allowed || r.would_deny || grant.units == 0 || grant.ttl_ms == 0 {
            return None;
        }
        let ttl_ns = grant
            .ttl_ms
            .min(MAX_LEASE_TTL_MS)
            .saturating_mul(NANOS_PER_MILLI);
        let answered_ns = answered_ns.max(sent_ns);
        let units = grant.units.min(MAX_LEASE_UNITS);
        Some(Lease {
            capacity: r.capacity,
            window_ms: r.window_ms,
            remaining: r.remaining,
            reset_at_ns: answered_ns
                .saturating_add(r.reset_after_ms.saturating_mul(NANOS_PER_MILLI)),
            asking_until_ns: 0,
            grants: vec![Grant {
                units,
                from_ns: sent_ns,
                until_ns: sent_ns.saturating_add(ttl_ns),
                id,
                granted: units,
            }],
        })
    }

    /// Units that may be spent at `now`.
    pub fn live_units(&self, now_ns: u64) -> u64 {
        self.grants
            .iter()
            .filter(|g| g.live_at(now_ns))
            .fold(0, |sum, g| sum.saturating_add(g.units))
    }

    /// Takes `quantity` units at `now`, soonest-expiring grant first; `false` (and nothing
    /// taken) when fewer than `quantity` are live. A quantity of 0 takes nothing and fails: a
    /// lease is for admissions that cost something.
    pub fn take(&mut self, quantity: u64, now_ns: u64) -> bool {
        self.take_grant(quantity, now_ns).is_some()
    }

    /// [`Lease::take`], answering what was taken as one grant that lives only while every grant
    /// it drew from would have (the latest `from`, the earliest `until`): a worker's pocket keeps
    /// its units under that grant, so none is spent outside its own grant's lifetime.
    ///
    /// Only live grants are drawn from and only emptied ones are dropped: an expired grant's
    /// units stay for [`Lease::drop_dead`] to count (`sluice.lease_units_lost`), and a grant not
    /// live yet (its `from` after this `now`: another worker's callout left after this request
    /// read the clock, and its answer was stored before this take read the entry) stays to be
    /// spent once it is live. Dropping it (as this did until 2026-11-26) lost a whole grant
    /// whenever a worker was descheduled between its clock read and its take for as long as
    /// another worker's callout took (`lost_tests`).
    pub fn take_grant(&mut self, quantity: u64, now_ns: u64) -> Option<Grant> {
        if quantity == 0 || self.live_units(now_ns) < quantity {
            return None;
        }
        self.grants.sort_by_key(|g| g.until_ns);
        let mut taken = Grant {
            units: quantity,
            from_ns: 0,
            until_ns: u64::MAX,
            id: 0,
            granted: 0,
        };
        let mut need = quantity;
        for g in self.grants.iter_mut().filter(|g| g.live_at(now_ns)) {
            if need == 0 {
                break;
            }
            let part = g.units.min(need);
            g.units -= part;
            need -= part;
            taken.from_ns = taken.from_ns.max(g.from_ns);
            taken.until_ns = taken.until_ns.min(g.until_ns);
        }
        self.grants.retain(|g| g.units > 0);
        Some(taken)
    }

    /// Drops the grants that are spent or expired at `now`, answering the expired ones that
    /// still hold units: debited by the backend, never spent (the caller gives them back once
    /// its write of the entry succeeds, [`returns`]). A grant not live yet is kept: its units
    /// are still to be spent.
    pub fn drop_dead(&mut self, now_ns: u64) -> Vec<Grant> {
        let mut dead = Vec::new();
        self.grants.retain(|g| {
            if now_ns < g.until_ns {
                return g.units > 0;
            }
            if g.units > 0 {
                dead.push(*g);
            }
            false
        });
        dead
    }

    /// Units not spent yet, live, expired or not live yet: what this entry's grants still hold.
    pub fn unspent_units(&self) -> u64 {
        self.grants
            .iter()
            .fold(0, |sum, g| sum.saturating_add(g.units))
    }

    /// This lease with a newer grant added: dead grants dropped, the newer answer's header
    /// numbers, no grant asked for any more (the answer came), and at most [`MAX_GRANTS`]
    /// grants. Also answers the grants to give back: the expired ones with units left
    /// ([`Lease::drop_dead`]) and the newer ones that do not fit beside [`MAX_GRANTS`] live ones
    /// (whole: no unit of them was spent). Grants are never merged, so each keeps its own id.
    pub fn absorb(mut self, newer: Lease, now_ns: u64) -> (Lease, Vec<Grant>) {
        let mut back = self.drop_dead(now_ns);
        for g in newer.grants {
            if self.grants.len() < MAX_GRANTS {
                self.grants.push(g);
            } else {
                back.push(g);
            }
        }
        self.grants.sort_by_key(|g| g.until_ns);
        let lease = Lease {
            grants: self.grants,
            asking_until_ns: 0,
            ..newer
        };
        (lease, back)
    }

    /// What an admission from this lease at `now` tells the client (after the take).
    pub fn rate_limit(&self, now_ns: u64) -> RateLimit {
        self.rate_limit_with(now_ns, 0)
    }

    /// [`Lease::rate_limit`] for a worker that also holds `pocketed` units of this lease in its
    /// pocket (after the admission): they are units this Envoy can still spend.
    pub fn rate_limit_with(&self, now_ns: u64, pocketed: u64) -> RateLimit {
        RateLimit {
            quota: self.capacity,
            window_ms: self.window_ms,
            remaining: self
                .remaining
                .saturating_add(self.live_units(now_ns))
                .saturating_add(pocketed),
            reset_after_ms: ceil_millis(self.reset_at_ns.saturating_sub(now_ns)),
            retry_after_ms: None,
        }
    }
}

/// The identity a lease is for: the action and the (bounded) key. Units are units: routes of
/// one action with different quantities share the lease.
pub fn identity(action: &str, key: &str) -> Vec<u8> {
    let mut id = Vec::with_capacity(action.len() + 1 + key.len());
    start_identity(&mut id, action);
    id.extend_from_slice(key.as_bytes());
    id
}

/// Starts an [`identity`] in `out` (emptied first): the action and the separator, for the key to
/// be appended in place.
pub fn start_identity(out: &mut Vec<u8>, action: &str) {
    out.clear();
    out.extend_from_slice(action.as_bytes());
    out.push(b'\n');
}

/// Serialises a lease with its identity: version, grant count, five little-endian u64 (capacity,
/// window_ms, remaining, reset_at, asking_until), five per grant (units, from, until, id,
/// granted), then the identity.
/// Grants beyond [`MAX_GRANTS`] are not written (callers keep to the bound).
pub fn encode(lease: &Lease, identity: &[u8]) -> Vec<u8> {
    let grants = &lease.grants[..lease.grants.len().min(MAX_GRANTS)];
    let mut out = Vec::with_capacity(HEAD_LEN + GRANT_LEN * grants.len() + identity.len());
    out.push(VERSION);
    out.push(grants.len() as u8);
    for n in [
        lease.capacity,
        lease.window_ms,
        lease.remaining,
        lease.reset_at_ns,
        lease.asking_until_ns,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    for g in grants {
        for n in [g.units, g.from_ns, g.until_ns, g.id, g.granted] {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    out.extend_from_slice(identity);
    out
}

/// The lease stored in `bytes` and the identity it is for, if `bytes` is an entry of this layout.
pub fn decode(bytes: &[u8]) -> Option<(Lease, &[u8])> {
    if bytes.first() != Some(&VERSION) {
        return None;
    }
    let count = usize::from(*bytes.get(1)?);
    if count > MAX_GRANTS {
        return None;
    }
    let u64_at = |at: usize| -> Option<u64> {
        let raw: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(raw))
    };
    let mut grants = Vec::with_capacity(count);
    for i in 0..count {
        let at = HEAD_LEN + GRANT_LEN * i;
        grants.push(Grant {
            units: u64_at(at)?,
            from_ns: u64_at(at + 8)?,
            until_ns: u64_at(at + 16)?,
            id: u64_at(at + 24)?,
            granted: u64_at(at + 32)?,
        });
    }
    let lease = Lease {
        capacity: u64_at(2)?,
        window_ms: u64_at(10)?,
        remaining: u64_at(18)?,
        reset_at_ns: u64_at(26)?,
        asking_until_ns: u64_at(34)?,
        grants,
    };
    let identity = bytes.get(HEAD_LEN + GRANT_LEN * count..)?;
    Some((lease, identity))
}

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pocket_tests;

#[cfg(test)]
mod lost_tests;
