//! The lease table in proxy-wasm shared data: every worker of this Envoy reads and writes the
//! same entries, each write a check-and-set against the version it read, so two workers can
//! never spend the same unit (the loser of a race reads again and takes from what is left).
//! [`spend`] asks the worker's pocket (`super::pocket`) first and the table only when the pocket
//! cannot admit; a take from the table may move a chunk into the pocket in the same write, so
//! those units too are debited from the entry exactly once.
//!
//! # Memory bound
//!
//! Shared data never expires, so the table is a fixed number of slots (`lease.slots`), like the
//! denial cache. An identity has two candidate slots (two hashes): it is stored in the first
//! unless that one holds another identity's live lease, then in the second. When both hold other
//! live leases, the one with fewer live units is replaced: its grants are given back
//! (`super::returns`) and its key calls out again. Entries are at most 42 + 4 × 40 + 194 bytes
//! (the identity is bounded by the action and the 128-byte key).
//!
//! The same entry carries the mark of a grant in flight ([`ask`]), and the worker's tick takes
//! expired grants out of it ([`sweep`]).
//!
//! # Inserting
//!
//! Envoy's check-and-set ignores the version when the key is absent, so an insert passes a
//! version no entry is expected to have (`u32::MAX`, the 4,294,967,295th write of this Envoy):
//! while the slot is absent the write succeeds, and if another worker inserted first it fails
//! as a conflict. (In the unlikely case the other entry's version is exactly that number, its
//! lease is overwritten: units lost, never spent twice.)

use sluice_core::headers::RateLimit;

use super::pocket::{self, Pockets};
use super::{decode, encode, give_back, Lease, Return};
use crate::cache::fnv1a;
use crate::host::{CasError, Counter, Host};

/// Most check-and-set rounds per operation before giving up (then a request calls out, and a
/// grant is dropped: both safe).
pub const MAX_CAS_TRIES: usize = 8;

/// The version an insert passes: while the slot is absent Envoy ignores it; once another worker
/// has inserted, it (almost surely) mismatches, so the insert becomes a conflict.
const INSERT: u32 = u32::MAX;

