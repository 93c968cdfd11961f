//! A worker's pocket: a few units of a lease that one Envoy worker took for itself from the shared
//! table, so its next admissions of that identity cost no hostcall at all.
//!
//! # Why
//!
//! A take from the shared table is one `get_shared_data` and one check-and-set `set_shared_data`
//! (~20k Envoy instructions of the ~97k a leased admission costs, benches/envoy/results/callgrind.md). When a take
//! succeeds and the lease still has plenty live, the same check-and-set also takes a small
//! [`chunk`] for this worker: the shared entry is debited for `quantity + chunk` exactly once, and
//! the chunk's units belong to this worker alone from then on. Its next admissions of that
//! identity are taken from the pocket, in the worker's own memory, until it is empty or expired.
//!
//! # Sizing the chunk
//!
//! At most a quarter of the units the lease has left after the take, and at most
//! [`MAX_POCKET_UNITS`] in a pocket, so one worker never takes most of a lease another worker
//! also spends from, and few units ever sit where only one worker can spend them. None at all
//! while fewer than [`MIN_LIVE_FOR_POCKET`] units are left: the last units of a lease are spent
//! through the shared table one admission at a time, so every worker sees each of them (as the
//! backend's grants shrink to one unit at a time as a key empties). An entry that never holds
//! more than 16 live units (one grant of a rule with `max` ≤ 16, say) therefore never makes a
//! pocket and behaves exactly as without pockets.
//!
//! # Lifetime
//!
//! A pocket's units keep the lifetime of the grants they came from: the latest `from` and the
//! earliest `until` among them ([`super::Lease::take_grant`]), and a chunk added to units already
//! in the pocket keeps the earlier `until` of the two. So a unit is never spent outside its own
//! grant's lifetime, and docs/algorithms.md's bound (admissions over any window are debits from
//! that window widened by `ttl`) holds as for units in the shared table. Pocket units that expire
//! unspent are lost like any leased unit (debited, never spent: under-admission).
//!
//! Nothing clears a pocket early, and nothing needs to: a grant newly stored by this worker
//! (`table::store`) adds to the shared entry and the pocket stays as it is (the two are spent
//! independently); a rule changed at the backend reaches leased traffic when its grants are spent
//! or expire, and a pocket is part of those grants, at most [`MAX_POCKET_UNITS`] units living no
//! longer than its grant. A new plugin configuration makes a new `Worker`, so its pockets go
//! (their units are lost: under-admission, at most [`MAX_POCKET_UNITS`] per identity and worker).
//!
//! # Headers
//!
//! A pocket keeps the shared entry as this worker last wrote it (`seen`): a pocket admission
//! reports `seen`'s backend `remaining` + `seen`'s units still live now + the pocket's units after
//! the admission, and `seen`'s reset deadline, quota and window. Other workers may have spent from
//! the shared entry since: the number is what this worker knows, as other Envoys' spending is
//! already unknown to every leased admission.
//!
//! # Memory bound
//!
//! [`MAX_POCKETS`] entries per worker: [`SETS`] sets of [`WAYS`], an identity's set chosen by its
//! hash, so a lookup compares at most [`WAYS`] identities whatever the keys. An entry is the
//! identity (at most ~194 bytes, see `table`), the pocket and the seen entry (at most
//! [`super::MAX_GRANTS`] grants): a few hundred bytes, so at most a few hundred KB per worker when
//! a thousand hot identities have pockets on it. A new identity takes a free way of its set, or
//! the least recently used way whose pocket is dead (empty, expired, or not yet live). A live
//! pocket is never evicted, so no unit is lost to eviction: an identity whose set is full of live
//! pockets gets no chunk and is served by the shared table until one of them empties or expires
//! (within the lease's ttl).

use sluice_core::headers::RateLimit;

use super::{Grant, Lease};

