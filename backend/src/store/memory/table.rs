//! One shard's throttle state: a map with a budget, which evicts by sampling when full.
//!
//! Rows live in a dense `Vec` and a hash index maps each name to its row, so a uniformly random
//! row costs O(1) to pick: when a write would take the shard past its budget, a few rows are
//! sampled (as Redis samples keys for its LRU) and the one with the least at stake
//! ([`Worth`]) goes. Rows already back to fresh go first: a sampled one at once, and before a row
//! that still holds state is evicted, the table drops every fresh row it holds, unless it last
//! looked within the last eighth of its length in writes (so that look costs O(1) per write,
//! amortised). A write therefore costs O(1) whether or not the shard is full, and the incoming key
//! is always stored: a full table never refuses and never lets a request through undecided.
//!
//! The budget is in bytes, `keys × BYTES_PER_KEY`, and each row weighs what it costs
//! ([`weight_of`]), at least one key's worth: so a table never holds more rows than its keys, and
//! long names or long sliding logs (up to 10,000 timestamps, 80 KB) cannot take its memory past
//! the budget either.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::{Nanos, State};

use super::sizing::{BYTES_PER_KEY, ROW_BYTES};
use super::worth::Worth;

/// Rows sampled per eviction (Redis's default `maxmemory-samples`).
pub(crate) const SAMPLES: usize = 5;

/// A stored state and what the store knows about it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The algorithm's state.
    pub(crate) state: State,
    /// Store time after which the state surely equals a fresh one (last write + the rule's idle
    /// TTL): the sweep drops it then.
    pub(crate) expires_at: Nanos,
    /// For eviction when the shard is full.
    pub(crate) worth: Worth,
}

/// A row's name, shared by the row and the index (one allocation per key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Name(Arc<str>);

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[derive(Debug)]
struct Row {
    name: Name,
    entry: Entry,
}

/// What evictions have cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Evictions {
    /// Rows evicted while they still held state (each may give its key one extra burst).
    pub(crate) live: u64,
    /// Rows dropped to make room that were already back to fresh (nothing lost: the sweep would
    /// have dropped them).
    pub(crate) fresh: u64,
    /// Store time of the newest live eviction.
    pub(crate) last_live_at: Option<Nanos>,
}

/// One shard's rows, index and budget.
#[derive(Debug)]
pub(crate) struct Table {
    index: HashMap<Name, u32>,
    rows: Vec<Row>,
    /// Bytes held, as [`weight_of`] counts them.
    weight: usize,
    /// Most bytes this table holds after any write, unless one key alone weighs more.
    budget: usize,
    /// Most rows this table may hold (`budget / BYTES_PER_KEY`).
    max_rows: usize,
    /// Most rows held after any operation so far.
    peak: usize,
    evictions: Evictions,
    /// xorshift64* state for sampling (never 0).
    rng: u64,
    /// Writes since the table last dropped all its fresh rows.
    writes_since_scan: usize,
}

/// What a heap block of `bytes` costs with glibc malloc's 8-byte header and 16-byte rounding.
fn heap_block(bytes: usize) -> usize {
    (bytes + 8).next_multiple_of(16).max(32)
}

/// Bytes a row named `name` holding `state` costs: the row, its index slot and allocator
/// overhead ([`ROW_BYTES`], measured), its name, and a sliding log's timestamps; never less than
/// [`BYTES_PER_KEY`], so rows never outnumber the keys the budget is made of.
pub(crate) fn weight_of(name: &str, state: &State) -> usize {
    // An `Arc<str>`: two counts, then the bytes.
    let name = heap_block(16 + name.len());
    let log = match state {
        State::SlidingLog(log) if log.entries.capacity() > 0 => {
            heap_block(8 * log.entries.capacity())
        }
        _ => 0,
    };
    (ROW_BYTES as usize + name + log).max(BYTES_PER_KEY as usize)
}

