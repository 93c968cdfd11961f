//! envoyproxy/ratelimit's arithmetic on sluice's store, for a ratelimit-config domain under the
//! peer's semantics ([`crate::ratelimit::semantics`]; the default).
//!
//! The peer adds every descriptor's hits to its counter (`INCRBY`, whatever the other descriptors
//! answer) and calls a descriptor over when the counter after it is *strictly* over the limit
//! (`src/limiter/base_limiter.go`): a check without debit at exactly the limit passes, and a debit
//! larger than what is left takes the counter past the limit. Past the limit, only one thing
//! about the counter changes any later answer: that it is past. So sluice keeps the counter
//! saturated one unit past the limit, exactly:
//!
//! - each descriptor is decided under its rule with one more unit of capacity, counted on its own
//!   ([`Part::OnItsOwn`]: it never refuses the others, and a debit that does not fit takes what
//!   is left, filling the counter to limit + 1), all in one store step;
//! - the peer's answer is then: over when the step refused or left nothing (the counter is past
//!   the limit), else OK with `limit_remaining` one less than the step's.
//!
//! A reservation (`sluice_reservation`, sluice's own entry) is not the peer's: it stays all or
//! nothing under its own capacity, so one that does not fit takes nothing.

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluice_core::all::Part;
use sluice_core::duration::Span;
use sluice_core::rule::Limit as RuleLimit;
use sluice_core::wire::ThrottleResponse;
use sluice_core::{Algorithm, FieldError, Mode, Rule};

use crate::deadline::{Deadline, DecideError};
use crate::decide::{decide_checks, Check};
use crate::ratelimit::config::{Quota, RlsUnit};
use crate::ratelimit::matcher::{Limit, Matched};
use crate::ratelimit::translate::action_for;
use crate::state::App;

/// One descriptor to count: its rule, key and hits, and whether it is a reservation.
pub struct Counted<'a> {
    /// The rule in force for the key.
    pub rule: &'a Arc<Rule>,
    /// The key.
    pub key: &'a str,
    /// The hits (0 checks).
    pub quantity: u64,
    /// Carries `sluice_reservation`: all or nothing under its own capacity.
    pub reservation: bool,
}

/// `rule` with one more unit of capacity: room for the counter one past the limit. The rule
/// itself when it cannot grow (already at core's largest capacity).
fn one_past(rule: &Arc<Rule>) -> Arc<Rule> {
    Rule::new(
        rule.action().as_str(),
        rule.algorithm(),
        rule.capacity().saturating_add(1),
        rule.limit(),
        rule.mode(),
        rule.description(),
    )
    .map(Arc::new)
    .unwrap_or_else(|_| Arc::clone(rule))
}

