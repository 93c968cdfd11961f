//! Decisions withdrawn by request: exactly once at the edge of a stall.
//!
//! A decision is recorded (history, `sluice_decisions_total`) when its store step answers in
//! time; its answer then still has to leave this process. If the process stands still right
//! then (SIGSTOP, a VM pause), the answer leaves after the resume, long after the filter gave up
//! on the request and applied its failure mode: Envoy passed it unchecked (and the filter counts
//! it so), yet the history also holds the backend's "allowed" (or a denial no client saw).
//!
//! The filter knows which requests it gave up on: each decision request carries a
//! `decision_id`, and the filter's next count report names the ids whose callouts failed
//! (`FilterReport::gave_up`). This book keeps the decisions recorded with an id so that a report
//! naming one takes it back:
//!
//! - **A ring of the last [`RING`] decisions** (hot path: one short lock, one push), which also
//!   catches an answer lost on its way back with no stall, if the report comes before the ring
//!   turns over.
//! - **At a stall** (the watchdog of [`crate::deadline::stall`] counted one since the book last
//!   looked), the decisions recorded within [`CAPTURE_BEFORE`] of its start are moved out of the
//!   ring into the **suspects**, kept [`KEEP`] (at most [`MAX_SUSPECTS`]), so that the traffic
//!   after the resume cannot push them out before the filter's report arrives (a second or two
//!   after the resume).
//!
//! [`Edge::take`] removes what a report names, under the lock: each decision is withdrawn once,
//! whichever copy of the report comes first. What is withdrawn: its count in the history (the
//! step it was decided in), `sluice_decisions_withdrawn_total`, and an allowed one's debit is
//! counted as a late debit (it stays: the caller did not use it). Not withdrawn: the per-key
//! live activity and top denied keys, which keep it. A report reaching another replica than the
//! one that decided withdraws nothing there (with the exchange stream, reports and decisions
//! share the stream's backend).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sluice_core::{Action, Mode};

/// Decisions with an id kept in the ring.
pub const RING: usize = 4_096;
/// How long before a stall began a decision must have been recorded to be kept as a suspect: a
/// recorded answer normally leaves within a millisecond; this leaves room for a busy host.
pub const CAPTURE_BEFORE: Duration = Duration::from_secs(1);
/// How long suspects are kept after their stall was seen (the report naming them comes within
/// a report period or two of the resume).
pub const KEEP: Duration = Duration::from_secs(60);
/// Most suspects kept (the decisions of one second before a stall at over 4,000 a second are
/// not all kept: the latest are).
pub const MAX_SUSPECTS: usize = 4_096;

/// One recorded decision with its caller's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The caller's `decision_id`.
    pub id: u64,
    /// The action (an all-or-nothing request records one per check it recorded).
    pub action: Action,
    /// Whether the algorithm allowed it.
    pub allowed: bool,
    /// The rule's mode (a shadow denial is counted as allowed in the history).
    pub mode: Mode,
    /// When it was recorded, by the wall clock (its history step).
    pub at_ms: u64,
    /// When it was recorded, by the monotonic clock (against a stall's start).
    pub at: Instant,
}

/// The stall the watchdog saw last: how many so far, and when the last one began.
pub type LastStall = (u64, Option<Instant>);

#[derive(Debug, Default)]
struct Book {
    ring: VecDeque<Decided>,
    stalls_seen: u64,
    /// Suspects by id, with when they were captured.
    suspects: HashMap<u64, (Instant, Vec<Decided>)>,
}

impl Book {
    /// Moves the ring's decisions recorded within [`CAPTURE_BEFORE`] of a stall not seen yet
    /// into the suspects; forgets suspects older than [`KEEP`].
    fn look(&mut self, stall: LastStall, now: Instant) {
        self.suspects
            .retain(|_, (captured, _)| now.saturating_duration_since(*captured) < KEEP);
        let (stalls, began) = stall;
        if stalls == self.stalls_seen {
            return;
        }
        self.stalls_seen = stalls;
        let Some(began) = began else {
            return;
        };
        let from = began.checked_sub(CAPTURE_BEFORE).unwrap_or(began);
        let (caught, kept): (VecDeque<Decided>, VecDeque<Decided>) = std::mem::take(&mut self.ring)
            .into_iter()
            .partition(|d| d.at >= from);
        self.ring = kept;
        // The latest are the likeliest: keep those when over the bound.
        for d in caught.into_iter().rev() {
            if self.suspects.len() >= MAX_SUSPECTS && !self.suspects.contains_key(&d.id) {
                break;
            }
            self.suspects
                .entry(d.id)
                .or_insert_with(|| (now, Vec::new()))
                .1
                .push(d);
        }
    }
}