/// Most units one pocket holds: the units only this worker can spend, per identity.
pub const MAX_POCKET_UNITS: u64 = 16;
/// Fewest units the shared lease must have left (after the take) for a chunk to be taken.
pub const MIN_LIVE_FOR_POCKET: u64 = 16;
/// A chunk is at most this fraction (1 / n) of what the shared lease has left.
const CHUNK_SHARE: u64 = 4;
/// Sets of the pocket table.
pub const SETS: usize = 256;
/// Identities per set.
pub const WAYS: usize = 4;
/// Most identities with a pocket on one worker.
pub const MAX_POCKETS: usize = SETS * WAYS;

/// The units to pocket beside a take, when the shared lease has `live_after` units left after it
/// and the pocket already holds `in_pocket` live units: a quarter of what is left, within
/// [`MAX_POCKET_UNITS`] in all, and none below [`MIN_LIVE_FOR_POCKET`].
pub fn chunk(live_after: u64, in_pocket: u64) -> u64 {
    if live_after < MIN_LIVE_FOR_POCKET {
        return 0;
    }
    (live_after / CHUNK_SHARE).min(MAX_POCKET_UNITS.saturating_sub(in_pocket))
}

/// One identity's pocket on this worker.
#[derive(Debug)]
struct Entry {
    identity: Box<[u8]>,
    /// The pocket's units and when they may be spent.
    pocket: Grant,
    /// The shared entry as this worker last wrote it, for the headers.
    seen: Lease,
    /// The table's use counter at this entry's last use (least recently used is evicted first).
    used: u64,
}

/// Where a refill of an identity goes, found before the check-and-set that takes the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    set: usize,
    spot: Spot,
    /// Live units the identity's pocket holds now (0 when it has none).
    pub live: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spot {
    /// The identity's own entry.
    Mine(usize),
    /// A dead entry of another identity, to replace.
    Replace(usize),
    /// A free way.
    Push,
}

/// A worker's pockets: at most [`MAX_POCKETS`] identities (see the module's memory bound).
#[derive(Debug, Default)]
pub struct Pockets {
    /// [`SETS`] sets once the first pocket is made (none before: a worker that never pockets
    /// allocates nothing).
    sets: Vec<Vec<Entry>>,
    /// Counts takes and refills, to order entries by last use.
    uses: u64,
}

/// The set an identity's pocket goes to, by its table hash.
pub fn set_of(hash: u64) -> usize {
    // The high half: the shared table's slot is the hash modulo its slot count (the low bits).
    ((hash >> 32) as usize) % SETS
}

impl Pockets {
    /// Takes `quantity` units from the pocket of `identity` (its table hash `hash`) at `now`: the
    /// admission's headers, or `None` (no pocket, too few units, expired, or quantity 0: nothing
    /// taken, and the shared table is asked for the whole quantity).
    pub fn take(
        &mut self,
        hash: u64,
        identity: &[u8],
        quantity: u64,
        now_ns: u64,
    ) -> Option<RateLimit> {
        let entry = self
            .sets
            .get_mut(set_of(hash))?
            .iter_mut()
            .find(|e| *e.identity == *identity)?;
        if quantity == 0 || !entry.pocket.live_at(now_ns) || entry.pocket.units < quantity {
            return None;
        }
        entry.pocket.units -= quantity;
        self.uses += 1;
        entry.used = self.uses;
        Some(entry.seen.rate_limit_with(now_ns, entry.pocket.units))
    }

