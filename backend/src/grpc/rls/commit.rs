//! The commits an RLS request carries (sluice_core::rls_commit): an `apply_on_stream_done`
//! descriptor with a request id commits that request's reservation, once per id, through the same
//! store step as `POST /v1/commit` ([`crate::store::DecisionStore::commit`]) and its metrics.
//! Without a `sluice_reserved_at_ms` entry the reservation is taken to be as old as the commit's
//! arrival (docs/rls.md says what that gives back too much of, and when).

use sluice_core::commit::Commit;
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::Rule;

use super::request::Check;
use crate::app::App;
use crate::deadline::{call, Deadline, DecideError};

/// Commits every check that is a commit and has a rule, in order. A commit of an unknown action
/// changes nothing (as a check of one answers OK).
pub async fn commit_all(
    app: &App,
    checks: &[Check],
    rules: &[Option<&Rule>],
    deadline: Option<Deadline>,
) -> Result<(), DecideError> {
    for (check, rule) in checks.iter().zip(rules) {
        let (Some(mark), Some(rule)) = (&check.commit, rule) else {
            continue;
        };
        let reserved_at_ms = mark.reserved_at_ms.unwrap_or_else(crate::clock::now_ms);
        let settle = Commit {
            reserved: mark.reserved,
            actual: check.quantity,
            // The end of its millisecond, as `POST /v1/commit` (CommitRequest::commit).
            reserved_at: reserved_at_ms
                .saturating_mul(NANOS_PER_MILLI)
                .saturating_add(NANOS_PER_MILLI - 1),
        };
        let store = app.store.clone();
        let (step_rule, key, id) = ((*rule).clone(), check.key.clone(), mark.id.clone());
        let step = async move { store.commit(&step_rule, &key, &id, settle, None).await };
        let metrics = app.metrics.clone();
        let name = check.action.as_str().to_owned();
        let late = name.clone();
        let outcome = call::run(app, deadline, step, move |result| {
            if let Ok(o) = result {
                metrics.commit(
                    &late,
                    o.committed.refunded,
                    o.committed.overshoot,
                    o.duplicate,
                );
            }
        })
        .await?;
        app.metrics.commit(
            &name,
            outcome.committed.refunded,
            outcome.committed.overshoot,
            outcome.duplicate,
        );
    }
    Ok(())
}
