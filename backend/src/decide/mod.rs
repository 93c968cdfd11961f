//! One decision under a rule, as every way in makes it: the HTTP decision API
//! (`POST /v1/throttle`) and Envoy's rate limit service (gRPC, [`crate::grpc::rls`]). The store call
//! under the caller's deadline ([`crate::deadline`]), the wire answer, the live activity and the
//! decision metrics are recorded here once, so no path counts differently from another. A
//! decision made after its caller gave up is never recorded as allowed or denied (the caller did
//! not act on it): it is counted as late instead ([`crate::deadline::late`]). A decision
//! recorded with its caller's `decision_id` is kept in [`crate::history::edge`], so that one
//! whose answer reached its caller too late (a stall of this process right after it) is
//! withdrawn when the caller's report names it.

pub mod call;
pub mod reservation;

use std::sync::Arc;
use std::time::Instant;

use sluice_core::all::Part;
use sluice_core::leased::offer;
use sluice_core::wire::{DeniedCheck, ThrottleAllResponse, ThrottleResponse};
use sluice_core::Rule;

use crate::clock::now_ms;
use crate::deadline::late::{Late, LateChecks};
use crate::deadline::{stall, Deadline, DecideError};
use crate::history::edge::Decided;
use crate::metrics::Outcome;
use crate::state::App;
use crate::store::CheckRequest;

pub use reservation::record_reservation;

/// One check of a request decided with others: the rule in force (shared, so that a store step
/// that outlives its request holds it without a copy), the key and the units.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The rule in force for the key (its override, if it has one).
    pub rule: &'a Arc<Rule>,
    /// The key, as the caller sent it.
    pub key: &'a str,
    /// Units asked for (0 peeks).
    pub quantity: u64,
    /// All or nothing with the request's other checks, or counted on its own (the
    /// envoyproxy/ratelimit semantics of a ratelimit-config domain).
    pub part: Part,
}

/// Decides `quantity` units for `key` under `rule` (quantity 0 peeks: nothing changes and no
/// activity is recorded), with no lease: what the rate limit service and every caller that
/// cannot hold a lease get. `deadline`: the caller's, if it sent one. `started` is when the
/// caller began on the request, for the latency the decision metric reports.
pub async fn decide(
    app: &App,
    rule: &Arc<Rule>,
    key: &str,
    quantity: u64,
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<ThrottleResponse, DecideError> {
    decide_leased(
        app,
        rule,
        key,
        quantity,
        LeaseAsk::NotAsked,
        deadline,
        started,
        None,
    )
    .await
}

/// Whether a request's caller can hold a lease: the sluice filter says so per request (`lease`
/// in a decision request); the rate limit service and tools cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAsk {
    /// The caller can hold a lease: an allowed decision may carry the rule's ([`offer`]).
    Asked,
    /// The caller cannot hold one: no decision carries a lease.
    NotAsked,
}

impl LeaseAsk {
    /// From a decision request's `lease` field.
    pub fn of(lease: bool) -> LeaseAsk {
        if lease {
            LeaseAsk::Asked
        } else {
            LeaseAsk::NotAsked
        }
    }
}

/// Like [`decide`], for a caller that may hold a lease (`ask`: the sluice filter says so per
/// request). When the rule offers one ([`offer`]: enforced rules with a `lease`), an allowed
/// request also debits a grant in the same atomic store step, and the answer carries it with
/// `remaining` (and the rest) already excluding the granted units. `decision_id`: the caller's
/// id for the request, if it sent one.
#[allow(clippy::too_many_arguments)]
pub async fn decide_leased(
    app: &App,
    rule: &Arc<Rule>,
    key: &str,
    quantity: u64,
    ask: LeaseAsk,
    deadline: Option<Deadline>,
    started: Instant,
    decision_id: Option<u64>,
) -> Result<ThrottleResponse, DecideError> {
    let lease = offer(rule, ask == LeaseAsk::Asked);
    // The step owns what it needs: it may outlive this request (see crate::decide::call).
    let (store, step_rule, owned_key) = (app.store.clone(), Arc::clone(rule), key.to_owned());
    let step = async move {
        store
            .throttle_leased(&step_rule, &owned_key, quantity, lease)
            .await
    };
    let late = Late::new(app.metrics.clone());
    let late_rule = Arc::clone(rule);
    let leased = call::run(app, deadline, step, move |result| {
        late.single(late_rule.action().as_str(), quantity, &result)
    })
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
        let at_ms = now_ms();
        app.activity
            .record(rule.action(), key, decision.allowed, at_ms);
        remember(app, decision_id, rule, decision.allowed, at_ms);
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
        // Before the answer goes out, so the grant's return (sent only after) always finds it.
        reservation::record_lease_grant(app, rule, key, grant.units).await;
    }
    Ok(response)
}

