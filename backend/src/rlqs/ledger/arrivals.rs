//! New buckets, worked through a bounded number at a time. A new bucket costs store steps (its
//! key's first sync, its burst, a post-debit of its no-assignment window); a renewal of a bucket
//! already held costs none in the usual case. So a report naming thousands of new buckets (an
//! Envoy restarted with many users, a spray of client ids) is split: its renewals are answered
//! first, in one response, and the new buckets queue here and get at most
//! [`ARRIVALS_PER_STEP`] per turn of the ledger task, between ticks, other reports and resets.
//! Their Envoys keep the no-assignment behaviour meanwhile, as for any new bucket.
//!
//! Bound: the queue holds only buckets already counted in their stream's bucket map, so never
//! more than the streams' bucket bounds.

use std::time::Instant;

use super::Ledger;
use crate::state::App;

/// Most new buckets whose store steps one turn of the ledger task runs (a few store round
/// trips each: with Redis well under a second per turn).
pub const ARRIVALS_PER_STEP: usize = 256;

impl Ledger {
    /// New buckets wait for their first store steps.
    pub fn has_arrivals(&self) -> bool {
        !self.arrivals.is_empty()
    }

    /// Runs the first store steps of up to [`ARRIVALS_PER_STEP`] new buckets (oldest first) and
    /// sends their assignments. A bucket whose stream closed meanwhile is dropped (its Envoy
    /// will not hear, and nothing was paid for it).
    pub async fn work_arrivals(&mut self, app: &App, now: Instant) {
        for _ in 0..ARRIVALS_PER_STEP {
            let Some(a) = self.arrivals.pop_front() else {
                break;
            };
            let Some(s) = self.streams.get_mut(&a.stream) else {
                continue;
            };
            if !s.open {
                let held = self
                    .keys
                    .get(&a.id)
                    .is_some_and(|e| e.shares.contains_key(&(a.stream, a.canon.clone())));
                if !held {
                    s.buckets.remove(&a.canon);
                    if s.buckets.is_empty() {
                        self.streams.remove(&a.stream);
                    }
                }
                continue;
            }
            self.report_share(app, (a.stream, a.canon), a.bucket, a.id, a.seen, now)
                .await;
        }
        self.metrics.set_arrivals(self.arrivals.len());
        self.flush();
    }
}
