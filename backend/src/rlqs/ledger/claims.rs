//! A report's counts, read as claims. `num_requests_allowed` is post-debited beyond what a
//! bucket's share was paid, never denied, so an unbounded claim would carry its key in debt for
//! the commit's carry bound (about 100 days). Each bucket's counts are capped at its credit (paid
//! units not yet reported used) plus what is left of its key's allowance in this report: one
//! period of the rule per key per report, shared by every bucket of the key the report names
//! (the same bucket twice, or several buckets a mapping file maps to one key). So no single
//! report puts a key in debt beyond one period of its rule ([`sluice_core::rlqs::report`]). The
//! denied count, which only weighs demand, is capped at what the key's whole bucket serves in
//! one report interval, the same for every holder.

use std::sync::LazyLock;

use sluice_core::rlqs::report;
use sluice_core::rlqs::shape::shape;

use super::{rule_in_force, Allowances, KeyId, Ledger, Seen, ShareId, NANO};
use crate::log_limit::{LogLimit, LOG_EVERY};
use crate::state::App;

/// Per process: a misbehaving Envoy may overclaim on every report.
static REFUSED: LazyLock<LogLimit> = LazyLock::new(|| LogLimit::new(LOG_EVERY));

/// Logs a report's counts refused beyond what its bucket could have seen, rate-limited.
fn refused(action: &str, units: u64) {
    if let Some(count) = REFUSED.admit("report_refused") {
        tracing::warn!(action, units, count,
            "rlqs: a report claimed more requests than its bucket could have seen (its share's tokens and one period of the rule); the excess was refused ({count} such reports since the last line)");
    }
}

impl Ledger {
    /// One bucket's counts in a report (allowed, denied), capped (see the module doc); the refused excess is
    /// counted and logged. A key without a rule in force is not capped: its bucket is answered
    /// `ALLOW_ALL` and its counts are not used.
    pub(super) fn claimed(
        &self,
        app: &App,
        id: &KeyId,
        sid: &ShareId,
        (allowed, denied): (u64, u64),
        allowances: &mut Allowances,
    ) -> Seen {
        let idle = allowed == 0 && denied == 0;
        let Some(rule) = rule_in_force(app, id) else {
            return Seen {
                allowed,
                requests: allowed.saturating_add(denied),
                idle,
            };
        };
        let credit = self
            .keys
            .get(id)
            .and_then(|e| e.shares.get(sid))
            .map_or(0, |s| {
                u64::try_from(s.paid_nano / NANO)
                    .unwrap_or(u64::MAX)
                    .saturating_add(s.post_debited)
                    .saturating_sub(s.used)
            });
        let left = allowances
            .0
            .entry(id.clone())
            .or_insert_with(|| report::allowance(&rule));
        let whole = self
            .keys
            .get(id)
            .map_or_else(|| shape(&rule.params()), |e| e.total());
        let capped = report::cap(allowed, denied, credit, *left, report::demand_most(whole));
        *left = left.saturating_sub(capped.allowed.saturating_sub(credit));
        if capped.refused > 0 {
            self.metrics.report_refused(capped.refused);
            refused(&id.action, capped.refused);
        }
        Seen {
            allowed: capped.allowed,
            requests: capped.allowed.saturating_add(capped.denied),
            idle,
        }
    }
}
