//! The filter reports' sequence records, bounded per action: for each reporter the highest `seq`
//! applied and when, so that a resent copy of a report is counted once
//! ([`super::ReportMark`]). `POST /v1/report` accepts any reporter id, so a client could mint ids
//! without end; each action keeps at most [`MAX_REPORTERS_PER_ACTION`] records, and actions
//! without a rule share one such set (keyed by action and reporter), so minted action names do not
//! escape the bound either.
//!
//! At the bound a new reporter's record always gets in: records not applied within a day go
//! first, then the least recently applied one, **dropped** if it was applied at least
//! [`REPORT_MARK_SETTLE_MS`] ago, else **shed** (counted apart). A new reporter is never refused:
//! a client re-reporting minted ids to keep them young would otherwise hold the bound full, and
//! every real new reporter (the workers of a restarted Envoy) would be turned away, its counts
//! never reaching the history. What shedding a young record risks: a copy of its reporter's last
//! report (the filter resends one whose answer it did not get, a tick later) meeting no record is
//! counted twice. A shed record is the least recently applied of the bound's, so that takes more
//! than [`MAX_REPORTERS_PER_ACTION`] reports of other reporters between a report and its copy; a
//! spray re-reporting its ids sheds its own oldest ones first, and a filter reporting every
//! period stays younger than them. A reporter whose record went is a new reporter for its next
//! report, whose `seq` the backend has never applied: it is applied, once.
//!
//! This is the memory store's set ([`ReporterMarks`]); `history_record.lua` is its twin in Redis
//! (a hash of seqs and a zset of times per action, in the action's hash tag), held to the same
//! outcomes by the history suite.

use std::collections::{BTreeSet, HashMap};

use sluice_core::limits::{MAX_REPORTERS_PER_ACTION, REPORT_MARK_SETTLE_MS};

use super::REPORT_MARK_TTL_MS;

/// What applying one action's report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportApplied {
    /// Applied; a record of another reporter (at most one, dropped or shed) made room for a new
    /// one.
    Applied {
        /// Settled records dropped at the bound to make room.
        dropped: u64,
        /// Young records (applied within [`REPORT_MARK_SETTLE_MS`]) shed to make room.
        shed: u64,
    },
    /// A copy of a report already applied (its `seq` is not above the reporter's): nothing done.
    Copy,
}

/// The member a mark is kept under in its set: the reporter, or for an action without a rule
/// (the shared set) `<action>/<reporter>` (neither may hold a `/`).
pub fn member(action: &str, reporter: &str, shared: bool) -> String {
    if shared {
        format!("{action}/{reporter}")
    } else {
        reporter.to_owned()
    }
}

/// One action's records (or the shared set's): member → (highest seq applied, applied at ms),
/// and the same ordered by (applied at, member), oldest first (Redis orders a zset's equal
/// scores by member too).
#[derive(Debug, Default)]
pub struct ReporterMarks {
    by_member: HashMap<String, (u64, u64)>,
    by_age: BTreeSet<(u64, String)>,
}

impl ReporterMarks {
    /// Records kept.
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// Whether `member` holds a record.
    pub fn holds(&self, member: &str) -> bool {
        self.by_member.contains_key(member)
    }

    /// Applies a report of `member` with `seq` at `now_ms` (see the module docs): a copy when a
    /// live record holds this seq or a higher one; else the record is raised, a new member
    /// making room at the bound (expired records first, then the oldest: dropped when settled,
    /// shed when young).
    pub fn apply(&mut self, member: &str, seq: u64, now_ms: u64) -> ReportApplied {
        let (mut dropped, mut shed) = (0, 0);
        match self.by_member.get(member) {
            Some(&(held, at)) if at.saturating_add(REPORT_MARK_TTL_MS) > now_ms && seq <= held => {
                return ReportApplied::Copy;
            }
            Some(&(_, at)) => {
                self.by_age.remove(&(at, member.to_owned()));
            }
            None => {
                if self.by_member.len() >= MAX_REPORTERS_PER_ACTION {
                    self.drop_expired(now_ms);
                }
                if self.by_member.len() >= MAX_REPORTERS_PER_ACTION {
                    if let Some((at, oldest)) = self.by_age.pop_first() {
                        self.by_member.remove(&oldest);
                        if at.saturating_add(REPORT_MARK_SETTLE_MS) > now_ms {
                            shed = 1;
                        } else {
                            dropped = 1;
                        }
                    }
                }
            }
        }
        self.by_member.insert(member.to_owned(), (seq, now_ms));
        self.by_age.insert((now_ms, member.to_owned()));
        ReportApplied::Applied { dropped, shed }
    }

