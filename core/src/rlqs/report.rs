//! What one usage report may claim of one bucket. Envoy's counts are a client's word: the
//! allowed count is post-debited beyond what the bucket's share was paid (its no-assignment
//! window), never denied, so an unbounded claim (`num_requests_allowed` of 10^18) would carry
//! the key in debt for as long as the commit's carry bound allows (about 100 days). The allowed
//! count is capped at what the bucket could have seen: the tokens its share was paid and not
//! yet reported used (its credit), plus [`allowance`]: one period of the rule, the most a
//! no-assignment window is taken to admit (per key per report: the backend shares it among the
//! report's buckets of one key). So no single report puts a key in debt beyond one period.
//!
//! The denied count only weighs the bucket's demand (rates follow demand), so it is capped at a
//! bound that does not depend on the bucket's share: what the rule's whole bucket serves over one
//! report interval ([`demand_most`]). Demand beyond that cannot be served by any split, and a
//! cap tied to the share (its credit) would keep a holder with a small rate small.

use super::shape::Shape;
use super::ENVOY_REPORT_INTERVAL_S;
use crate::rule::{Limit, Rule};
use crate::time::NANOS_PER_SEC;

/// One period of `rule`: a meter's rate count per its period (its debt then drains in one
/// period), a window's capacity (one window). The per-report allowance beyond a bucket's credit.
pub fn allowance(rule: &Rule) -> u64 {
    match rule.limit() {
        Limit::Rate(rate) => rate.count,
        Limit::Window(_) | Limit::Calendar(_) => rule.capacity(),
    }
}

/// The most denied requests one report's bucket is counted for: what `whole` (the rule's
/// bucket for every holder) admits over one report interval of Envoy's.
pub fn demand_most(whole: Shape) -> u64 {
    let most = whole.admits_within(ENVOY_REPORT_INTERVAL_S * NANOS_PER_SEC);
    u64::try_from(most).unwrap_or(u64::MAX)
}

/// One report's counts of one bucket, capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capped {
    /// Allowed requests accepted: at most credit + allowance.
    pub allowed: u64,
    /// Denied requests accepted (they weigh the bucket's demand): at most [`demand_most`].
    pub denied: u64,
    /// Units of the claim refused (allowed and denied beyond the cap).
    pub refused: u64,
}

/// Caps a report's `allowed` count of a bucket holding `credit` paid units not yet reported
/// used, with `allowance` for what it may have admitted unpaid, and its `denied` count at
/// `denied_most` ([`demand_most`]).
pub fn cap(allowed: u64, denied: u64, credit: u64, allowance: u64, denied_most: u64) -> Capped {
    let most = credit.saturating_add(allowance);
    let (a, d) = (allowed.min(most), denied.min(denied_most));
    Capped {
        allowed: a,
        denied: d,
        refused: (allowed - a).saturating_add(denied - d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Rule {
        Rule::from_json_str(json).unwrap()
    }

    #[test]
    fn one_period_of_the_rule() {
        let meter = rule(
            r#"{"action":"a","algorithm":"token_bucket","capacity":20,"rate":{"count":10,"period":"1s"}}"#,
        );
        assert_eq!(allowance(&meter), 10);
        let window =
            rule(r#"{"action":"a","algorithm":"fixed_window","capacity":7,"window":"60s"}"#);
        assert_eq!(allowance(&window), 7);
    }

    #[test]
    fn a_claim_is_capped_at_credit_plus_one_period() {
        assert_eq!(
            cap(1_000_000_000_000_000_000, 0, 20, 10, 70),
            Capped {
                allowed: 30,
                denied: 0,
                refused: 1_000_000_000_000_000_000 - 30
            }
        );
        assert_eq!(
            cap(5, 3, 0, 10, 70),
            Capped {
                allowed: 5,
                denied: 3,
                refused: 0
            }
        );
        assert_eq!(
            cap(u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX).refused,
            0
        );
        assert_eq!(
            cap(u64::MAX, u64::MAX, 0, 1, 1).refused,
            u64::MAX,
            "saturated"
        );
        // Denied counts are capped alike for every holder, whatever its credit: two flooded
        // Envoys weigh the same.
        assert_eq!(cap(3, 5_000, 0, 10, 70).denied, 70);
        assert_eq!(cap(3, 5_000, 400, 10, 70).denied, 70);
    }

    #[test]
    fn demand_is_counted_up_to_what_the_whole_rule_serves_in_a_report_interval() {
        let whole = Shape {
            max_tokens: 20,
            tokens_per_fill: 10,
            fill_interval_s: 1,
        };
        assert_eq!(demand_most(whole), 20 + 50);
    }
}
