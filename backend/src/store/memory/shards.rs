//! Throttle state for the memory store: shards of bounded [`Table`]s, each behind a
//! `std::sync::Mutex` held only for one pure transition (never across an `.await`), so concurrent
//! requests on one key are serialised exactly like a Redis script and requests on different keys
//! rarely contend.
//!
//! The store's bound (`--max-keys`) is split evenly between the shards: each table holds at most
//! its share, so the total never exceeds the bound, and a full shard makes room by itself (no
//! global lock, no global counter on the hot path). Keys hash uniformly over the shards, so under
//! a spray every shard fills to its share; a working set near the bound may see its fullest shard
//! evict while the total is a little under it (about 1% at a million keys).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use sluice_core::all::{decide_all, AllDecision, Check};
use sluice_core::{Decision, Lease, Leased, Nanos, Params, State};

use super::table::{Evictions, Table};
use super::worth::Worth;

/// Fewest operations (or visits) between two sweeps of a shard.
const MIN_SWEEP_INTERVAL: usize = 64;

struct Shard {
    table: Table,
    ops_since_sweep: usize,
    /// Newest store time this shard has seen (so health is judged in store time, also in tests
    /// that pass fixed times).
    latest: Nanos,
}

impl Shard {
    /// Counts one operation on (or visit to) this shard, and drops expired entries once at least
    /// as many have passed as the shard holds entries: the sweep's cost is amortised to O(1) per
    /// operation, and the map never holds many more entries than were active within their TTL.
    fn maybe_sweep(&mut self, now: Nanos) {
        self.latest = self.latest.max(now);
        self.ops_since_sweep += 1;
        if self.ops_since_sweep >= self.table.len().max(MIN_SWEEP_INTERVAL) {
            self.table.sweep(now);
            self.ops_since_sweep = 0;
        }
    }
}

/// Totals over every shard, read under each shard's lock in turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Rows held.
    pub(crate) rows: usize,
    /// Bytes held, as the tables weigh them (at least `BYTES_PER_KEY` a row).
    pub(crate) weight: usize,
    /// Sum of each shard's most rows after any operation: at least the most the whole store
    /// ever held.
    pub(crate) peak: usize,
    /// Evictions of keys that still held state.
    pub(crate) live_evictions: u64,
    /// Already-fresh keys dropped to make room.
    pub(crate) fresh_evictions: u64,
    /// Store time of the newest live eviction.
    pub(crate) last_live_eviction: Option<Nanos>,
    /// Newest store time any shard has seen.
    pub(crate) latest: Nanos,
}

/// The sharded state map.
pub(crate) struct ShardedStates {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    /// Round-robin cursor: each operation also visits one shard in turn, so shards whose keys
    /// went quiet are still swept.
    cursor: AtomicUsize,
    max_keys: usize,
}

impl ShardedStates {
    /// A map of up to `shards` shards (fewer when `max_keys` is smaller, so every shard may hold
    /// at least one key) holding at most `max_keys` keys in all, and at most `max_keys ×
    /// BYTES_PER_KEY` bytes as the tables weigh them.
    pub(crate) fn new(shards: usize, max_keys: usize) -> ShardedStates {
        let max_keys = max_keys.max(1);
        let count = shards.clamp(1, max_keys);
        let hasher = RandomState::new();
        ShardedStates {
            shards: (0..count)
                .map(|i| {
                    let budget = max_keys / count + usize::from(i < max_keys % count);
                    Mutex::new(Shard {
                        table: Table::new(budget, hasher.hash_one(i)),
                        ops_since_sweep: 0,
                        latest: 0,
                    })
                })
                .collect(),
            hasher,
            cursor: AtomicUsize::new(0),
            max_keys,
        }
    }

