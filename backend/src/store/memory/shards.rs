//! Throttle state for the memory store: a sharded map from (action, algorithm, key) to
//! [`State`], each shard behind a `std::sync::Mutex` held only for one pure transition (never
//! across an `.await`), so concurrent requests on one key are serialised exactly like a Redis
//! script and requests on different keys rarely contend.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use sluice_core::{Action, Algorithm, Decision, Nanos, Params, State};

/// Which state a request addresses: a rule's key, or a `cl.throttle` key (its own namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    /// A key under a rule; the algorithm is part of the slot so a rule change starts fresh.
    Rule {
        /// The rule's action.
        action: Action,
        /// The rule's algorithm.
        algorithm: Algorithm,
        /// The client's key (any string).
        key: String,
    },
    /// A redis-cell compatible `cl.throttle` key.
    Cell(String),
}

struct Entry {
    state: State,
    /// Store time after which the state equals a fresh one and may be dropped.
    expires_at: Nanos,
}

#[derive(Default)]
struct Shard {
    map: HashMap<Slot, Entry>,
    ops_since_sweep: usize,
}

/// Fewest operations (or visits) between two sweeps of a shard.
const MIN_SWEEP_INTERVAL: usize = 64;

impl Shard {
    /// Counts one operation on (or visit to) this shard, and drops expired entries once at least
    /// as many have passed as the shard holds entries: the sweep's cost is amortised to O(1) per
    /// operation, and the map never holds many more entries than were active within their TTL.
    fn maybe_sweep(&mut self, now: Nanos) {
        self.ops_since_sweep += 1;
        if self.ops_since_sweep >= self.map.len().max(MIN_SWEEP_INTERVAL) {
            self.map.retain(|_, entry| entry.expires_at > now);
            self.ops_since_sweep = 0;
        }
    }
}

/// The sharded state map.
pub(crate) struct ShardedStates {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    /// Round-robin cursor: each operation also visits one shard in turn, so shards whose keys
    /// went quiet are still swept.
    cursor: AtomicUsize,
}

impl ShardedStates {
    /// A map with `shards` shards (at least one).
    pub(crate) fn new(shards: usize) -> ShardedStates {
        ShardedStates {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Shard::default()))
                .collect(),
            hasher: RandomState::new(),
            cursor: AtomicUsize::new(0),
        }
    }

    fn shard(&self, slot: &Slot) -> MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(slot) % self.shards.len() as u64) as usize;
        // A panic while holding the lock cannot leave a half-written state (transitions are pure
        // and the map is only updated after them), so a poisoned lock is still usable.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Decides one request atomically: read, pure transition, write back when admitted.
    pub(crate) fn decide(&self, slot: Slot, params: Params, now: Nanos, quantity: u64) -> Decision {
        let decision = self.decide_locked(slot, params, now, quantity);
        self.visit_next(now);
        decision
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

    fn decide_locked(&self, slot: Slot, params: Params, now: Nanos, quantity: u64) -> Decision {
        let mut shard = self.shard(&slot);
        shard.maybe_sweep(now);
        let fresh = State::Fresh;
        let current = shard.map.get(&slot).map_or(&fresh, |entry| &entry.state);
        let (decision, change) = params.decide_change(current, now, quantity);
        if let Some(next) = change {
            let expires_at = now.saturating_add(params.idle_ttl_ns());
            match shard.map.get_mut(&slot) {
                Some(entry) => {
                    entry.state = next;
                    entry.expires_at = entry.expires_at.max(expires_at);
                }
                None => {
                    shard.map.insert(
                        slot,
                        Entry {
                            state: next,
                            expires_at,
                        },
                    );
                }
            }
        }
        decision
    }

    /// Entries held (live or expired but not yet swept), for tests and metrics.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .map
                    .len()
            })
            .sum()
    }
}
