//! Assignments on the wire (and abandons): every assignment with an explicit TTL in whole seconds (Envoy 1.40 reads
//! only the seconds; under 1 s expires at once), a token bucket always with `tokens_per_fill`
//! (unset reads as 0) and a whole-second `fill_interval` (a sub-second one never empties).

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};

use crate::rlqs::{Assigned, Assignment};

fn seconds(s: u64) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(s).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// The strategy of an assignment; `None` for an abandon, which carries none.
fn strategy(assignment: Assignment) -> Option<Strategy> {
    Some(match assignment {
        Assignment::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assignment::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assignment::TokenBucket(shape) => Strategy::TokenBucket(TokenBucket {
            max_tokens: shape.max_tokens,
            tokens_per_fill: Some(UInt32Value {
                value: shape.tokens_per_fill,
            }),
            fill_interval: Some(seconds(u64::from(shape.fill_interval_s.max(1)))),
        }),
        Assignment::Abandon => return None,
    })
}

fn action(assignment: Assignment, ttl_s: u64) -> Action {
    match strategy(assignment) {
        None => Action::AbandonAction(AbandonAction {}),
        Some(strategy) => Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(seconds(ttl_s.max(1))),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        }),
    }
}

/// One response carrying `assigned`, each for `ttl_s` seconds.
pub fn response(assigned: Vec<Assigned>, ttl_s: u64) -> RateLimitQuotaResponse {
    let bucket_action = assigned
        .into_iter()
        .map(|a| BucketAction {
            bucket_id: Some(a.bucket),
            bucket_action: Some(action(a.assignment, ttl_s)),
        })
        .collect();
    RateLimitQuotaResponse { bucket_action }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
    use sluice_core::rlqs::shape::Shape;

    #[test]
    fn a_token_bucket_carries_every_field_envoy_needs() {
        let bucket = BucketId {
            bucket: [("name".to_owned(), "user".to_owned())].into(),
        };
        let shape = Shape {
            max_tokens: 7,
            tokens_per_fill: 0,
            fill_interval_s: 2,
        };
        let r = response(
            vec![Assigned {
                bucket: bucket.clone(),
                assignment: Assignment::TokenBucket(shape),
            }],
            12,
        );
        let a = &r.bucket_action[0];
        assert_eq!(a.bucket_id.as_ref(), Some(&bucket));
        let Some(Action::QuotaAssignmentAction(q)) = &a.bucket_action else {
            panic!("an assignment");
        };
        assert_eq!(q.assignment_time_to_live, Some(seconds(12)));
        let Some(Strategy::TokenBucket(tb)) =
            q.rate_limit_strategy.as_ref().and_then(|s| s.strategy)
        else {
            panic!("a token bucket");
        };
        assert_eq!(tb.max_tokens, 7);
        assert_eq!(
            tb.tokens_per_fill,
            Some(UInt32Value { value: 0 }),
            "sent even when 0"
        );
        assert_eq!(tb.fill_interval, Some(seconds(2)));
    }
}
