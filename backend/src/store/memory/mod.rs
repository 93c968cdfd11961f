//! The memory store: the embedded default for a single process, no Redis needed.
//!
//! Throttle state lives in a sharded map of sluice-core [`State`](sluice_core::State)s and every
//! decision is core's own transition (`rule.params().decide(..)`) under a shard lock, so it is
//! atomic per key and identical to the reference by construction. Idle keys are swept
//! incrementally once their idle TTL has passed. Rules and activity live in small maps. Time is
//! the store's [`Clock`] (the system clock unless a test gives another).
//!
//! The map is bounded (`--max-keys`, default from [`sizing`]): a flood of fresh keys cannot
//! exhaust memory, and a full map never refuses a request nor lets one through undecided. It
//! evicts instead, where the least is lost (`worth.rs`): keys already back to fresh first, then the
//! lowest level. An evicted key restarts fresh, as after a restart: at worst one extra burst for
//! that key, while every key still held, the hammered ones above all, is limited exactly.
//!
//! One file per concern: `decision.rs`, `budget.rs` (and the reset), `rules.rs`, `activity.rs`,
//! `history.rs`, `health.rs`; the state map in `shards.rs`, `table.rs`, `worth.rs`. What a concern
//! keeps (the activity and history logs, the commit receipts, the rule book) is in its
//! `<concern>/state.rs`, which this file holds and which never imports the store: the concern's
//! trait file imports both, so no two files import each other.

mod activity;
mod budget;
mod decision;
mod health;
mod history;
mod rlqs;
mod rules;
mod shards;
pub mod sizing;
mod slot;
mod table;
mod worth;

use std::sync::Arc;

use sluice_core::Nanos;

use self::activity::state::ActivityLog;
use self::activity::touched::TouchedIndex;
use self::history::state::HistoryLog;
use self::shards::ShardedStates;
use super::{Clock, SystemClock};

pub use super::{ACTIVITY_KEEP, TOUCHED_KEEP};

/// Shards of the state map: enough that 2–64 cores rarely contend on one lock.
const SHARDS: usize = 64;

/// Throttle state, rules and activity in this process's memory.
pub struct MemoryStore {
    states: ShardedStates,
    /// Request ids already committed and budget records (see `budget.rs`).
    commits: budget::state::CommitReceipts,
    rules: rules::state::RuleBook,
    activity: ActivityLog,
    /// The index of touched actions (`ActivityStore::touch_actions`).
    touched: TouchedIndex,
    history: HistoryLog,
    clock: Arc<dyn Clock>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store (no rules, version 0) bounded by [`sizing::default_max_keys`].
    pub fn new() -> MemoryStore {
        Self::with_max_keys(sizing::default_max_keys())
    }

    /// An empty store holding at most `max_keys` throttle keys (at least 1), and at most
    /// `max_keys ×` [`sizing::BYTES_PER_KEY`] bytes of them: keys with long names and sliding
    /// logs weigh what they cost, so fewer of them fit.
    pub fn with_max_keys(max_keys: usize) -> MemoryStore {
        MemoryStore {
            states: ShardedStates::new(SHARDS, max_keys),
            commits: budget::state::CommitReceipts::default(),
            rules: rules::state::RuleBook::default(),
            activity: ActivityLog::new(ACTIVITY_KEEP),
            touched: TouchedIndex::new(TOUCHED_KEEP),
            history: HistoryLog::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// This store deciding at the time `clock` reads instead of the system clock: for tests that
    /// hold it to fixed times ([`crate::store::ManualClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> MemoryStore {
        self.clock = clock;
        self
    }

    /// Keys currently holding state (including expired ones not yet swept): for tests and
    /// metrics, to show that memory stays bounded.
    pub fn state_count(&self) -> usize {
        self.states.totals().rows
    }

    /// The bound: most throttle keys held (`--max-keys`).
    pub fn max_keys(&self) -> usize {
        self.states.max_keys()
    }

    /// Bytes of throttle state held now, as the store weighs keys (at least
    /// [`sizing::BYTES_PER_KEY`] each; more for long names and sliding logs): never more than
    /// `max_keys × BYTES_PER_KEY`, unless one key alone weighs more than its shard's share.
    pub fn bytes_held(&self) -> usize {
        self.states.totals().weight
    }

    /// At least the most keys ever held at once (the sum of each shard's own peak): a test's
    /// proof that the bound was never exceeded, not just at the end.
    pub fn peak_keys(&self) -> usize {
        self.states.totals().peak
    }

    /// Keys evicted while they still held state (each may give its key one extra burst).
    /// Already-fresh keys dropped to make room are not counted: nothing was lost.
    pub fn evictions(&self) -> u64 {
        self.states.totals().live_evictions
    }

    /// The store's time now.
    fn now(&self) -> Nanos {
        self.clock.now()
    }
}

/// What the state map's unit tests share: fixed times and rules' parameters from JSON.
#[cfg(test)]
mod testing {
    use sluice_core::{Nanos, Params, Rule};

    /// One second.
    pub(super) const S: Nanos = 1_000_000_000;
    /// A multiple of 60 s: a window starts here.
    pub(super) const T0: Nanos = 1_700_000_040 * S;

    /// The parameters of the rule `json`.
    pub(super) fn params(json: &str) -> Params {
        Rule::from_json_str(json).expect("valid rule").params()
    }
}
