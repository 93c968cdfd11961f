//! One decision under a rule, as every way in makes it: the HTTP decision API
//! (`POST /v1/throttle`) and Envoy's rate limit service (gRPC, [`crate::rls`]). The store call
//! under the deadline, the wire answer, the live activity and the decision metrics are recorded
//! here once, so no path counts differently from another.

use std::time::Instant;

use sluice_core::leased::offer;
use sluice_core::wire::ThrottleResponse;
use sluice_core::Rule;

use crate::app::App;
use crate::clock::now_ms;
use crate::metrics::Outcome;
use crate::store::StoreError;

/// Decides `quantity` units for `key` under `rule` (quantity 0 peeks: nothing changes and no
/// activity is recorded), with no lease: what the rate limit service and every caller that
/// cannot hold a lease get. `started` is when the caller began on the request, for the latency
/// the decision metric reports.
pub async fn decide(
    app: &App,
    rule: &Rule,
    key: &str,
    quantity: u64,
    started: Instant,
) -> Result<ThrottleResponse, StoreError> {
    decide_leased(app, rule, key, quantity, false, started).await
}

/// Like [`decide`], for a caller that may hold a lease (`asked`: the sluice filter says so per
/// request). When the rule offers one ([`offer`]: enforced rules with a `lease`), an allowed
/// request also debits a grant in the same atomic store step, and the answer carries it with
/// `remaining` (and the rest) already excluding the granted units.
pub async fn decide_leased(
    app: &App,
    rule: &Rule,
    key: &str,
    quantity: u64,
    asked: bool,
    started: Instant,
) -> Result<ThrottleResponse, StoreError> {
    let lease = offer(rule, asked);
    let leased = app
        .store_call(app.store.throttle_leased(rule, key, quantity, lease, None))
        .await?;
    let decision = leased.decision;
    let mut response = ThrottleResponse::new(
        rule.algorithm(),
        rule.mode(),
        rule.params().policy_window_ns(),
        &decision,
    );
    response.lease = leased.grant;
    if quantity > 0 {
        app.activity
            .record(rule.action(), key, decision.allowed, now_ms());
    }
    app.metrics.decision(
        rule.action().as_str(),
        rule.algorithm(),
        Outcome::of(decision.allowed, rule.mode()),
        started.elapsed().as_secs_f64(),
    );
    if let Some(grant) = leased.grant {
        app.metrics
            .lease_granted(rule.action().as_str(), grant.units);
    }
    Ok(response)
}
