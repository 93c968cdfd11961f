//! A worker's watch over the grants it stored: when each expires, the worker's tick takes what
//! is left of it out of the table and gives it back (`table::sweep`, `super::returns`), so a key
//! that goes quiet with units left returns them within a tick of their expiry instead of waiting
//! for its next request (which may never come).
//!
//! # Memory bound
//!
//! At most [`MAX_WATCHED`] grants per worker (a few hundred bytes each: the identity and a
//! time). Past it the oldest is dropped from the watch: its units then go back when a take or a
//! store of its identity finds it expired, as before the sweep existed; until then they are
//! neither spent nor returned. A grant is watched once, by the worker that stored it.

use std::collections::VecDeque;

use super::table;
use super::Return;
use crate::host::Host;

/// Most grants one worker watches.
pub const MAX_WATCHED: usize = 4096;

/// The grants this worker stored, by identity and expiry, in the order stored.
#[derive(Debug, Default)]
pub struct Watch {
    grants: VecDeque<(Box<[u8]>, u64)>,
}

impl Watch {
    /// Watches a grant for `identity` that expires at `until_ns`.
    pub fn add(&mut self, identity: &[u8], until_ns: u64) {
        if self.grants.len() >= MAX_WATCHED {
            self.grants.pop_front();
        }
        self.grants.push_back((identity.into(), until_ns));
    }

    /// Grants watched.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// No grant is watched.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// When the first watched grant expires (`None`: none watched).
    pub fn due_ns(&self) -> Option<u64> {
        self.grants.iter().map(|(_, until)| *until).min()
    }

    /// The tick at `now`: sweeps the identities of the grants expired by then (each identity
    /// once per tick) and adds what they give back to `returns`. A sweep that lost its races is
    /// kept for the next tick.
    pub fn sweep(
        &mut self,
        host: &mut dyn Host,
        slots: u64,
        now_ns: u64,
        returns: &mut Vec<Return>,
    ) {
        if self.due_ns().is_none_or(|due| due > now_ns) {
            return;
        }
        let mut swept: Vec<Box<[u8]>> = Vec::new();
        let mut keep = VecDeque::with_capacity(self.grants.len());
        for (identity, until) in std::mem::take(&mut self.grants) {
            if until > now_ns {
                keep.push_back((identity, until));
                continue;
            }
            if swept.contains(&identity) {
                continue;
            }
            if table::sweep(host, &identity, slots, now_ns, returns) {
                swept.push(identity);
            } else {
                keep.push_back((identity, until));
            }
        }
        self.grants = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_keeps_the_newest_grants_within_its_bound() {
        let mut w = Watch::default();
        for i in 0..(MAX_WATCHED as u64 + 10) {
            w.add(b"reply\nalice", 1_000 + i);
        }
        assert_eq!(w.len(), MAX_WATCHED);
        assert_eq!(w.due_ns(), Some(1_010), "the ten oldest dropped");
    }
}