    /// Forgets the records not applied within [`REPORT_MARK_TTL_MS`] of `now_ms` (a day: as if
    /// they had expired in Redis).
    pub fn drop_expired(&mut self, now_ms: u64) {
        while let Some((at, member)) = self.by_age.first().cloned() {
            if at.saturating_add(REPORT_MARK_TTL_MS) > now_ms {
                break;
            }
            self.by_age.remove(&(at, member.clone()));
            self.by_member.remove(&member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn a_copy_applies_once_and_a_higher_seq_again() {
        let mut m = ReporterMarks::default();
        assert_eq!(
            m.apply("r1", 1, T0),
            ReportApplied::Applied {
                dropped: 0,
                shed: 0
            }
        );
        assert_eq!(m.apply("r1", 1, T0 + 1), ReportApplied::Copy);
        assert_eq!(
            m.apply("r1", 2, T0 + 2),
            ReportApplied::Applied {
                dropped: 0,
                shed: 0
            }
        );
        assert_eq!(m.apply("r1", 1, T0 + 3), ReportApplied::Copy, "a late copy");
        // A day after its last apply the record is gone: the reporter starts again.
        assert_eq!(
            m.apply("r1", 1, T0 + 2 + REPORT_MARK_TTL_MS),
            ReportApplied::Applied {
                dropped: 0,
                shed: 0
            }
        );
    }

    #[test]
    fn at_the_bound_the_oldest_record_goes_settled_or_young() {
        let mut m = ReporterMarks::default();
        let cap = MAX_REPORTERS_PER_ACTION as u64;
        for i in 0..cap {
            assert_eq!(
                m.apply(&format!("r{i:05}"), 1, T0 + i),
                ReportApplied::Applied {
                    dropped: 0,
                    shed: 0
                }
            );
        }
        // Everyone applied within the settle span: a new reporter still gets in, shedding the
        // least recently applied record (r00000); the others go on.
        let young = T0 + REPORT_MARK_SETTLE_MS - 1;
        assert_eq!(
            m.apply("new", 1, young),
            ReportApplied::Applied {
                dropped: 0,
                shed: 1
            }
        );
        assert!(m.holds("new") && !m.holds("r00000"));
        assert_eq!(m.len(), MAX_REPORTERS_PER_ACTION);
        assert_eq!(m.apply("r00001", 1, young), ReportApplied::Copy);
        assert_eq!(m.apply("new", 1, young), ReportApplied::Copy);
        // r00001 is now the least recently applied (at T0 + 1), settled 10 minutes later: the
        // next new reporter drops it.
        let settled = T0 + 1 + REPORT_MARK_SETTLE_MS;
        assert_eq!(
            m.apply("new2", 1, settled),
            ReportApplied::Applied {
                dropped: 1,
                shed: 0
            }
        );
        assert_eq!(m.len(), MAX_REPORTERS_PER_ACTION);
        assert!(!m.holds("r00001") && m.holds("new") && m.holds("new2"));
        // The dropped reporter's next report is a new reporter's: applied (replacing the next
        // oldest, r00002), once.
        assert_eq!(
            m.apply("r00001", 2, settled + 1),
            ReportApplied::Applied {
                dropped: 1,
                shed: 0
            }
        );
        assert_eq!(m.apply("r00001", 2, settled + 2), ReportApplied::Copy);
        assert!(!m.holds("r00002"));
    }

    #[test]
    fn a_spray_of_minted_ids_kept_young_never_keeps_a_new_reporter_out() {
        let mut m = ReporterMarks::default();
        let cap = MAX_REPORTERS_PER_ACTION as u64;
        // A client mints the bound's ids and more, re-reporting them to keep them young.
        for round in 0..3u64 {
            for i in 0..cap + 100 {
                let at = T0 + round * 1_000 + i / 100;
                assert!(matches!(
                    m.apply(&format!("minted{i}"), round + 1, at),
                    ReportApplied::Applied { .. }
                ));
            }
        }
        // A restarted Envoy's worker, a second later: applied, then recognised.
        let now = T0 + 3_000 + cap / 100 + 1;
        assert_eq!(
            m.apply("worker", 1, now),
            ReportApplied::Applied {
                dropped: 0,
                shed: 1
            }
        );
        assert_eq!(m.apply("worker", 1, now + 1), ReportApplied::Copy);
        assert_eq!(m.len(), MAX_REPORTERS_PER_ACTION);
    }

    #[test]
    fn expired_records_make_room_without_counting_as_dropped() {
        let mut m = ReporterMarks::default();
        for i in 0..MAX_REPORTERS_PER_ACTION {
            m.apply(&format!("r{i}"), 1, T0);
        }
        let later = T0 + REPORT_MARK_TTL_MS;
        assert_eq!(
            m.apply("new", 1, later),
            ReportApplied::Applied {
                dropped: 0,
                shed: 0
            }
        );
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn actions_without_a_rule_share_one_set_by_action_and_reporter() {
        assert_eq!(member("ghost", "w1", true), "ghost/w1");
        assert_eq!(member("reply", "w1", false), "w1");
    }
}