/// The book (see the module).
#[derive(Debug, Default)]
pub struct Edge {
    book: Mutex<Book>,
}

impl Edge {
    /// An empty book.
    pub fn new() -> Edge {
        Edge::default()
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a decision just recorded (`stall`: the watchdog's last stall, `now`: the monotonic
    /// clock, as `decided.at`).
    pub fn remember(&self, decided: Decided, stall: LastStall) {
        let now = decided.at;
        let mut book = self.lock();
        book.look(stall, now);
        if book.ring.len() >= RING {
            book.ring.pop_front();
        }
        book.ring.push_back(decided);
    }

    /// Takes out every decision kept under one of `ids` (a report's `gave_up`): each is
    /// returned once, to be withdrawn.
    pub fn take(&self, ids: &[u64], stall: LastStall, now: Instant) -> Vec<Decided> {
        if ids.is_empty() {
            return Vec::new();
        }
        let mut book = self.lock();
        book.look(stall, now);
        let mut out = Vec::new();
        for id in ids {
            if let Some((_, decided)) = book.suspects.remove(id) {
                out.extend(decided);
            }
        }
        if !book.ring.is_empty() {
            let wanted: HashSet<u64> = ids.iter().copied().collect();
            let (taken, kept): (VecDeque<Decided>, VecDeque<Decided>) =
                std::mem::take(&mut book.ring)
                    .into_iter()
                    .partition(|d| wanted.contains(&d.id));
            book.ring = kept;
            out.extend(taken);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn decided(id: u64, at: Instant) -> Decided {
        Decided {
            id,
            action: Action::parse("reply").unwrap(),
            allowed: true,
            mode: Mode::Enforce,
            at_ms: 1_700_000_000_000,
            at,
        }
    }

    #[test]
    fn a_report_takes_back_what_it_names_once() {
        let edge = Edge::new();
        let t0 = Instant::now();
        for id in 1..=5 {
            edge.remember(decided(id, t0 + id as u32 * MS), (0, None));
        }
        let taken = edge.take(&[2, 4, 99], (0, None), t0 + 10 * MS);
        assert_eq!(taken.iter().map(|d| d.id).collect::<Vec<_>>(), [2, 4]);
        assert!(
            edge.take(&[2, 4], (0, None), t0 + 11 * MS).is_empty(),
            "once"
        );
        assert_eq!(edge.take(&[5], (0, None), t0 + 12 * MS).len(), 1);
        assert!(edge.take(&[], (0, None), t0).is_empty());
    }

    #[test]
    fn the_decisions_before_a_stall_outlive_the_traffic_after_it() {
        let edge = Edge::new();
        let t0 = Instant::now();
        // Recorded long before the stall (not kept past the ring), and just before it.
        edge.remember(decided(1, t0), (0, None));
        let began = t0 + Duration::from_secs(10);
        edge.remember(decided(2, began - 2 * MS), (0, None));
        edge.remember(decided(3, began), (0, None));
        // 90 s stopped; after the resume the watchdog has counted the stall, and a ring's worth
        // of fresh decisions follows before the filter's report.
        let resumed = began + Duration::from_secs(90);
        for i in 0..RING as u64 {
            edge.remember(decided(1_000 + i, resumed + MS), (1, Some(began)));
        }
        let taken = edge.take(
            &[1, 2, 3],
            (1, Some(began)),
            resumed + Duration::from_secs(2),
        );
        let mut ids: Vec<u64> = taken.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [2, 3], "the stall's edge is kept; the old one is gone");
        // Suspects expire KEEP after their stall was seen.
        let edge = Edge::new();
        edge.remember(decided(7, began), (0, None));
        edge.remember(decided(8, resumed), (1, Some(began)));
        assert!(edge
            .take(&[7], (1, Some(began)), resumed + KEEP + MS)
            .is_empty());
    }

    #[test]
    fn an_all_or_nothing_request_is_taken_back_check_by_check() {
        let edge = Edge::new();
        let t0 = Instant::now();
        let mut login = decided(9, t0);
        login.action = Action::parse("login").unwrap();
        edge.remember(decided(9, t0), (0, None));
        edge.remember(login, (0, None));
        assert_eq!(edge.take(&[9], (0, None), t0).len(), 2);
    }
}