    /// Where a refill of `identity` at `now` would go, with its pocket's live units; `None` when
    /// its set is full of other identities' live pockets (then no chunk is taken).
    pub fn room(&self, hash: u64, identity: &[u8], now_ns: u64) -> Option<Room> {
        let set = set_of(hash);
        let Some(entries) = self.sets.get(set) else {
            return Some(Room {
                set,
                spot: Spot::Push,
                live: 0,
            });
        };
        if let Some(way) = entries.iter().position(|e| *e.identity == *identity) {
            let live = entries
                .get(way)
                .filter(|e| e.pocket.live_at(now_ns))
                .map_or(0, |e| e.pocket.units);
            return Some(Room {
                set,
                spot: Spot::Mine(way),
                live,
            });
        }
        if entries.len() < WAYS {
            return Some(Room {
                set,
                spot: Spot::Push,
                live: 0,
            });
        }
        let way = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.pocket.live_at(now_ns))
            .min_by_key(|(_, e)| e.used)
            .map(|(way, _)| way)?;
        Some(Room {
            set,
            spot: Spot::Replace(way),
            live: 0,
        })
    }

    /// After a take from the shared table succeeded: adds the `chunk` it pocketed (if any) to the
    /// identity's pocket at `room`, and keeps `seen` (the entry as written) for the headers. An
    /// identity with no entry gets one only with a chunk. Answers the pocket's live units, and
    /// the units this refill found lost (debited from the shared entry, never to be spent: an
    /// expired pocket's, an evicted dead pocket's, or the chunk itself when it has nowhere to
    /// go), which the caller counts in `sluice.lease_units_lost`; this is where an expired
    /// pocket's units are noticed, each once, since the pocket is emptied here.
    /// `room` must come from [`Pockets::room`] with no change to the table since (`spend` calls
    /// the two around one check-and-set); a stale one can only drop the chunk (units lost,
    /// never spent twice).
    pub fn refill(
        &mut self,
        room: Room,
        identity: &[u8],
        chunk: Option<Grant>,
        seen: Lease,
        now_ns: u64,
    ) -> (u64, u64) {
        self.uses += 1;
        let used = self.uses;
        let chunk_units = chunk.map_or(0, |c| c.units);
        if let Spot::Mine(way) = room.spot {
            let Some(entry) = self.sets.get_mut(room.set).and_then(|s| s.get_mut(way)) else {
                return (0, chunk_units);
            };
            entry.seen = seen;
            entry.used = used;
            let mut lost = 0;
            if !entry.pocket.live_at(now_ns) {
                lost = entry.pocket.units;
                entry.pocket.units = 0;
            }
            if let Some(chunk) = chunk {
                entry.pocket = if entry.pocket.units == 0 {
                    chunk
                } else {
                    Grant {
                        units: entry.pocket.units.saturating_add(chunk.units),
                        from_ns: entry.pocket.from_ns.max(chunk.from_ns),
                        until_ns: entry.pocket.until_ns.min(chunk.until_ns),
                        id: 0,
                        granted: 0,
                    }
                };
            }
            return (entry.pocket.units, lost);
        }
        let Some(chunk) = chunk else {
            return (0, 0);
        };
        if self.sets.is_empty() {
            self.sets.resize_with(SETS, Vec::new);
        }
        let Some(entries) = self.sets.get_mut(room.set) else {
            return (0, chunk.units);
        };
        let entry = Entry {
            identity: identity.into(),
            pocket: chunk,
            seen,
            used,
        };
        let mut lost = 0;
        match room.spot {
            Spot::Replace(way) => match entries.get_mut(way) {
                Some(slot) => {
                    // A dead pocket (empty, expired, or not live yet): what it held is lost.
                    lost = slot.pocket.units;
                    *slot = entry;
                }
                None => return (0, chunk.units),
            },
            _ => {
                if entries.len() >= WAYS {
                    return (0, chunk.units);
                }
                entries.push(entry);
            }
        }
        (chunk.units, lost)
    }

    /// Identities with an entry (live pocket or not): at most [`MAX_POCKETS`].
    pub fn len(&self) -> usize {
        self.sets.iter().map(Vec::len).sum()
    }

    /// No identity has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live units in `identity`'s pocket at `now` (0 without one).
    pub fn units(&self, hash: u64, identity: &[u8], now_ns: u64) -> u64 {
        self.sets
            .get(set_of(hash))
            .and_then(|s| s.iter().find(|e| *e.identity == *identity))
            .filter(|e| e.pocket.live_at(now_ns))
            .map_or(0, |e| e.pocket.units)
    }
}
