//! A report's metrics counted once even when the store's answer to its first copy was lost.
//!
//! A filter report is applied to the history once per (action, reporter, seq), by the store, in
//! one atomic step with its mark ([`super::report`]); the replica then adds it to its
//! Prometheus counters. When that step's answer is lost (a Redis timeout, the ingest cut at its
//! deadline: typically a report being applied just as this process stood still, whose timers all
//! fire at the resume before the reply is read), the history has the counts but the metrics do
//! not, and every later copy is answered "already applied": the metrics never get them.
//!
//! So each replica tracks its attempts per (action, reporter): an attempt that ends with its
//! effect unknown is remembered, and a later copy the store calls "already applied" then counts
//! the metrics, once. Concurrent copies (a stall queues many, read together at the resume) are
//! resolved the same way: a copy that sees another attempt in flight marks the report applied,
//! and whichever attempt ends last without knowing counts it. A report counted (or found
//! applied before this replica tracked it) is done: nothing more counts it.
//!
//! Bounded by [`MAX_TRACKED`] (action, reporter) pairs; past it the finished ones are
//! forgotten. Per replica: a copy that reaches another replica is that replica's own copy.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Most (action, reporter) pairs tracked.
pub const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Report {
    seq: u64,
    in_flight: u32,
    /// An attempt ended with its effect unknown.
    unknown: bool,
    /// A copy found it applied while another attempt was in flight.
    applied: bool,
    /// Its metrics were counted (or it was applied before being tracked).
    done: bool,
}

/// How one attempt to apply a report ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The store applied it now.
    Applied,
    /// The store said a copy of it was applied before.
    Copy,
    /// The store's answer was lost (an error, a timeout, the attempt dropped).
    Unknown,
}

/// The attempts of every (action, reporter).
#[derive(Debug, Default)]
pub struct Attempts {
    reports: Mutex<HashMap<(String, String), Report>>,
}

impl Attempts {
    /// Nothing tracked.
    pub fn new() -> Attempts {
        Attempts::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Report>> {
        self.reports.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An attempt to apply report `seq` of (`action`, `reporter`) starts; [`Attempt::end`] (or
    /// its drop, as unknown) ends it.
    pub fn begin<'a>(&'a self, action: &str, reporter: &str, seq: u64) -> Attempt<'a> {
        let mut reports = self.lock();
        if reports.len() >= MAX_TRACKED {
            reports.retain(|_, r| r.in_flight > 0 || !r.done);
            if reports.len() >= MAX_TRACKED {
                reports.clear();
            }
        }
        let key = (action.to_owned(), reporter.to_owned());
        let report = reports.entry(key.clone()).or_default();
        if report.seq < seq || (report.seq == 0 && report.in_flight == 0) {
            *report = Report {
                seq,
                ..Report::default()
            };
        }
        let tracked = report.seq == seq;
        if tracked {
            report.in_flight += 1;
        }
        Attempt {
            attempts: self,
            key,
            seq,
            tracked,
            ended: false,
        }
    }

    fn end(&self, key: &(String, String), seq: u64, ended: Ended) -> bool {
        let mut reports = self.lock();
        let Some(r) = reports.get_mut(key).filter(|r| r.seq == seq) else {
            return ended == Ended::Applied;
        };
        r.in_flight = r.in_flight.saturating_sub(1);
        if r.done {
            return false;
        }
        match ended {
            Ended::Applied => {
                r.done = true;
                true
            }
            Ended::Copy if r.unknown => {
                r.done = true;
                true
            }
            Ended::Copy if r.in_flight > 0 => {
                r.applied = true;
                false
            }
            Ended::Copy => {
                r.done = true;
                false
            }
            Ended::Unknown if r.applied && r.in_flight == 0 => {
                r.done = true;
                true
            }
            Ended::Unknown => {
                r.unknown = true;
                false
            }
        }
    }
}

/// One attempt in progress; dropped without [`Attempt::end`], it ends as unknown.
#[derive(Debug)]
pub struct Attempt<'a> {
    attempts: &'a Attempts,
    key: (String, String),
    seq: u64,
    tracked: bool,
    ended: bool,
}

impl Attempt<'_> {
    /// Ends the attempt; true when this replica is to count the report's metrics now (applied
    /// now, or found applied by an attempt whose answer was lost).
    pub fn end(mut self, ended: Ended) -> bool {
        self.ended = true;
        if !self.tracked {
            return ended == Ended::Applied;
        }
        self.attempts.end(&self.key, self.seq, ended)
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.ended && self.tracked {
            self.attempts.end(&self.key, self.seq, Ended::Unknown);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_counts_and_a_later_copy_does_not() {
        let a = Attempts::new();
        assert!(a.begin("x", "r", 1).end(Ended::Applied));
        assert!(!a.begin("x", "r", 1).end(Ended::Copy));
        assert!(a.begin("x", "r", 2).end(Ended::Applied));
    }

    #[test]
    fn a_lost_answer_is_counted_by_the_next_copy_once() {
        let a = Attempts::new();
        assert!(!a.begin("x", "r", 1).end(Ended::Unknown));
        assert!(
            a.begin("x", "r", 1).end(Ended::Copy),
            "the first applied it"
        );
        assert!(!a.begin("x", "r", 1).end(Ended::Copy));
        // Dropped (the ingest cut at its deadline): the same as unknown.
        drop(a.begin("x", "r", 2));
        assert!(a.begin("x", "r", 2).end(Ended::Copy));
        // Unknown, then applied by the copy: counted by the copy, once.
        assert!(!a.begin("x", "r", 3).end(Ended::Unknown));
        assert!(a.begin("x", "r", 3).end(Ended::Applied));
        assert!(!a.begin("x", "r", 3).end(Ended::Copy));
    }

    #[test]
    fn concurrent_copies_count_once_whoever_ends_last() {
        let a = Attempts::new();
        // The first applies (answer lost), the second sees it applied while the first is in flight.
        let first = a.begin("x", "r", 1);
        let second = a.begin("x", "r", 1);
        assert!(!second.end(Ended::Copy));
        assert!(first.end(Ended::Unknown), "the last to end counts it");
        assert!(!a.begin("x", "r", 1).end(Ended::Copy));
        // The first applies and knows it: it counts; the copy beside it does not.
        let first = a.begin("x", "r", 2);
        let second = a.begin("x", "r", 2);
        assert!(!second.end(Ended::Copy));
        assert!(first.end(Ended::Applied));
        // Both copies of a report counted before: nothing.
        assert!(a.begin("x", "r", 3).end(Ended::Applied));
        let (b, c) = (a.begin("x", "r", 3), a.begin("x", "r", 3));
        assert!(!b.end(Ended::Copy));
        assert!(!c.end(Ended::Unknown));
        // A copy of a report applied before this replica tracked it (another replica, a
        // restart): nothing.
        assert!(!a.begin("y", "r", 9).end(Ended::Copy));
        assert!(!a.begin("y", "r", 9).end(Ended::Unknown));
    }

    #[test]
    fn an_old_copy_after_a_newer_report_is_not_tracked() {
        let a = Attempts::new();
        assert!(a.begin("x", "r", 5).end(Ended::Applied));
        assert!(!a.begin("x", "r", 4).end(Ended::Copy));
        assert!(!a.begin("x", "r", 4).end(Ended::Unknown));
        assert!(!a.begin("x", "r", 5).end(Ended::Copy));
    }
}