    /// The bound, in keys.
    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot leave a half-written state (transitions are pure
        // and the table is only updated after them), so a poisoned lock is still usable.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Decides one request atomically: read, pure transition, write back when admitted. `name`
    /// comes from [`super::slot`].
    pub(crate) fn decide(&self, name: &str, params: Params, now: Nanos, quantity: u64) -> Decision {
        self.decide_leased(name, params, now, quantity, None)
            .decision
    }

    /// Like [`ShardedStates::decide`], also debiting a lease grant in the same step when `lease`
    /// is given ([`Params::decide_leased`]).
    pub(crate) fn decide_leased(
        &self,
        name: &str,
        params: Params,
        now: Nanos,
        quantity: u64,
        lease: Option<Lease>,
    ) -> Leased {
        let leased = {
            let mut shard = self.lock(self.shard_index(name));
            shard.maybe_sweep(now);
            let fresh = State::Fresh;
            let current = shard.table.get(name).map_or(&fresh, |entry| &entry.state);
            let (leased, change) = params.decide_leased(current, now, quantity, lease);
            if let Some(next) = change {
                let expires_at = now.saturating_add(params.idle_ttl_ns());
                let worth = Worth::after(&params, &leased.decision, now);
                shard.table.put(name, next, expires_at, worth, now);
            }
            leased
        };
        // The shard's lock is released first: the visit may sweep that shard too.
        self.visit_next(now);
        leased
    }

    /// Counts a visit to the next shard in turn (skipped if that shard is busy: it is being
    /// operated on, hence swept, anyway).
    fn visit_next(&self, now: Nanos) {
        let index = self.cursor.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        match self.shards[index].try_lock() {
            Ok(mut shard) => shard.maybe_sweep(now),
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().maybe_sweep(now),
            Err(TryLockError::WouldBlock) => {}
        }
    }

    /// Decides all-or-nothing checks ([`decide_all`]) in one atomic step: every shard
    /// holding one of `names` (the checks' state slots) is locked, in ascending shard order so two
    /// such requests can never wait on each other in a cycle (single decisions hold one lock, the
    /// totals one at a time), the pure decision runs on their states, and the changes are written
    /// only when every check allowed.
    pub(crate) fn decide_all(&self, names: &[String], checks: &[Check], now: Nanos) -> AllDecision {
        let shard_of: Vec<usize> = names.iter().map(|name| self.shard_index(name)).collect();
        let mut order = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&i| self.lock(i)).collect();
        for guard in &mut guards {
            guard.maybe_sweep(now);
        }
        // `order` is sorted and holds every shard index, so the search always finds it.
        let guard_at = |shard: usize| order.binary_search(&shard).unwrap_or(0);
        let states: Vec<State> = names
            .iter()
            .zip(&shard_of)
            .map(|(name, &shard)| {
                guards
                    .get(guard_at(shard))
                    .and_then(|g| g.table.get(name))
                    .map_or(State::Fresh, |entry| entry.state.clone())
            })
            .collect();
        let decided = decide_all(checks, &states, now);
        for (slot, change) in decided.changes.iter().enumerate() {
            let (Some(next), Some(name), Some(&shard)) =
                (change, names.get(slot), shard_of.get(slot))
            else {
                continue;
            };
            // The last decision on this slot says where the key stands after the request.
            let Some((check, decision)) = checks
                .iter()
                .zip(&decided.decisions)
                .rev()
                .find(|(c, _)| c.slot == slot)
            else {
                continue;
            };
            // The parameters it was counted with: one unit more for a peer's counter, whose
            // state may stay busy one unit longer.
            let params = check.counted_params();
            let expires_at = now.saturating_add(params.idle_ttl_ns());
            let worth = Worth::after(&params, decision, now);
            if let Some(guard) = guards.get_mut(guard_at(shard)) {
                guard.table.put(name, next.clone(), expires_at, worth, now);
            }
        }
        drop(guards);
        self.visit_next(now);
        decided
    }

    /// Runs `step` on the state named `name` under its shard lock and stores the state it returns
    /// (a commit: [`super::commit`]), with the idle TTL and worth of `params` at `now`; a state
    /// whose level takes longer to drain (a meter carrying a commit's debt) is kept until it has.
    pub(crate) fn update<R>(
        &self,
        name: &str,
        params: Params,
        now: Nanos,
        step: impl FnOnce(&State) -> (R, Option<State>),
    ) -> R {
        let mut shard = self.lock(self.shard_index(name));
        shard.maybe_sweep(now);
        let fresh = State::Fresh;
        let current = shard.table.get(name).map_or(&fresh, |entry| &entry.state);
        let (result, change) = step(current);
        if let Some(next) = change {
            let peek = params.decide(&next, now, 0).0;
            let expires_at = now.saturating_add(params.idle_ttl_ns().max(peek.reset_after));
            let worth = Worth::after(&params, &peek, now);
            shard.table.put(name, next, expires_at, worth, now);
        }
        drop(shard);
        self.visit_next(now);
        result
    }

    fn shard_index(&self, name: &str) -> usize {
        (self.hasher.hash_one(name) % self.shards.len() as u64) as usize
    }

    /// Removes the state named `name` (an admin's reset); returns whether it held state that had
    /// not yet expired by `now`. `name` comes from [`super::slot`].
    pub(crate) fn remove(&self, name: &str, now: Nanos) -> bool {
        let index = (self.hasher.hash_one(name) % self.shards.len() as u64) as usize;
        self.lock(index).table.remove_named(name, now)
    }

    /// Totals over every shard (each shard locked in turn, never two at once).
    pub(crate) fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            let Evictions {
                live,
                fresh,
                last_live_at,
            } = shard.table.evictions();
            totals.rows += shard.table.len();
            totals.weight += shard.table.weight();
            totals.peak += shard.table.peak();
            totals.live_evictions += live;
            totals.fresh_evictions += fresh;
            totals.last_live_eviction = totals.last_live_eviction.max(last_live_at);
            totals.latest = totals.latest.max(shard.latest);
        }
        totals
    }
}