/// The two hashes of an identity: FNV-1a, and a second, independent-enough one (splitmix64's
/// finaliser over the first). The slots are these modulo the slot count; the second also picks
/// the identity's set in the worker's pocket table.
fn hashes(identity: &[u8]) -> [u64; 2] {
    let h = fnv1a(identity);
    let mut h2 = h ^ 0x9e37_79b9_7f4a_7c15;
    h2 = (h2 ^ (h2 >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h2 = (h2 ^ (h2 >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h2 ^= h2 >> 31;
    [h, h2]
}

/// The two slot numbers of an identity (the same twice when `slots` is 1).
fn slot_numbers([h, h2]: [u64; 2], slots: u64) -> [u64; 2] {
    let slots = slots.max(1);
    [h % slots, h2 % slots]
}

/// The hash the worker's pocket table files `identity` under.
pub fn pocket_hash(identity: &[u8]) -> u64 {
    hashes(identity)[1]
}

fn slot_key(slot: u64) -> String {
    format!("sluice.lease.{slot}")
}

/// The two slot keys of an identity (the same key twice when `slots` is 1).
pub fn slot_keys(identity: &[u8], slots: u64) -> [String; 2] {
    slot_numbers(hashes(identity), slots).map(slot_key)
}

/// What a slot holds, for one identity.
enum Slot {
    Absent,
    Mine(Lease, u32),
    /// Another identity's entry (or one of another layout): its live units, its version, and
    /// its lease and identity when it decodes (what a replacement gives back).
    Other {
        live: u64,
        version: u32,
        entry: Option<(Lease, Vec<u8>)>,
    },
}

fn read(host: &dyn Host, key: &str, identity: &[u8], now_ns: u64) -> Slot {
    match host.shared_get_versioned(key) {
        None => Slot::Absent,
        Some((bytes, version)) => match decode(&bytes) {
            Some((lease, id)) if id == identity => Slot::Mine(lease, version),
            Some((lease, id)) => Slot::Other {
                live: lease.live_units(now_ns),
                version,
                entry: Some((lease, id.to_vec())),
            },
            None => Slot::Other {
                live: 0,
                version,
                entry: None,
            },
        },
    }
}

/// Takes `quantity` units of the lease of `identity` at `now`, if this worker's pocket or the
/// shared table has them: the numbers the admission's headers show, or `None` (no lease, spent,
/// expired, or no agreement after [`MAX_CAS_TRIES`] rounds): then the request calls out.
///
/// The pocket is tried first, with no hostcall. Otherwise the shared entry is read and written
/// back with `quantity` taken, plus a [`pocket::chunk`] for this worker's pocket when the lease
/// has plenty left and the pocket table has room: one check-and-set debits both, once.
///
/// Grants found expired with units left leave the entry with this write and are added to
/// `returns`, once the write succeeds (so each is given back once; `super::returns`). A take
/// that fails while the entry holds expired units writes the entry without them (one more
/// check-and-set, on that rare path only). Pocket units lost on the way (an expired pocket, a
/// chunk the pocket table could not keep) are counted in `sluice.lease_units_lost`.
pub fn spend(
    host: &mut dyn Host,
    pockets: &mut Pockets,
    identity: &[u8],
    slots: u64,
    quantity: u64,
    now_ns: u64,
    returns: &mut Vec<Return>,
) -> Option<RateLimit> {
    let hashes = hashes(identity);
    let pocket_hash = hashes[1];
    if let Some(limit) = pockets.take(pocket_hash, identity, quantity, now_ns) {
        return Some(limit);
    }
    let room = pockets.room(pocket_hash, identity, now_ns);
    let numbers = slot_numbers(hashes, slots);
    let candidates = if numbers[0] == numbers[1] { 1 } else { 2 };
    for (i, &number) in numbers.iter().take(candidates).enumerate() {
        // Formatted per candidate: a hit in the first slot never builds the second's key.
        let key = &slot_key(number);
        for _ in 0..MAX_CAS_TRIES {
            let (mut lease, version) = match read(host, key, identity, now_ns) {
                Slot::Mine(lease, version) => (lease, version),
                // Slots are never removed, and an identity goes to its second slot only when
                // the first is taken: an absent first slot means no lease anywhere.
                Slot::Absent if i == 0 => return None,
                Slot::Absent | Slot::Other { .. } => break,
            };
            let expired = lease.drop_dead(now_ns);
            if !lease.take(quantity, now_ns) {
                if !expired.is_empty()
                    && host
                        .shared_set_if(key, &encode(&lease, identity), version)
                        .is_ok()
                {
                    give_back(returns, identity, expired);
                }
                break;
            }
            let extra = room.map_or(0, |r| pocket::chunk(lease.live_units(now_ns), r.live));
            let chunk = lease.take_grant(extra, now_ns);
            match host.shared_set_if(key, &encode(&lease, identity), version) {
                Ok(()) => {
                    give_back(returns, identity, expired);
                    let limit = lease.rate_limit(now_ns);
                    let (pocketed, dropped) = match room {
                        Some(r) => pockets.refill(r, identity, chunk, lease, now_ns),
                        None => (0, 0),
                    };
                    if dropped > 0 {
                        host.count_by(Counter::LeaseUnitsLost, dropped);
                    }
                    return Some(RateLimit {
                        remaining: limit.remaining.saturating_add(pocketed),
                        ..limit
                    });
                }
                Err(CasError::Conflict) => continue,
                Err(CasError::Failed) => return None,
            }
        }
    }
    None
}

/// The slot a write for `identity` goes to, with what it holds: the first candidate unless it
/// holds another identity's live lease; then the second, unless that holds more live units than
/// the first (the one with fewer live units is replaced).
fn choose<'k>(
    host: &dyn Host,
    keys: &'k [String; 2],
    identity: &[u8],
    now_ns: u64,
) -> (&'k String, Slot) {
    let first = read(host, &keys[0], identity, now_ns);
    match first {
        Slot::Mine(..) | Slot::Absent | Slot::Other { live: 0, .. } => (&keys[0], first),
        Slot::Other {
            live: first_live, ..
        } => {
            if keys[0] == keys[1] {
                return (&keys[0], first);
            }
            match read(host, &keys[1], identity, now_ns) {
                Slot::Other {
                    live: second_live, ..
                } if second_live > first_live => (&keys[0], first),
                second => (&keys[1], second),
            }
        }
    }
}

/// What a miss that is about to call out should ask for ([`ask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Ask for a lease: this request marked the entry (or no mark could be written).
    Grant,
    /// Another request's grant for this identity is in flight: ask for this request alone.
    Exact,
}

/// Before a miss of `identity` calls out at `now`: whether it asks for a lease. The first miss
/// marks the entry (`asking_until` = `until_ns`, one check-and-set) and asks; a miss that finds
/// a live mark in either candidate slot asks without a lease, so grants for one identity are
/// asked one at a time. The mark ends when a grant is stored ([`store`]) or at `until_ns` (the
/// callout's timeout: a lost answer cannot stop grants for longer). A slot of another identity
/// is taken for a mark only when that identity's lease has no live units (its grants, expired or
/// not live yet, are then added to `returns`). When no mark can be written (both slots hold other
/// identities' live leases, conflicts, a refused write), the miss asks for a lease as before: a
/// grant too many is given back when it expires.
pub fn ask(
    host: &mut dyn Host,
    identity: &[u8],
    slots: u64,
    now_ns: u64,
    until_ns: u64,
    returns: &mut Vec<Return>,
) -> Ask {
    let keys = slot_keys(identity, slots);
    for _ in 0..MAX_CAS_TRIES {
        let (key, current) = choose(host, &keys, identity, now_ns);
        let first_is_other = matches!(current, Slot::Other { .. }) && *key == keys[0];
        if first_is_other && keys[0] != keys[1] {
            // The first slot holds another identity's expired lease: this identity may sit in
            // its second slot (stored there while the first was live), marked there. An absent
            // first slot means no entry anywhere, and `choose` read the second already otherwise.
            if let Slot::Mine(lease, _) = read(host, &keys[1], identity, now_ns) {
                if now_ns < lease.asking_until_ns {
                    return Ask::Exact;
                }
            }
        }
        let marked = |mut lease: Lease| {
            lease.asking_until_ns = until_ns;
            encode(&lease, identity)
        };
        let empty = || Lease {
            capacity: 0,
            window_ms: 0,
            remaining: 0,
            reset_at_ns: 0,
            asking_until_ns: 0,
            grants: Vec::new(),
        };
        let (value, version, replaced) = match current {
            Slot::Mine(lease, _) if now_ns < lease.asking_until_ns => return Ask::Exact,
            Slot::Mine(lease, version) => (marked(lease), version, None),
            Slot::Absent => (marked(empty()), INSERT, None),
            // A mark never displaces another identity's live lease (a grant may, in `store`).
            Slot::Other { live, .. } if live > 0 => return Ask::Grant,
            Slot::Other { version, entry, .. } => (marked(empty()), version, entry),
        };
        match host.shared_set_if(key, &value, version) {
            Ok(()) => {
                if let Some((lease, other)) = replaced {
                    give_back(returns, &other, lease.grants);
                }
                return Ask::Grant;
            }
            Err(CasError::Conflict) => continue,
            Err(CasError::Failed) => return Ask::Grant,
        }
    }
    Ask::Grant
}

/// The worker's tick, once a grant it stored for `identity` has expired: takes every expired
/// grant with units left out of the identity's entries (one check-and-set each) and adds them
/// to `returns`, so a key that goes quiet gives its units back too. `false` when a write lost
/// [`MAX_CAS_TRIES`] races (try again at the next tick); `true` when done, including when
/// another worker's take or store got there first (each grant leaves the table once).
pub fn sweep(
    host: &mut dyn Host,
    identity: &[u8],
    slots: u64,
    now_ns: u64,
    returns: &mut Vec<Return>,
) -> bool {
    let keys = slot_keys(identity, slots);
    let candidates = if keys[0] == keys[1] { 1 } else { 2 };
    for key in keys.iter().take(candidates) {
        let mut done = false;
        for _ in 0..MAX_CAS_TRIES {
            let Slot::Mine(mut lease, version) = read(host, key, identity, now_ns) else {
                done = true;
                break;
            };
            let expired = lease.drop_dead(now_ns);
            if expired.is_empty() {
                done = true;
                break;
            }
            match host.shared_set_if(key, &encode(&lease, identity), version) {
                Ok(()) => {
                    give_back(returns, identity, expired);
                    done = true;
                    break;
                }
                Err(CasError::Conflict) => continue,
                Err(CasError::Failed) => break,
            }
        }
        if !done {
            return false;
        }
    }
    true
}

/// Adds a granted lease to the table (merged with a live lease of the same identity, the mark of
/// a grant in flight cleared). `false` when it could not be stored: the grant is then added to
/// `returns` whole (debited, never spent: given back).
///
/// Once the write succeeds, what it takes out of the table is added to `returns` too: this
/// identity's expired grants with units left and a grant beyond [`super::MAX_GRANTS`]
/// ([`Lease::absorb`]), or every grant of another identity's entry it replaces.
pub fn store(
    host: &mut dyn Host,
    identity: &[u8],
    slots: u64,
    granted: &Lease,
    now_ns: u64,
    returns: &mut Vec<Return>,
) -> bool {
    let keys = slot_keys(identity, slots);
    for _ in 0..MAX_CAS_TRIES {
        let (key, current) = choose(host, &keys, identity, now_ns);
        let (value, version, back, other) = match current {
            Slot::Absent => (encode(granted, identity), INSERT, Vec::new(), None),
            Slot::Mine(lease, version) => {
                let (merged, back) = lease.absorb(granted.clone(), now_ns);
                (encode(&merged, identity), version, back, None)
            }
            Slot::Other { version, entry, .. } => {
                (encode(granted, identity), version, Vec::new(), entry)
            }
        };
        match host.shared_set_if(key, &value, version) {
            Ok(()) => {
                give_back(returns, identity, back);
                if let Some((lease, other)) = other {
                    give_back(returns, &other, lease.grants);
                }
                return true;
            }
            Err(CasError::Conflict) => continue,
            Err(CasError::Failed) => break,
        }
    }
    give_back(returns, identity, granted.grants.iter().copied());
    false
}
