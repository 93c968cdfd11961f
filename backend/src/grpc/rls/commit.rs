//! The commits an RLS request carries (sluice_core::rls_commit): an `apply_on_stream_done`
//! descriptor with a request id commits that request's reservation, once per id, through the same
//! step as `POST /v1/commit` ([`crate::decide::reservation::commit`]) and its metrics.
//! Without a `sluice_reserved_at_ms` entry the reservation is taken to be as old as the commit's
//! arrival (docs/rls.md says what that gives back too much of, and when).

use std::sync::Arc;

use sluice_core::commit::Commit;
use sluice_core::rls_commit::CommitEntries;
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::ThrottleResponse;
use sluice_core::Rule;

use super::request::Check;
use crate::deadline::{Deadline, DecideError};
use crate::decide::reservation::{commit, record_reservation};
use crate::state::App;

/// Commits every check that is a commit and has a rule, in order. A commit of an unknown action
/// changes nothing (as a check of one answers OK).
pub async fn commit_all(
    app: &App,
    checks: &[Check],
    rules: &[Option<&Arc<Rule>>],
    deadline: Option<Deadline>,
) -> Result<(), DecideError> {
    for (check, rule) in checks.iter().zip(rules) {
        if let (Some(entries), Some(rule)) = (&check.commit, rule) {
            commit_one(app, rule, &check.key, entries, check.quantity, deadline).await?;
        }
    }
    Ok(())
}

/// Commits one reservation of `key` under `rule` at its `actual` cost. Shared by both RLS
/// configurations (sluice rules, and the envoyproxy/ratelimit-compatible path, whose limits are
/// rules too), so a commit means one thing whichever answered the reservation.
pub async fn commit_one(
    app: &App,
    rule: &Arc<Rule>,
    key: &str,
    entries: &CommitEntries,
    actual: u64,
    deadline: Option<Deadline>,
) -> Result<(), DecideError> {
    let reserved_at_ms = entries.reserved_at_ms.unwrap_or_else(crate::clock::now_ms);
    let commit_of = Commit {
        reserved: entries.reserved,
        actual,
        // The end of its millisecond, as `POST /v1/commit` (CommitRequest::commit).
        reserved_at: reserved_at_ms
            .saturating_mul(NANOS_PER_MILLI)
            .saturating_add(NANOS_PER_MILLI - 1),
    };
    commit(app, rule, key, &entries.id, commit_of, deadline).await?;
    Ok(())
}

/// After an allowed request, each of its reservations that carries an id (`sluice_reservation`):
/// one that debited is recorded in flight until its commit ([`record_reservation`]); one that a shadow
/// rule (or a quota-mode limit) would have refused debited nothing, so its commit must change
/// nothing either: its id is committed at once at 0 of 0, and the stream-done commit of that id
/// is then a duplicate. Without this, that commit would give back units other requests hold, or
/// debit a cost that enforcement would never have admitted. Both RLS configurations call this.
pub async fn commit_reservation(
    app: &App,
    rule: &Rule,
    key: &str,
    id: &str,
    quantity: u64,
    answer: &ThrottleResponse,
) {
    if !answer.would_deny || quantity == 0 {
        record_reservation(app, rule, key, id, quantity, answer).await;
        return;
    }
    let nothing = Commit {
        reserved: 0,
        actual: 0,
        reserved_at: crate::clock::now_ms().saturating_mul(NANOS_PER_MILLI),
    };
    if let Err(e) = app
        .store_call(app.store.commit(rule, key, id, nothing))
        .await
    {
        tracing::warn!(
            action = rule.action().as_str(),
            error = %e,
            "a would-deny reservation could not be voided: its commit will count as if it had debited"
        );
    }
}