/// Counts `items` as the peer does, in one store step; one answer per item, in the peer's terms
/// (see the module docs): `allowed` false (or `would_deny` for a rule that never refuses) when
/// over, `remaining` the peer's `limit_remaining`, `capacity` the limit.
pub async fn count(
    app: &App,
    items: &[Counted<'_>],
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<Vec<ThrottleResponse>, DecideError> {
    let grown: Vec<Arc<Rule>> = items
        .iter()
        .map(|c| {
            if c.reservation {
                Arc::clone(c.rule)
            } else {
                one_past(c.rule)
            }
        })
        .collect();
    let checks: Vec<Check<'_>> = items
        .iter()
        .zip(&grown)
        .map(|(c, rule)| Check {
            rule,
            key: c.key,
            quantity: c.quantity,
            part: if c.reservation {
                Part::AllOrNothing
            } else {
                Part::OnItsOwn
            },
        })
        .collect();
    let answers = decide_checks(app, &checks, deadline, started).await?;
    Ok(items
        .iter()
        .zip(answers)
        .map(|(c, r)| {
            if c.reservation {
                r
            } else {
                as_peer(r, c.rule.capacity())
            }
        })
        .collect())
}

/// A step's answer under one more unit of capacity, as the peer answers for a limit of
/// `capacity`.
fn as_peer(mut r: ThrottleResponse, capacity: u64) -> ThrottleResponse {
    let fitted = r.allowed && !r.would_deny;
    let over = !fitted || r.remaining == 0;
    r.capacity = capacity;
    if over {
        r.remaining = 0;
        if r.retry_after_ms.is_none() {
            r.retry_after_ms = Some(r.reset_after_ms);
        }
        if r.mode == Mode::Enforce {
            r.allowed = false;
        } else {
            r.would_deny = true;
        }
    } else {
        r.remaining -= 1;
    }
    r
}

/// A descriptor's own limit, as a matched limit and its rule (`None` for a limit of 0).
pub struct OwnLimit {
    /// The limit, keyed by the descriptor's entries.
    pub matched: Matched,
    /// Its rule; `None` for `requests_per_unit: 0` (always over, nothing counted).
    pub rule: Option<Arc<Rule>>,
}

/// The limit a descriptor's own `limit` sets (the peer's per-request override, used only under a
/// domain of the configuration): a fixed window of `requests_per_unit` per `unit`, counted per
/// domain, unit and entries (as the peer keys it: its `requests_per_unit` is not part of the
/// key), never shadowed and never replaced. Its rule is `None` for `requests_per_unit: 0`
/// (always over). Refuses a unit the peer cannot count, naming the field.
pub fn override_limit(
    domain: &str,
    index: usize,
    descriptor: &RateLimitDescriptor,
) -> Result<Option<OwnLimit>, FieldError> {
    let Some(o) = &descriptor.limit else {
        return Ok(None);
    };
    let field = || format!("descriptors[{index}].limit.unit");
    let unit = match Unit::try_from(o.unit) {
        Ok(Unit::Unknown) | Err(_) => {
            return Err(FieldError::new(
                field(),
                format!(
                    "{} is not a unit (second, minute, hour, day, week, month or year)",
                    o.unit
                ),
            ))
        }
        Ok(unit) => RlsUnit(unit),
    };
    let path = format!("{domain}.limit_override.{unit}");
    let action = action_for(&path);
    let span = Span::from_millis(unit.millis())
        .ok_or_else(|| FieldError::new(field(), format!("{unit} is longer than 365 days")))?;
    let rule = if o.requests_per_unit == 0 {
        None
    } else {
        let rule = Rule::new(
            &action,
            Algorithm::FixedWindow,
            u64::from(o.requests_per_unit),
            RuleLimit::Window(span),
            Mode::Enforce,
            "a descriptor's own limit (envoyproxy/ratelimit's per-request override)",
        )
        .map_err(|e| {
            FieldError::new(
                format!("descriptors[{index}].limit.requests_per_unit"),
                e.reason,
            )
        })?;
        Some(Arc::new(rule))
    };
    let entries: Vec<String> = descriptor
        .entries
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect();
    let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
    let limit = Arc::new(Limit {
        action: rule.as_ref().map(|r| r.action().as_str().to_owned()),
        quota: Quota::PerUnit {
            unit,
            requests_per_unit: o.requests_per_unit,
        },
        name: String::new(),
        replaces: Vec::new(),
        shadow_mode: false,
        quota_mode: false,
        metadata: None,
        algorithm: Algorithm::FixedWindow,
        path,
    });
    Ok(Some(OwnLimit {
        matched: Matched {
            limit,
            key: sluice_core::descriptor::join(&refs),
        },
        rule,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Decision;

    fn answer(allowed: bool, remaining: u64, mode: Mode) -> ThrottleResponse {
        let d = Decision {
            allowed,
            capacity: 3,
            remaining,
            retry_after: None,
            reset_after: 5_000_000_000,
            level: (3 - remaining) as f64,
        };
        ThrottleResponse::new(Algorithm::FixedWindow, mode, 60_000_000_000, &d)
    }

    #[test]
    fn one_unit_past_the_limit_is_over_and_a_fit_keeps_one_back() {
        // A limit of 2, counted with capacity 3.
        let ok = as_peer(answer(true, 2, Mode::Enforce), 2);
        assert!(ok.allowed && ok.remaining == 1 && ok.capacity == 2);
        // Exactly at the limit: OK, nothing left (the peer's counter is not over).
        let at = as_peer(answer(true, 1, Mode::Enforce), 2);
        assert!(at.allowed && at.remaining == 0);
        // One past: over.
        let past = as_peer(answer(true, 0, Mode::Enforce), 2);
        assert!(!past.allowed && past.remaining == 0 && past.retry_after_ms == Some(5_000));
        let refused = as_peer(answer(false, 0, Mode::Enforce), 2);
        assert!(!refused.allowed);
        // A rule that never refuses says it would have.
        let shadow = as_peer(answer(true, 0, Mode::Shadow), 2);
        assert!(shadow.allowed && shadow.would_deny);
    }
}
