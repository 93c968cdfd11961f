//! The memory store's commit receipts, bounded: at most [`MAX_RECEIPTS`] in all and, for the
//! receipts of commits, [`MAX_RECEIPTS_PER_KEY`] per state name (one action's state for one
//! key), as the Redis store keeps them (`commit.lua`). Why: every fresh commit id writes one, kept
//! [`COMMIT_ID_TTL_MS`], so a caller spraying ids would grow the map to its global bound and then
//! push out every other key's receipts. What is shed is returned, for the metric.

use std::collections::{HashMap, VecDeque};

use sluice_core::commit::{Committed, COMMIT_ID_TTL_MS};
use sluice_core::limits::MAX_RECEIPTS_PER_KEY;
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::Nanos;

/// What the receipts map remembers under a state name and an id (or, for [`Receipt::ResetAt`], the
/// state name alone: an id is never empty).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Receipt {
    /// The id's first commit did this: a retry answers it and changes nothing.
    Committed(Committed),
    /// The id was in flight when the key was reset: its commit changes nothing.
    Reset,
    /// The key was reset at this store millisecond: a commit of a reservation decided at or
    /// before it changes nothing (`before_reset`, in state.rs).
    ResetAt(u64),
}

/// The receipts map's key of `id` under the state `name` (`id` empty: the key's reset time).
pub(crate) fn receipt_key(name: &str, id: &str) -> String {
    format!("{name}\u{0}{id}")
}

/// Most request ids remembered at once.
pub(crate) const MAX_RECEIPTS: usize = 100_000;

/// Receipts by receipts-map key (state name + id), and each state name's commit receipts in the
/// order written (so by expiry: each is kept the same time from its commit's now).
#[derive(Default)]
pub(crate) struct Receipts {
    map: HashMap<String, (Nanos, Receipt)>,
    by_name: HashMap<String, VecDeque<(Nanos, String)>>,
}

impl Receipts {
    /// The receipt under `key` with its expiry, live or not.
    pub(crate) fn get(&self, key: &str) -> Option<&(Nanos, Receipt)> {
        self.map.get(key)
    }

    /// Remembers `receipt` under `key` for [`COMMIT_ID_TTL_MS`] from `now`, within
    /// [`MAX_RECEIPTS`] (expired ones go first, then the one closest to expiry). Returns how
    /// many live receipts were shed.
    pub(crate) fn remember(&mut self, key: String, receipt: Receipt, now: Nanos) -> u64 {
        let mut shed = 0;
        if self.map.len() >= MAX_RECEIPTS {
            self.map.retain(|_, (expires, _)| *expires > now);
            self.by_name.retain(|_, q| {
                q.retain(|(expires, _)| *expires > now);
                !q.is_empty()
            });
        }
        if self.map.len() >= MAX_RECEIPTS {
            if let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (expires, _))| *expires)
                .map(|(k, _)| k.clone())
            {
                self.map.remove(&oldest);
                shed += 1;
            }
        }
        let expires = now.saturating_add(COMMIT_ID_TTL_MS * NANOS_PER_MILLI);
        self.map.insert(key, (expires, receipt));
        shed
    }

    /// Remembers the receipt of commit `id` under the state `name`, within
    /// [`MAX_RECEIPTS_PER_KEY`] for that name (its expired ones dropped, then its oldest) and
    /// [`MAX_RECEIPTS`] in all. Returns how many live receipts were shed.
    pub(crate) fn remember_commit(
        &mut self,
        name: &str,
        id: &str,
        receipt: Receipt,
        now: Nanos,
    ) -> u64 {
        let mut shed = 0;
        let queue = self.by_name.entry(name.to_owned()).or_default();
        while let Some((expires, old)) = queue.front() {
            let over = queue.len() >= MAX_RECEIPTS_PER_KEY;
            if *expires > now && !over {
                break;
            }
            let key = receipt_key(name, old);
            // Only the receipt this entry wrote (not one a reset wrote under the id since).
            if matches!(self.map.get(&key), Some((e, Receipt::Committed(_))) if e == expires) {
                self.map.remove(&key);
                if *expires > now {
                    shed += 1;
                }
            }
            queue.pop_front();
        }
        let expires = now.saturating_add(COMMIT_ID_TTL_MS * NANOS_PER_MILLI);
        queue.push_back((expires, id.to_owned()));
        shed + self.remember(receipt_key(name, id), receipt, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_commit_receipts_are_bounded_and_the_oldest_are_shed() {
        let mut r = Receipts::default();
        let done = Receipt::Committed(Committed::default());
        let mut shed = 0;
        for i in 0..MAX_RECEIPTS_PER_KEY + 10 {
            shed += r.remember_commit("a/k", &format!("id{i}"), done, 1_000 + i as u64);
        }
        assert_eq!(shed, 10);
        assert!(r.get(&receipt_key("a/k", "id9")).is_none(), "shed");
        assert!(r.get(&receipt_key("a/k", "id10")).is_some(), "kept");
        // Another key's receipts are its own.
        assert_eq!(r.remember_commit("a/other", "id0", done, 5_000), 0);
        assert!(r.get(&receipt_key("a/k", "id10")).is_some());
        // Expired ones go without counting as shed.
        let later = 10_000 + COMMIT_ID_TTL_MS * NANOS_PER_MILLI;
        assert_eq!(r.remember_commit("a/k", "new", done, later), 0);
        assert!(r.get(&receipt_key("a/k", "id10")).is_none());
    }
}