/// Decides all-or-nothing checks (`POST /v1/throttle/all`, and the rate limit service's
/// descriptors): allowed only if every check allows, and a denied request consumes nothing from
/// any of its limits ([`crate::store::DecisionStore::throttle_all`]). Each check is recorded as one
/// decision is: every check of an allowed request (with its own outcome, so a shadow rule's
/// would-deny shows), and of a denied request only the check that denied it (the others
/// consumed nothing, like a peek).
pub async fn decide_all(
    app: &App,
    checks: &[Check<'_>],
    deadline: Option<Deadline>,
    started: Instant,
    decision_id: Option<u64>,
) -> Result<ThrottleAllResponse, DecideError> {
    // The step owns what it needs: it may outlive this request (see crate::decide::call).
    let owned: Vec<(Arc<Rule>, String, u64, Part)> = checks
        .iter()
        .map(|c| (Arc::clone(c.rule), c.key.to_owned(), c.quantity, c.part))
        .collect();
    let late_checks: LateChecks = checks
        .iter()
        .map(|c| (Arc::clone(c.rule), c.quantity))
        .collect();
    let store = app.store.clone();
    let step = async move {
        let requests: Vec<CheckRequest<'_>> = owned
            .iter()
            .map(|(rule, key, quantity, part)| CheckRequest {
                rule,
                key,
                quantity: *quantity,
                part: *part,
            })
            .collect();
        store.throttle_all(&requests).await
    };
    let late = Late::new(app.metrics.clone());
    let outcome = call::run(app, deadline, step, move |result| {
        late.all(&late_checks, &result)
    })
    .await?;
    if outcome.unrefunded > 0 {
        app.metrics
            .unrefunded(u64::try_from(outcome.unrefunded).unwrap_or(u64::MAX));
        tracing::warn!(
            unrefunded = outcome.unrefunded,
            "Redis Cluster: a request denied by one of its limits kept the debit of {} other \
             limit(s), whose keys another request changed before the refund",
            outcome.unrefunded
        );
    }
    let now = now_ms();
    let seconds = started.elapsed().as_secs_f64();
    let mut results = Vec::with_capacity(checks.len());
    for (index, (check, decision)) in checks.iter().zip(&outcome.decisions).enumerate() {
        let rule = check.rule;
        results.push(ThrottleResponse::new(
            rule.algorithm(),
            rule.mode(),
            rule.params().policy_window_ns(),
            decision,
        ));
        let recorded = outcome.denied.is_none_or(|denied| denied == index);
        if !recorded {
            // Not a decision of its own, but its key may hold state (envoyproxy/ratelimit's
            // counting and checks counted on their own take from a refused request; a Redis
            // Cluster refund may have missed): the views of what is active must still read it.
            if check.quantity > 0 {
                app.activity.touched.touch(rule.action());
            }
            continue;
        }
        if check.quantity > 0 {
            app.activity
                .record(rule.action(), check.key, decision.allowed, now);
            remember(app, decision_id, rule, decision.allowed, now);
        }
        app.metrics.decision(
            rule.action().as_str(),
            rule.algorithm(),
            Outcome::of(decision.allowed, rule.mode()),
            seconds,
        );
    }
    Ok(ThrottleAllResponse {
        allowed: outcome.denied.is_none(),
        denied: outcome.denied.and_then(|index| {
            checks.get(index).map(|c| DeniedCheck {
                index,
                action: c.rule.action().as_str().to_owned(),
            })
        }),
        results,
    })
}

/// Decides `checks` as one request, one answer per check in order: a single check is one
/// decision ([`decide`], exactly as `POST /v1/throttle`), several are all or nothing
/// ([`decide_all`], as `POST /v1/throttle/all`), and checks counted on their own
/// ([`Part::OnItsOwn`]) are one store step too. Both descriptor mappings of the RLS front door
/// ([`crate::grpc::rls`]) decide this way.
pub async fn decide_checks(
    app: &App,
    checks: &[Check<'_>],
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<Vec<ThrottleResponse>, DecideError> {
    match checks {
        [] => Ok(Vec::new()),
        [one] if one.part == Part::AllOrNothing => Ok(vec![
            decide(app, one.rule, one.key, one.quantity, deadline, started).await?,
        ]),
        several => Ok(decide_all(app, several, deadline, started, None)
            .await?
            .results),
    }
}

/// Keeps a recorded decision that carries its caller's id, so that the caller's report can
/// withdraw it ([`crate::history::edge`]).
fn remember(app: &App, decision_id: Option<u64>, rule: &Rule, allowed: bool, at_ms: u64) {
    let Some(id) = decision_id else {
        return;
    };
    app.activity.edge.remember(
        Decided {
            id,
            action: rule.action().clone(),
            allowed,
            mode: rule.mode(),
            at_ms,
            at: Instant::now(),
        },
        stall::last_stall(),
    );
}
