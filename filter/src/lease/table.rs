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
//! live leases, the one with fewer live units is replaced: its units are lost to this Envoy
//! (debited, never spent: under-admission for that key, never over-admission). Entries are at
//! most 34 + 4 × 24 + 194 bytes (the identity is bounded by the action and the 128-byte key).
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
use super::{decode, encode, Lease};
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
    /// Another identity's entry (or one of another layout): its live units, its unspent units
    /// (live or not: what a replacement loses) and its version.
    Other {
        live: u64,
        unspent: u64,
        version: u32,
    },
}

fn read(host: &dyn Host, key: &str, identity: &[u8], now_ns: u64) -> Slot {
    match host.shared_get_versioned(key) {
        None => Slot::Absent,
        Some((bytes, version)) => match decode(&bytes) {
            Some((lease, id)) if id == identity => Slot::Mine(lease, version),
            Some((lease, _)) => Slot::Other {
                live: lease.live_units(now_ns),
                unspent: lease.unspent_units(),
                version,
            },
            None => Slot::Other {
                live: 0,
                unspent: 0,
                version,
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
/// Units lost on the way (grants found expired with units left, dropped by this write; an
/// expired pocket, or a chunk the pocket table could not keep) are counted in
/// `sluice.lease_units_lost`, only once the write that drops them succeeds, so each is counted
/// once. A take that fails while the entry holds expired units writes the entry without them
/// (one more check-and-set, on that rare path only), so a key that goes quiet after its lease
/// expired does not hide the loss.
pub fn spend(
    host: &mut dyn Host,
    pockets: &mut Pockets,
    identity: &[u8],
    slots: u64,
    quantity: u64,
    now_ns: u64,
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
                if expired > 0
                    && host
                        .shared_set_if(key, &encode(&lease, identity), version)
                        .is_ok()
                {
                    host.count_by(Counter::LeaseUnitsLost, expired);
                }
                break;
            }
            let extra = room.map_or(0, |r| pocket::chunk(lease.live_units(now_ns), r.live));
            let chunk = lease.take_grant(extra, now_ns);
            match host.shared_set_if(key, &encode(&lease, identity), version) {
                Ok(()) => {
                    let limit = lease.rate_limit(now_ns);
                    let (pocketed, dropped) = match room {
                        Some(r) => pockets.refill(r, identity, chunk, lease, now_ns),
                        None => (0, 0),
                    };
                    let lost = expired.saturating_add(dropped);
                    if lost > 0 {
                        host.count_by(Counter::LeaseUnitsLost, lost);
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

/// Adds a granted lease to the table (merged with a live lease of the same identity). `false`
/// when it could not be stored: the grant's units are then lost to this Envoy (debited, never
/// spent), which under-admits and never over-admits.
///
/// Every unit lost here is counted in `sluice.lease_units_lost`: the grant's when it cannot be
/// stored; otherwise, once the write succeeds, the units of expired grants it drops from this
/// identity's entry, or every unspent unit of another identity's entry it replaces.
pub fn store(
    host: &mut dyn Host,
    identity: &[u8],
    slots: u64,
    granted: &Lease,
    now_ns: u64,
) -> bool {
    let keys = slot_keys(identity, slots);
    for _ in 0..MAX_CAS_TRIES {
        let first = read(host, &keys[0], identity, now_ns);
        let (key, current) = match first {
            Slot::Mine(..) | Slot::Absent | Slot::Other { live: 0, .. } => (&keys[0], first),
            Slot::Other {
                live: first_live, ..
            } => {
                if keys[0] == keys[1] {
                    (&keys[0], first)
                } else {
                    match read(host, &keys[1], identity, now_ns) {
                        Slot::Other {
                            live: second_live, ..
                        } if second_live > first_live => (&keys[0], first),
                        second => (&keys[1], second),
                    }
                }
            }
        };
        let (value, version, lost) = match current {
            Slot::Absent => (encode(granted, identity), INSERT, 0),
            Slot::Mine(lease, version) => {
                let (merged, expired) = lease.absorb(granted.clone(), now_ns);
                (encode(&merged, identity), version, expired)
            }
            Slot::Other {
                unspent, version, ..
            } => (encode(granted, identity), version, unspent),
        };
        match host.shared_set_if(key, &value, version) {
            Ok(()) => {
                if lost > 0 {
                    host.count_by(Counter::LeaseUnitsLost, lost);
                }
                return true;
            }
            Err(CasError::Conflict) => continue,
            Err(CasError::Failed) => break,
        }
    }
    host.count_by(Counter::LeaseUnitsLost, granted.unspent_units());
    false
}
