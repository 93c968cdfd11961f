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
//!   ([`sluice_core::all::Part::PastTheLimit`], set by [`super::config_path`]: it never refuses
//!   the others, and a debit that does not fit takes
//!   what is left, filling the counter to limit + 1), all in one store step;
//! - its answer is the peer's ([`sluice_core::all::peer_view`]): over when the counter is past
//!   the limit, else OK with `limit_remaining` one less than the step's.
//!
//! A reservation (`sluice_reservation`, sluice's own entry) is not the peer's: it stays all or
//! nothing under its own capacity, so one that does not fit takes nothing.
//!
//! Here: the other thing the peer reads from a request that sluice's mapping does not, a
//! descriptor's own `limit` ([`override_limit`]).

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluice_core::duration::Span;
use sluice_core::rule::Limit as RuleLimit;
use sluice_core::{Algorithm, FieldError, Mode, Rule};

use crate::ratelimit::config::{Quota, RlsUnit};
use crate::ratelimit::matcher::{Limit, Matched};
use crate::ratelimit::translate::action_for;

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