impl Table {
    /// An empty table holding at most `keys` keys of [`BYTES_PER_KEY`] (at least one, at most
    /// `u32::MAX`, the index's row numbers: a terabyte per shard); `seed` seeds its sampling.
    pub(crate) fn new(keys: usize, seed: u64) -> Table {
        let max_rows = keys.clamp(1, u32::MAX as usize);
        Table {
            index: HashMap::new(),
            rows: Vec::new(),
            weight: 0,
            budget: max_rows.saturating_mul(BYTES_PER_KEY as usize),
            max_rows,
            peak: 0,
            evictions: Evictions::default(),
            rng: seed | 1,
            writes_since_scan: 0,
        }
    }

    /// The entry named `name`, if stored.
    pub(crate) fn get(&self, name: &str) -> Option<&Entry> {
        let row = *self.index.get(name)?;
        self.rows.get(row as usize).map(|r| &r.entry)
    }

    /// Stores the state an admission at `now` produced under `name`, making room first if the
    /// table is at its budget. The entry itself is always stored.
    pub(crate) fn put(
        &mut self,
        name: &str,
        state: State,
        expires_at: Nanos,
        worth: Worth,
        now: Nanos,
    ) {
        self.writes_since_scan += 1;
        let new_weight = weight_of(name, &state);
        if let Some(&row) = self.index.get(name) {
            let row = row as usize;
            if let Some(r) = self.rows.get_mut(row) {
                let old_weight = weight_of(name, &r.entry.state);
                r.entry.state = state;
                r.entry.expires_at = r.entry.expires_at.max(expires_at);
                r.entry.worth = worth;
                self.weight = self.weight - old_weight + new_weight;
                // A sliding log that grew: others make room, this one stays.
                self.make_room(0, Some(row), now);
            }
        } else {
            self.make_room(new_weight, None, now);
            let name = Name(Arc::from(name));
            self.reserve_one();
            self.index.insert(name.clone(), self.rows.len() as u32);
            self.rows.push(Row {
                name,
                entry: Entry {
                    state,
                    expires_at,
                    worth,
                },
            });
            self.weight += new_weight;
        }
        self.peak = self.peak.max(self.rows.len());
    }

    /// Drops every entry whose idle TTL has passed by `now` (not an eviction: nothing is lost).
    pub(crate) fn sweep(&mut self, now: Nanos) {
        let mut row = 0;
        while row < self.rows.len() {
            if self.rows[row].entry.expires_at <= now {
                self.remove(row);
            } else {
                row += 1;
            }
        }
    }

