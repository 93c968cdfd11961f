//! The ratelimit-config mapping of the RLS front door: a `RateLimitRequest` for a domain of the
//! ratelimit configuration ([`crate::ratelimit`]), answered as envoyproxy/ratelimit answers it
//! (`src/service/ratelimit.go`), on sluice's store.
//!
//! - Each descriptor finds its limit by the peer's most-specific match
//!   ([`crate::ratelimit::matcher`]);
//!   a limit some matched limit `replaces` (by `name`) is dropped; `unlimited` is OK with
//!   `limit_remaining` 2^32-1; no limit is OK with an empty status.
//! - Hits: the descriptor's `hits_addend` when set (0 checks without debiting), else the
//!   request's, 0 meaning 1.
//! - `requests_per_unit: 0` is always over (a check without debit too, where the peer passes
//!   one that comes before any debit in the window). `shadow_mode` is never over (its status is
//!   OK). `quota_mode` descriptors are over one by one, but the request only when all of them are.
//! - A descriptor's own `limit` (a per-request override) is used as the peer uses it
//!   ([`super::peer_counting::override_limit`]), unless the domain's semantics refuse it.
//! - Whose arithmetic ([`crate::ratelimit::semantics`]): the peer's by default
//!   ([`super::peer_counting`]: every descriptor counted on its own, counters past the limit, a
//!   check over only when the counter is past it); under `strict_counting`, sluice's
//!   all-or-nothing step ([`crate::decide::decide_all`]): a request one descriptor refuses
//!   debits none, a check without debit is over when nothing is left, and a check-only
//!   descriptor or a `requests_per_unit: 0` that refuses is decided before any debit. One
//!   exception there keeps the token-quota pattern honest: a lone debit larger than what is left
//!   (a response's token count, debited when the stream is done) takes what is left, so the
//!   next check refuses. A reservation (a descriptor marked `sluice_reservation`) is no such
//!   debit in either: refused, it takes nothing.
//! - Reserve, then commit (sluice_core::rls_commit, docs/rls.md): sluice's budget entries are
//!   taken off before the match ([`super::budget_entries`]), so a descriptor with them matches
//!   the limit its other entries match. A commit is committed on that limit's counter by the sluice-rules
//!   path's own step ([`super::commit::commit_one`]) and answers OK with an empty
//!   status; a limit without a counter (`unlimited`, `requests_per_unit: 0`, no match) has
//!   nothing to commit. An allowed reservation with an id is held in flight as on that path.

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit as LimitProto,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf as pb;
use sluice_core::all::Part;
use sluice_core::rls_commit::BudgetEntries;
use sluice_core::wire::ThrottleResponse;
use sluice_core::{Algorithm, FieldError, Mode, Rule};

use super::budget_entries::strip;
use super::commit::{commit_one, commit_reservation};
use super::peer_counting::{override_limit, OwnLimit};
use super::peer_metadata;
use super::request::{check_shape, hits_as_sent, refuse_limit_override};
use super::response::{self, Answer};
use super::status::AnswerError;
use crate::clock::now_ms;
use crate::deadline::{Deadline, DecideError};
use crate::decide::{decide_checks, Check};
use crate::ratelimit::config::RlsUnit;
use crate::ratelimit::matcher::{lookup, Level, Matched};
use crate::ratelimit::semantics::{Point, Semantics};
use crate::state::App;

