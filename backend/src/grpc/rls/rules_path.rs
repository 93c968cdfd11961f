//! The sluice-rules mapping of the RLS front door: each descriptor is a check of the sluice rule
//! its first entry names ([`super::request::checks`], core's one mapping), decided through the
//! same decision path as `POST /v1/throttle` ([`crate::decide`]). Commits (stream-done
//! descriptors with a request id) are committed first, not decided ([`super::commit`]).

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::wire::ThrottleResponse;
use sluice_core::Rule;

use super::commit::{commit_all, commit_reservation};
use super::request::{checks, Check};
use super::response::{self, Answer};
use super::status::AnswerError;
use crate::deadline::{Deadline, DecideError};
use crate::decide::{decide_checks, Check as DecideCheck};
use crate::state::App;

/// Each check's rule in force, if its action has one.
type Found<'r> = Option<&'r Arc<Rule>>;

/// Answers `request` under the rules in force.
pub async fn answer(
    app: &App,
    request: &RateLimitRequest,
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<RateLimitResponse, AnswerError> {
    let checks = checks(request).map_err(AnswerError::Invalid)?;
    let rules = app.rules.current();
    let found: Vec<Found<'_>> = checks
        .iter()
        .map(|c| {
            let rule = rules.rule_for(c.action.as_str(), &c.key);
            if rule.is_none() {
                app.metrics.unknown_action();
            }
            rule
        })
        .collect();
    // Commits (stream-done descriptors with a request id) are committed, not decided: they
    // answer OK, and the request's checks are decided as if they were not there.
    let (commits, found): (Vec<Found<'_>>, Vec<Found<'_>>) = checks
        .iter()
        .zip(found)
        .map(|(c, r)| {
            if c.commit.is_some() {
                (r, None)
            } else {
                (None, r)
            }
        })
        .unzip();
    commit_all(app, &checks, &commits, deadline)
        .await
        .map_err(AnswerError::Decide)?;
    let decided = decide_known(app, &checks, &found, deadline, started)
        .await
        .map_err(AnswerError::Decide)?;
    let answers: Vec<Answer<'_>> = checks
        .iter()
        .zip(decided)
        .map(|(c, d)| d.map(|r| (&c.action, r)))
        .collect();
    Ok(response::response(&answers))
}

/// Decides every check with a rule, together ([`decide_checks`]): one is one decision, exactly
/// as `POST /v1/throttle`; several are all or nothing, as `POST /v1/throttle/all` (the request
/// passes only if every enforced rule allows it, and a denied request consumes nothing from any
/// of its descriptors' limits; the denying check answers its denial, every other one a peek of
/// its unchanged state). Checks without a rule answer nothing (`None`).
async fn decide_known(
    app: &App,
    checks: &[Check],
    rules: &[Found<'_>],
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<Vec<Option<ThrottleResponse>>, DecideError> {
    let mut answers: Vec<Option<ThrottleResponse>> = vec![None; checks.len()];
    let known: Vec<(usize, DecideCheck<'_>)> = checks
        .iter()
        .zip(rules)
        .enumerate()
        .filter_map(|(i, (check, rule))| {
            rule.map(|rule| {
                (
                    i,
                    DecideCheck {
                        rule,
                        key: &check.key,
                        quantity: check.quantity,
                        part: sluice_core::all::Part::AllOrNothing,
                    },
                )
            })
        })
        .collect();
    let requests: Vec<DecideCheck<'_>> = known.iter().map(|(_, c)| *c).collect();
    let decided = decide_checks(app, &requests, deadline, started).await?;
    for ((i, _), result) in known.iter().zip(decided) {
        if let Some(answer) = answers.get_mut(*i) {
            *answer = Some(result);
        }
    }
    // Reservations with an id (`sluice_reservation`) are recorded as in flight, once allowed (a
    // denied all-or-nothing request allowed none of its checks: their answers are peeks).
    let all_allowed = answers.iter().flatten().all(|a| a.allowed);
    for (i, one) in &known {
        let id = checks.get(*i).and_then(|c| c.reservation.as_ref());
        let (Some(id), Some(Some(answer))) = (id, answers.get(*i)) else {
            continue;
        };
        if all_allowed {
            commit_reservation(app, one.rule, one.key, id, one.quantity, answer).await;
        }
    }
    Ok(answers)
}
