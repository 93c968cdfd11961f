//! One decision under a rule, as every way in makes it: the HTTP decision API
//! (`POST /v1/throttle`) and Envoy's rate limit service (gRPC, [`crate::rls`]). The store call
//! under the deadline, the wire answer, the live activity and the decision metrics are recorded
//! here once, so no path counts differently from another.

use std::time::Instant;

use sluice_core::wire::ThrottleResponse;
use sluice_core::Rule;

use crate::app::App;
use crate::clock::now_ms;
use crate::metrics::Outcome;
use crate::store::StoreError;

/// Decides `quantity` units for `key` under `rule` (quantity 0 peeks: nothing changes and no
/// activity is recorded). `started` is when the caller began on the request, for the latency the
/// decision metric reports.
pub async fn decide(
    app: &App,
    rule: &Rule,
    key: &str,
    quantity: u64,
    started: Instant,
) -> Result<ThrottleResponse, StoreError> {
    let decision = app
        .store_call(app.store.throttle(rule, key, quantity, None))
        .await?;
    let response = ThrottleResponse::new(
        rule.algorithm(),
        rule.mode(),
        rule.params().policy_window_ns(),
        &decision,
    );
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
    Ok(response)
}