/// What one descriptor is, before the store is asked.
enum Kind {
    /// No limit (none matched, or replaced, or its rule is not in the cache yet).
    None,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`.
    Zero(Matched),
    /// A counted limit under a sluice rule.
    Counted(Matched, Arc<Rule>),
}

/// One descriptor's place in the request.
struct Slot {
    kind: Kind,
    quantity: u64,
    /// Sluice's budget entries, taken off before the match: a commit is committed, not decided.
    entries: BudgetEntries,
}

/// The hits of each descriptor as the peer counts them (a descriptor's `hits_addend` of 0 checks
/// without debiting), after the checks sluice's RLS makes on every request (and, under
/// `refuse_limit_overrides`, no descriptor's own `limit`).
pub fn hits(request: &RateLimitRequest, semantics: Semantics) -> Result<Vec<u64>, FieldError> {
    check_shape(request)?;
    request
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if semantics.has(Point::RefuseLimitOverrides) {
                refuse_limit_override(i, d)?;
            }
            hits_as_sent(i, d, request.hits_addend)
        })
        .collect()
}

/// The answer for a domain that is in no file, as the peer gives it: every descriptor OK with
/// no limit (the request's shape still checked).
pub fn unknown_domain(request: &RateLimitRequest) -> Result<RateLimitResponse, AnswerError> {
    check_shape(request).map_err(AnswerError::Invalid)?;
    let mut dynamic = response::metadata(&[]);
    peer_metadata::add_peer_fields(&mut dynamic, request, &[]);
    Ok(RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![
            DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            };
            request.descriptors.len()
        ],
        dynamic_metadata: Some(dynamic),
        ..RateLimitResponse::default()
    })
}

/// The limits of a request's descriptors under a domain's `level`, `replaces` applied.
pub fn matches(level: &Level, request: &RateLimitRequest) -> Vec<Option<Matched>> {
    let mut found: Vec<Option<Matched>> = request
        .descriptors
        .iter()
        .map(|d| {
            lookup(
                level,
                d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
            )
        })
        .collect();
    let replaced: Vec<String> = found
        .iter()
        .flatten()
        .flat_map(|m| m.limit.replaces.iter().cloned())
        .collect();
    for slot in &mut found {
        if slot
            .as_ref()
            .is_some_and(|m| !m.limit.name.is_empty() && replaced.contains(&m.limit.name))
        {
            *slot = None;
        }
    }
    found
}

/// Answers `request` under the domain's `level` (see the module docs).
pub async fn answer(
    app: &App,
    level: &Level,
    semantics: Semantics,
    request: &RateLimitRequest,
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<RateLimitResponse, AnswerError> {
    let hits = hits(request, semantics).map_err(AnswerError::Invalid)?;
    let (stripped, entries) = strip(request).map_err(AnswerError::Invalid)?;
    tracing::debug!(domain = %request.domain, ?hits, descriptors = ?request.descriptors, "ratelimit config request");
    let mut overrides = Vec::with_capacity(request.descriptors.len());
    for (i, d) in stripped.descriptors.iter().enumerate() {
        overrides.push(override_limit(&request.domain, i, d).map_err(AnswerError::Invalid)?);
    }
    let rules = app.rules.current();
    let slots: Vec<Slot> = matches(level, &stripped)
        .into_iter()
        .zip(overrides)
        .zip(hits)
        .zip(entries)
        .map(|(((m, own), quantity), entries)| {
            let kind = match (m, own) {
                (
                    _,
                    Some(OwnLimit {
                        matched,
                        rule: Some(rule),
                    }),
                ) => Kind::Counted(matched, rule),
                (
                    _,
                    Some(OwnLimit {
                        matched,
                        rule: None,
                    }),
                ) => Kind::Zero(matched),
                (None, None) => Kind::None,
                (Some(m), None) => match (m.limit.per_unit(), m.limit.action.as_deref()) {
                    (None, _) => Kind::Unlimited,
                    (Some((_, 0)), _) => Kind::Zero(m),
                    (Some(_), Some(action)) => match rules.rule_for(action, &m.key) {
                        Some(rule) => Kind::Counted(m, Arc::clone(rule)),
                        None => {
                            // Its rule is not in the store (yet): answered as no limit, and
                            // counted as a descriptor without a rule is.
                            app.metrics.unknown_action();
                            Kind::None
                        }
                    },
                    (Some(_), None) => Kind::None,
                },
            };
            Slot {
                kind,
                quantity,
                entries,
            }
        })
        .collect();
    // Commits first, as on the sluice-rules path: their hits are the actual cost.
    for slot in &slots {
        if let (Some(commit), Kind::Counted(m, rule)) = (&slot.entries.commit, &slot.kind) {
            commit_one(app, rule, &m.key, commit, slot.quantity, deadline)
                .await
                .map_err(AnswerError::Decide)?;
        }
    }
    let strict = semantics.has(Point::StrictCounting);
    let decided = if strict {
        decide_slots(app, &slots, deadline, started).await
    } else {
        count_as_peer(app, &slots, deadline, started).await
    }
    .map_err(AnswerError::Decide)?;
    let response = respond(request, &slots, &decided, now_ms(), semantics);
    if response.overall_code == Code::Ok as i32 {
        commit_reservations(app, &slots, &decided).await;
    }
    Ok(response)
}

/// Settles each reservation that carries an id, as the sluice-rules path does
/// ([`commit_reservation`]: held in flight until its commit, or voided when shadow or quota mode
/// would have refused it).
async fn commit_reservations(app: &App, slots: &[Slot], decided: &[Option<ThrottleResponse>]) {
    for (slot, answer) in slots.iter().zip(decided) {
        if let (Some(id), Kind::Counted(m, rule), Some(answer)) =
            (&slot.entries.reservation, &slot.kind, answer)
        {
            commit_reservation(app, rule, &m.key, id, slot.quantity, answer).await;
        }
    }
}

/// The store's answers under the peer's arithmetic ([`super::peer_counting`]), one per slot
/// (`None` where no rule is counted), in one store step.
async fn count_as_peer(
    app: &App,
    slots: &[Slot],
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<Vec<Option<ThrottleResponse>>, DecideError> {
    let mut at = Vec::new();
    let mut checks = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        if let (Kind::Counted(m, rule), None) = (&s.kind, &s.entries.commit) {
            at.push(i);
            checks.push(Check {
                rule,
                key: &m.key,
                quantity: s.quantity,
                // A reservation is sluice's, not the peer's: all or nothing under its own
                // capacity, so one that does not fit takes nothing.
                part: if s.entries.reservation.is_some() {
                    Part::AllOrNothing
                } else {
                    Part::PastTheLimit
                },
            });
        }
    }
    let mut out: Vec<Option<ThrottleResponse>> = vec![None; slots.len()];
    for (i, answer) in at
        .into_iter()
        .zip(decide_checks(app, &checks, deadline, started).await?)
    {
        out[i] = Some(answer);
    }
    Ok(out)
}

fn enforced(m: &Matched) -> bool {
    !m.limit.shadow_mode && !m.limit.quota_mode
}

/// The store's answers, one per slot (`None` where no rule is counted).
async fn decide_slots(
    app: &App,
    slots: &[Slot],
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<Vec<Option<ThrottleResponse>>, DecideError> {
    let counted: Vec<(usize, Check<'_>)> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match &s.kind {
            Kind::Counted(m, rule) if s.entries.commit.is_none() => Some((
                i,
                Check {
                    rule,
                    key: &m.key,
                    quantity: s.quantity,
                    part: Part::AllOrNothing,
                },
            )),
            _ => None,
        })
        .collect();
    let mut out: Vec<Option<ThrottleResponse>> = vec![None; slots.len()];
    if counted.is_empty() {
        return Ok(out);
    }
    let refused_before = slots
        .iter()
        .any(|s| s.entries.commit.is_none() && matches!(&s.kind, Kind::Zero(m) if enforced(m)));
    let checks_only = counted.iter().any(|(_, c)| c.quantity == 0);
    // Peeks first when something may refuse without a debit: a refused request debits nothing.
    if refused_before || checks_only {
        let peeks: Vec<Check<'_>> = counted
            .iter()
            .map(|(_, c)| Check { quantity: 0, ..*c })
            .collect();
        let answers = decide_checks(app, &peeks, deadline, started).await?;
        let check_refuses = counted.iter().zip(&answers).any(|((i, c), r)| {
            c.quantity == 0
                && r.remaining == 0
                && matches!(&slots[*i].kind, Kind::Counted(m, rule) if !m.limit.quota_mode && rule.mode() == Mode::Enforce)
        });
        for ((i, _), r) in counted.iter().zip(&answers) {
            out[*i] = Some(r.clone());
        }
        if refused_before || check_refuses {
            return Ok(out);
        }
    }
    let debits: Vec<(usize, Check<'_>)> = counted
        .into_iter()
        .filter(|(_, c)| c.quantity > 0)
        .collect();
    if debits.is_empty() {
        return Ok(out);
    }
    let mut requests: Vec<Check<'_>> = debits.iter().map(|(_, c)| *c).collect();
    if let ([(i, _)], [only]) = (debits.as_slice(), requests.as_mut_slice()) {
        // A lone debit that does not fit takes what is left, in the same step; a reservation
        // is asked before the work, not paid after it: refused, it takes nothing.
        let reservation = slots
            .get(*i)
            .is_some_and(|s| s.entries.reservation.is_some());
        if !reservation && only.rule.mode() == Mode::Enforce {
            only.part = Part::OnItsOwn;
        }
    }
    let mut answers = decide_checks(app, &requests, deadline, started).await?;
    for (c, answer) in requests.iter().zip(answers.iter_mut()) {
        if c.part == Part::OnItsOwn && !answer.allowed {
            // It took what was left.
            answer.remaining = 0;
        }
    }
    for ((i, _), r) in debits.iter().zip(answers) {
        out[*i] = Some(r);
    }
    Ok(out)
}

/// Whether a counted descriptor is over, before shadow mode: refused, would be refused, or (a
/// check) nothing left.
fn over(quantity: u64, r: &ThrottleResponse) -> bool {
    if quantity == 0 {
        r.remaining == 0
    } else {
        !r.allowed || r.would_deny
    }
}

fn reset(unit_ms: u64, now_ms: u64) -> pb::Duration {
    // As the peer: the rest of the unit's clock-aligned window, in whole seconds (rounded up).
    let left_ms = unit_ms - now_ms % unit_ms;
    pb::Duration {
        seconds: i64::try_from(left_ms.div_ceil(1_000)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

fn status(m: &Matched, code: Code, remaining: u64, reset_after: pb::Duration) -> DescriptorStatus {
    let (unit, rpu) = m.limit.per_unit().unwrap_or((RlsUnit(Unit::Second), 0));
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(LimitProto {
            name: m.limit.name.clone(),
            requests_per_unit: rpu,
            unit: unit.0 as i32,
        }),
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(reset_after),
        quota: None,
    }
}

/// The response: statuses, overall code, sluice's headers, and the metadata (sluice's list and
/// the peer's `domain`, `descriptors`, `hitsAddend` and the passed descriptors' `metadata`).
fn respond(
    request: &RateLimitRequest,
    slots: &[Slot],
    decided: &[Option<ThrottleResponse>],
    now_ms: u64,
    semantics: Semantics,
) -> RateLimitResponse {
    let strict = semantics.has(Point::StrictCounting);
    let mut statuses = Vec::with_capacity(slots.len());
    let (mut refused, mut quota_total, mut quota_over) = (false, 0usize, 0usize);
    let mut passed_metadata = Vec::new();
    for (slot, answer) in slots.iter().zip(decided) {
        if slot.entries.commit.is_some() {
            // A commit is committed, never decided: OK, as on the sluice-rules path.
            statuses.push(DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            });
            continue;
        }
        // Whether the descriptor never refuses: `shadow_mode`, or for a counted limit its rule in
        // force (an override may put one key in shadow mode, or enforce it).
        let (m, is_over, shadow, remaining, reset_after) = match (&slot.kind, answer) {
            (Kind::None, _) | (Kind::Counted(..), None) => {
                statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                });
                continue;
            }
            (Kind::Unlimited, _) => {
                statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..DescriptorStatus::default()
                });
                continue;
            }
            (Kind::Zero(m), _) => {
                let unit_ms = m.limit.per_unit().map_or(1_000, |(u, _)| u.millis());
                // The peer passes a check without debit on a limit of 0 (its counter is not
                // over 0); sluice, strict, calls it over.
                let is_over = strict || slot.quantity > 0;
                (m, is_over, m.limit.shadow_mode, 0, reset(unit_ms, now_ms))
            }
            (Kind::Counted(m, rule), Some(r)) => {
                // The step's answers are already the peer's ([`super::peer_counting`]).
                let is_over = if strict {
                    over(slot.quantity, r)
                } else {
                    !r.allowed || r.would_deny
                };
                let reset_after = match (rule.algorithm(), m.limit.per_unit()) {
                    (Algorithm::FixedWindow, Some((unit, _))) => reset(unit.millis(), now_ms),
                    _ => response::duration_of_ms(r.reset_after_ms),
                };
                let remaining = if is_over { 0 } else { r.remaining };
                let shadow = !m.limit.quota_mode && rule.mode() == Mode::Shadow;
                (m, is_over, shadow, remaining, reset_after)
            }
        };
        let code = if is_over && !shadow {
            Code::OverLimit
        } else {
            Code::Ok
        };
        if m.limit.quota_mode {
            quota_total += 1;
            quota_over += usize::from(code == Code::OverLimit);
        } else if code == Code::OverLimit {
            refused = true;
        }
        if code == Code::Ok {
            if let Some(md) = &m.limit.metadata {
                passed_metadata.push(md);
            }
        }
        statuses.push(status(m, code, remaining, reset_after));
    }
    let over_all = refused || (quota_total > 0 && quota_over == quota_total);
    let answers: Vec<Answer<'_>> = slots
        .iter()
        .zip(decided)
        .map(|(s, d)| match (&s.kind, d) {
            (Kind::Counted(m, rule), Some(r)) => {
                // A quota descriptor runs as a shadow rule, but its refusal is no shadow's
                // would-deny: its status says it is over.
                let mut r = r.clone();
                r.would_deny &= !m.limit.quota_mode;
                Some((rule.action(), r))
            }
            _ => None,
        })
        .collect();
    let mut dynamic = response::metadata(&answers);
    peer_metadata::add_peer_fields(&mut dynamic, request, &passed_metadata);
    RateLimitResponse {
        overall_code: if over_all { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: response::headers(&answers),
        dynamic_metadata: Some(dynamic),
        ..RateLimitResponse::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::rls::request::tests::{descriptor, request};
    use crate::ratelimit::load::{build, MergeDomains};
    use std::path::PathBuf;

    fn level(yaml: &str) -> Level {
        let files = [(PathBuf::from("c.yaml"), yaml.to_owned())];
        let loaded = build(&files, MergeDomains(false)).expect("loads");
        loaded.domains.into_values().next().expect("one domain")
    }

    /// Each descriptor's matched (path, key), or None.
    fn matched(level: &Level, descriptors: &[&[(&str, &str)]]) -> Vec<Option<(String, String)>> {
        let r = request(descriptors.iter().map(|e| descriptor(e, None)).collect(), 0);
        matches(level, &r)
            .into_iter()
            .map(|m| m.map(|m| (m.limit.path.clone(), m.key)))
            .collect()
    }

    fn some(path: &str, key: &str) -> Option<(String, String)> {
        Some((path.to_owned(), key.to_owned()))
    }

    #[test]
    fn the_readmes_matching_examples() {
        // Example 2: nested, a key without a value, several descriptors.
        let l = level("domain: d\ndescriptors:\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit: {unit: day, requests_per_unit: 5}\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n");
        assert_eq!(
            matched(
                &l,
                &[
                    &[("message_type", "marketing"), ("to_number", "206")],
                    &[("to_number", "206")]
                ]
            ),
            vec![
                some("d.message_type_marketing.to_number", "marketing|206"),
                some("d.to_number", "206")
            ]
        );
        assert_eq!(
            matched(&l, &[&[("message_type", "other"), ("to_number", "206")]]),
            vec![None]
        );
        // Example 3: key/value before key.
        let l = level("domain: d\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n");
        assert_eq!(
            matched(&l, &[&[("remote_address", "50.0.0.5")]]),
            vec![some("d.remote_address_50.0.0.5", "50.0.0.5")]
        );
        assert_eq!(
            matched(&l, &[&[("remote_address", "50.0.0.1")]]),
            vec![some("d.remote_address", "50.0.0.1")]
        );
        // Example 4: depth must match.
        let l = level("domain: d\ndescriptors:\n  - key: key\n    value: value\n    rate_limit: {unit: second, requests_per_unit: 300}\n");
        assert_eq!(
            matched(&l, &[&[("key", "value"), ("subkey", "subvalue")]]),
            vec![None]
        );
        assert_eq!(
            matched(&l, &[&[("key", "value")]]),
            vec![some("d.key_value", "value")]
        );
    }

    #[test]
    fn wildcards_exact_first_and_shared_thresholds() {
        let l = level("domain: d\ndescriptors:\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: own\n    value: own/*\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: own\n    value: own/exact\n    rate_limit: {unit: hour, requests_per_unit: 1}\n");
        assert_eq!(
            matched(
                &l,
                &[&[("files", "files/a.pdf")], &[("files", "files/b.csv")]]
            ),
            vec![
                some("d.files_files/*", "files/*"),
                some("d.files_files/*", "files/*")
            ]
        );
        assert_eq!(
            matched(
                &l,
                &[
                    &[("own", "own/a")],
                    &[("own", "own/exact")],
                    &[("own", "other")]
                ]
            ),
            vec![
                some("d.own_own/*", "own/a"),
                some("d.own_own/exact", "own/exact"),
                None
            ]
        );
    }

    #[test]
    fn replaces_drops_the_replaced_limit_example_7() {
        let l = level("domain: d\ndescriptors:\n  - key: key_1\n    value: value_1\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}\n  - key: key_2\n    value: value_2\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit: {replaces: [{name: specific_limit}], requests_per_unit: 10, unit: second}\n");
        let both = matched(
            &l,
            &[
                &[("key_1", "value_1"), ("user", "bkthomps")],
                &[("key_2", "value_2"), ("user", "bkthomps")],
            ],
        );
        assert_eq!(both[0], None);
        assert!(both[1].is_some());
        let alone = matched(&l, &[&[("key_1", "value_1"), ("user", "bkthomps")]]);
        assert!(alone[0].is_some());
    }

    #[test]
    fn hits_as_the_peer_counts_them() {
        let r = request(
            vec![
                descriptor(&[("a", "1")], None),
                descriptor(&[("a", "1")], Some(0)),
                descriptor(&[("a", "1")], Some(7)),
            ],
            0,
        );
        assert_eq!(hits(&r, Semantics::PEER).expect("valid"), vec![1, 0, 7]);
        let r = request(vec![descriptor(&[("a", "1")], None)], 3);
        assert_eq!(hits(&r, Semantics::PEER).expect("valid"), vec![3]);
        let mut r = request(vec![descriptor(&[("a", "1")], None)], 0);
        r.domain.clear();
        assert_eq!(
            hits(&r, Semantics::PEER).expect_err("empty").field,
            "domain"
        );
    }

    #[test]
    fn fixed_windows_reset_at_the_units_clock_edge() {
        assert_eq!(reset(60_000, 120_000).seconds, 60);
        assert_eq!(reset(60_000, 179_001).seconds, 1);
        assert_eq!(reset(1_000, 5_500).seconds, 1);
    }
}