    /// Removes the entry named `name` (an admin's reset, not an eviction); returns whether it
    /// held state that had not yet expired by `now`.
    pub(crate) fn remove_named(&mut self, name: &str, now: Nanos) -> bool {
        let Some(&row) = self.index.get(name) else {
            return false;
        };
        let row = row as usize;
        let live = self.rows.get(row).is_some_and(|r| r.entry.expires_at > now);
        if row < self.rows.len() {
            self.remove(row);
        }
        live
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Bytes held, as [`weight_of`] counts them.
    pub(crate) fn weight(&self) -> usize {
        self.weight
    }

    /// Most rows held after any operation.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }

    /// What evictions have cost so far.
    pub(crate) fn evictions(&self) -> Evictions {
        self.evictions
    }

    /// Grows the rows by doubling, but never past the most rows the budget allows, so a full
    /// table's `Vec` holds no spare half.
    fn reserve_one(&mut self) {
        if self.rows.len() == self.rows.capacity() {
            let target = (self.rows.capacity() * 2)
                .max(4)
                .min(self.max_rows)
                .max(self.rows.len() + 1);
            self.rows.reserve_exact(target - self.rows.len());
        }
    }

    /// Evicts rows until `need` more key units fit in the budget, never the row `keep` (a row
    /// that just grew). Stops when only `keep` is left: one key alone may exceed a tiny budget.
    fn make_room(&mut self, need: usize, mut keep: Option<usize>, now: Nanos) {
        while self.weight + need > self.budget {
            let Some(victim) = self.pick_victim(keep, now) else {
                return;
            };
            let fresh = self.rows[victim].entry.worth.is_fresh(now);
            if !fresh && self.writes_since_scan > 0 && self.writes_since_scan >= self.rows.len() / 8
            {
                // About to lose state: first drop every row that holds none.
                keep = self.drop_fresh(keep, now);
                continue;
            }
            if fresh {
                self.evictions.fresh += 1;
            } else {
                self.evictions.live += 1;
                self.evictions.last_live_at =
                    Some(self.evictions.last_live_at.map_or(now, |at| at.max(now)));
            }
            let last = self.rows.len() - 1;
            self.remove(victim);
            // The last row moved into the victim's place.
            if keep == Some(last) {
                keep = Some(victim);
            }
        }
    }

    /// Drops every fresh row but `keep`; returns where `keep` is now.
    fn drop_fresh(&mut self, mut keep: Option<usize>, now: Nanos) -> Option<usize> {
        let mut row = 0;
        while row < self.rows.len() {
            if Some(row) != keep && self.rows[row].entry.worth.is_fresh(now) {
                let last = self.rows.len() - 1;
                self.remove(row);
                self.evictions.fresh += 1;
                if keep == Some(last) {
                    keep = Some(row);
                }
            } else {
                row += 1;
            }
        }
        self.writes_since_scan = 0;
        keep
    }

    /// The row to evict: the least at stake among [`SAMPLES`] random rows (all rows when there
    /// are that few), never `keep`; `None` when no other row exists.
    fn pick_victim(&mut self, keep: Option<usize>, now: Nanos) -> Option<usize> {
        let len = self.rows.len();
        let others = len - usize::from(keep.is_some_and(|k| k < len));
        if others == 0 {
            return None;
        }
        let better = |rows: &[Row], a: usize, b: usize| {
            rows[a].entry.worth.evict_order(&rows[b].entry.worth, now) == std::cmp::Ordering::Less
        };
        let mut best: Option<usize> = None;
        if others <= SAMPLES {
            for row in (0..len).filter(|r| Some(*r) != keep) {
                if best.is_none_or(|b| better(&self.rows, row, b)) {
                    best = Some(row);
                }
            }
            return best;
        }
        for _ in 0..SAMPLES {
            let row = (self.next_random() % len as u64) as usize;
            if Some(row) != keep && best.is_none_or(|b| better(&self.rows, row, b)) {
                best = Some(row);
            }
        }
        // Every draw hit `keep` (only possible when it is most of a tiny table): its neighbour.
        best.or_else(|| keep.map(|k| (k + 1) % len))
    }

    /// Removes row `row` (swapping the last row into its place).
    fn remove(&mut self, row: usize) {
        let removed = self.rows.swap_remove(row);
        self.index.remove(&*removed.name.0);
        if let Some(moved) = self.rows.get(row) {
            if let Some(index) = self.index.get_mut(&*moved.name.0) {
                *index = row as u32;
            }
        }
        self.weight -= weight_of(&removed.name.0, &removed.entry.state);
    }

    /// xorshift64*: fast, and good enough to pick rows uniformly.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::testing::{params, S, T0};
    use sluice_core::algorithms::sliding_log::SlidingLogState;
    use sluice_core::Params;

    fn window() -> Params {
        params(r#"{"action":"a","algorithm":"fixed_window","capacity":100,"window":"60s"}"#)
    }

    /// Admits `n` requests on `name` at `at`, as the shard does.
    fn admit(table: &mut Table, p: &Params, name: &str, n: u64, at: Nanos) {
        for _ in 0..n {
            let current = table.get(name).map_or(State::Fresh, |e| e.state.clone());
            let (d, next) = p.decide_change(&current, at, 1);
            let next = next.expect("admitted");
            table.put(
                name,
                next,
                at + p.idle_ttl_ns(),
                Worth::after(p, &d, at),
                at,
            );
        }
    }

    fn names(table: &Table) -> Vec<String> {
        let mut names: Vec<String> = table.rows.iter().map(|r| r.name.0.to_string()).collect();
        names.sort();
        names
    }

    /// Index and rows agree, and the weight is the sum of the rows' weights.
    fn consistent(table: &Table) {
        assert_eq!(table.index.len(), table.rows.len());
        for (row, r) in table.rows.iter().enumerate() {
            assert_eq!(table.index.get(&*r.name.0), Some(&(row as u32)));
        }
        let weight: usize = table
            .rows
            .iter()
            .map(|r| weight_of(&r.name.0, &r.entry.state))
            .sum();
        assert_eq!(table.weight, weight);
    }

    #[test]
    fn when_full_a_fresh_key_goes_first_then_the_least_at_stake_then_the_soonest_fresh() {
        let p = window();
        let mut t = Table::new(4, 7);
        // At T0 (window [T0, T0+60s)): "spent" uses 9, "two" 2, "one" 1.
        admit(&mut t, &p, "spent", 9, T0);
        admit(&mut t, &p, "two", 2, T0);
        admit(&mut t, &p, "one", 1, T0);
        // "old" was used in the previous window: fresh again from T0 (but not yet swept).
        admit(&mut t, &p, "old", 5, T0 - 30 * S);
        assert!(t.get("old").expect("held").worth.is_fresh(T0));

        admit(&mut t, &p, "new1", 1, T0 + S);
        assert_eq!(
            names(&t),
            ["new1", "one", "spent", "two"],
            "the fresh key went first"
        );
        assert_eq!(
            t.evictions(),
            Evictions {
                live: 0,
                fresh: 1,
                last_live_at: None
            }
        );

        admit(&mut t, &p, "new2", 3, T0 + 2 * S);
        // "one" and "new1" both hold 1 and reset at the same window end: either may go, but
        // never "two" or "spent", which hold more.
        let held = names(&t);
        assert!(held.contains(&"spent".to_owned()) && held.contains(&"two".to_owned()));
        assert!(
            held.contains(&"new2".to_owned()),
            "the incoming key is always stored"
        );
        assert_eq!(t.evictions().live, 1);
        assert_eq!(t.evictions().last_live_at, Some(T0 + 2 * S));
        assert_eq!(t.len(), 4);
        assert_eq!(t.peak(), 4);
        consistent(&t);
    }

    #[test]
    fn every_fresh_row_goes_before_any_live_one_even_when_sampling_misses_them() {
        let p = window();
        let mut t = Table::new(1_000, 13);
        // Half the rows from the previous window (fresh from T0 on), interleaved with live ones.
        for i in 0..1_000u64 {
            let at = if i % 2 == 0 { T0 - 30 * S } else { T0 };
            admit(&mut t, &p, &format!("k{i}"), 1, at);
        }
        assert_eq!(t.len(), 1_000);
        // 400 new keys: sampling alone would often draw five live rows (p = 1/32 each time).
        for i in 0..400 {
            admit(&mut t, &p, &format!("new{i}"), 1, T0 + S);
        }
        assert_eq!(
            t.evictions().live,
            0,
            "a live row went while fresh ones remained"
        );
        assert_eq!(t.evictions().fresh, 500);
        assert_eq!(t.len(), 900);
        // Nothing fresh is left: the next 200 cost 100 live rows.
        for i in 400..600 {
            admit(&mut t, &p, &format!("new{i}"), 1, T0 + S);
        }
        assert_eq!(t.evictions().live, 100);
        assert_eq!(t.len(), 1_000);
        consistent(&t);
    }

    #[test]
    fn the_sooner_fresh_key_goes_when_stakes_are_equal() {
        let p = params(r#"{"action":"a","algorithm":"sliding_log","capacity":10,"window":"60s"}"#);
        // Two one-timestamp logs fit in three keys' bytes, three do not.
        let mut t = Table::new(3, 7);
        admit(&mut t, &p, "earlier", 1, T0);
        admit(&mut t, &p, "later", 1, T0 + 10 * S);
        admit(&mut t, &p, "incoming", 1, T0 + 20 * S);
        assert_eq!(names(&t), ["incoming", "later"]);
    }

    #[test]
    fn a_key_at_its_full_quota_is_never_the_one_evicted() {
        // A sampled table (many more rows than SAMPLES): a key at its full quota always loses to
        // any sampled single-hit key.
        let p = params(
            r#"{"action":"a","algorithm":"gcra","capacity":5,"rate":{"count":5,"period":"1h"}}"#,
        );
        let mut t = Table::new(64, 11);
        admit(&mut t, &p, "victim", 5, T0);
        for i in 0..100_000u64 {
            admit(&mut t, &p, &format!("spray{i}"), 1, T0 + i);
            assert!(t.len() <= 64);
        }
        assert!(t.get("victim").is_some(), "the full key was evicted");
        assert_eq!(t.evictions().live, 100_000 - 63);
        assert_eq!(t.peak(), 64);
        consistent(&t);
    }

    #[test]
    fn weights_are_bytes_and_at_least_one_key() {
        let key = BYTES_PER_KEY as usize;
        // A 20-byte name is the measured typical key.
        assert_eq!(weight_of("Wspray/user-00000001", &State::Fresh), key);
        assert_eq!(
            weight_of("#", &State::Fresh),
            key,
            "never less than one key"
        );
        let long = "k".repeat(1_000);
        let w = weight_of(&long, &State::Fresh);
        assert!((1_150..1_250).contains(&w), "{w}");
        let log = State::SlidingLog(SlidingLogState {
            entries: std::iter::repeat_n(T0, 10_000).collect(),
        });
        let w = weight_of("Llogin/alice", &log);
        assert!((80_000..81_000).contains(&w), "{w}");
    }

    #[test]
    fn a_growing_sliding_log_makes_others_room() {
        let p =
            params(r#"{"action":"a","algorithm":"sliding_log","capacity":10000,"window":"60s"}"#);
        let budget = 40 * BYTES_PER_KEY as usize;
        let mut t = Table::new(40, 3);
        for i in 0..40 {
            admit(&mut t, &p, &format!("small{i}"), 1, T0);
        }
        // A one-timestamp log weighs a little more than a key: fewer than 40 fit.
        let full = t.len();
        assert!((30..40).contains(&full), "{full}");
        assert!(t.weight() <= budget);
        // 200 timestamps (a VecDeque with room for up to twice that): 1.8 to 3.4 KB.
        admit(&mut t, &p, "small39", 200, T0 + S);
        let big = weight_of(
            "small39",
            &t.get("small39").expect("the growing key stays").state,
        );
        assert!(big > 1_600, "{big}");
        assert!(t.weight() <= budget, "{} > {budget}", t.weight());
        assert!(t.len() < full - 5, "{} rows", t.len());
        consistent(&t);
    }

    #[test]
    fn one_key_heavier_than_the_whole_budget_is_still_stored() {
        let mut t = Table::new(2, 5);
        let log = State::SlidingLog(SlidingLogState {
            entries: std::iter::repeat_n(T0, 2_500).collect(),
        });
        let worth = Worth::after(
            &window(),
            &sluice_core::Decision {
                allowed: true,
                capacity: 100,
                remaining: 0,
                retry_after: None,
                reset_after: 60 * S,
                level: 10.0,
            },
            T0,
        );
        t.put("a", State::Fresh, T0 + 60 * S, worth, T0);
        t.put("big", log, T0 + 60 * S, worth, T0);
        assert_eq!(names(&t), ["big"]);
        assert!(t.weight() > 2 * BYTES_PER_KEY as usize);
        consistent(&t);
    }

    #[test]
    fn the_sweep_drops_expired_rows_and_keeps_the_index_right() {
        let p = window();
        let mut t = Table::new(1_000, 9);
        for i in 0..500u64 {
            admit(&mut t, &p, &format!("k{i}"), 1, T0 + (i % 2) * 120 * S);
        }
        t.sweep(T0 + 61 * S);
        assert_eq!(t.len(), 250);
        consistent(&t);
        assert_eq!(
            t.evictions(),
            Evictions::default(),
            "a sweep is not an eviction"
        );
    }
}
