//! A reservation's life after its decision, the same for both ways in (`POST /v1/throttle`
//! with a `reservation_id` then `POST /v1/commit`; the RLS front door's `sluice_reservation` and
//! commit descriptors): recorded as in flight once allowed, then committed at its actual cost under
//! its caller's deadline and counted once ([`sluice_core::commit`]).

use std::sync::Arc;

use sluice_core::commit::Commit;
use sluice_core::wire::ThrottleResponse;
use sluice_core::Rule;

use super::call;
use crate::deadline::{Deadline, DecideError};
use crate::state::App;
use crate::store::CommitOutcome;

/// After an allowed decision of a request that carried a reservation id (`reservation_id` over
/// HTTP, `sluice_reservation` in RLS): holds the
/// reservation as in flight for the key view ([`crate::store::BudgetStore::record_reservation`]) before the
/// answer goes out, so that its commit (sent only after the answer) always finds it. The
/// decision stands whatever happens here: a reservation not recorded is counted in
/// `sluice_reservations_unheld` and a store failure is said in the log (the key view then shows
/// less in flight than there is; decisions never read it). A shadow rule's would-deny debited
/// nothing and holds nothing, as does a quantity of 0.
pub async fn record_reservation(
    app: &App,
    rule: &Rule,
    key: &str,
    id: &str,
    quantity: u64,
    response: &ThrottleResponse,
) {
    if !response.allowed || response.would_deny || quantity == 0 {
        return;
    }
    let action = rule.action().as_str();
    match app
        .store_call(app.store.record_reservation(rule, key, id, quantity))
        .await
    {
        Ok(true) => {}
        Ok(false) => app.metrics.reservation_not_recorded(action),
        Err(e) => {
            app.metrics.reservation_not_recorded(action);
            tracing::warn!(
                action,
                error = %e,
                "an allowed reservation is not shown as in flight (the decision stands)"
            );
        }
    }
}

/// After an allowed decision that granted a lease of `units`: adds them to the key's lease pool
/// ([`crate::store::BudgetStore::record_lease_grant`]), which bounds what the grant's return
/// (a commit with a `lease-` id) gives back. The decision stands whatever happens here: a grant
/// not recorded is counted in `sluice_reservations_unheld` and said in the log (its return then
/// gives back less, never more).
pub async fn record_lease_grant(app: &App, rule: &Rule, key: &str, units: u64) {
    let action = rule.action().as_str();
    if let Err(e) = app
        .store_call(app.store.record_lease_grant(rule, key, units))
        .await
    {
        app.metrics.reservation_not_recorded(action);
        tracing::warn!(
            action,
            error = %e,
            "a lease grant is not recorded: its return will give back nothing (the decision stands)"
        );
    }
}

/// Commits reservation `id` of `key` under `rule` (`commit_of`: what was reserved, the actual cost,
/// when it was reserved) as one store step under `deadline` ([`call::run`]), counted in the
/// commit metrics; one that finishes after its caller gave up happened all the same, and is
/// counted too.
pub async fn commit(
    app: &App,
    rule: &Arc<Rule>,
    key: &str,
    id: &str,
    commit_of: Commit,
    deadline: Option<Deadline>,
) -> Result<CommitOutcome, DecideError> {
    // The step owns what it needs: it may outlive this request (see crate::decide::call).
    let store = app.store.clone();
    let (step_rule, key, id) = (Arc::clone(rule), key.to_owned(), id.to_owned());
    let step = async move { store.commit(&step_rule, &key, &id, commit_of).await };
    let metrics = app.metrics.clone();
    let late_rule = Arc::clone(rule);
    let outcome = call::run(app, deadline, step, move |result| {
        if let Ok(o) = &result {
            metrics.commit(late_rule.action().as_str(), o);
        }
    })
    .await?;
    app.metrics.commit(rule.action().as_str(), &outcome);
    Ok(outcome)
}
