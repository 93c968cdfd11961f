//! A parsed file as sluice sees it: the domain's descriptor tree ([`super::matcher`]) and one
//! sluice rule per counted limit, validated through core's [`Rule`] like any other rule.
//!
//! A limit's rule: the action `rl:<domain>.<descriptor path>` (sanitised to an action name; a
//! digest of the exact path is appended when sanitising changed it or it is too long), the
//! algorithm `fixed_window` (clock-aligned windows, as the peer's) unless the descriptor says
//! `algorithm`, capacity `requests_per_unit` (or `capacity`), window (or rate period) the unit,
//! mode `shadow` for `shadow_mode` and `quota_mode` descriptors (they never refuse on their own;
//! the service decides quota mode across descriptors), and the description naming the file.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use sluice_core::duration::Span;
use sluice_core::limits::MAX_ACTION_LEN;
use sluice_core::rule::{Limit as RuleLimit, Rate};
use sluice_core::wire::ratelimit::{owned_description, FILE_OWNED_ACTION_PREFIX};
use sluice_core::{Algorithm, FieldError, Mode, Rule};

use super::config::{ConfigError, Descriptor, DomainFile, Quota};
use super::matcher::{Level, Limit, Node};

/// A domain's tree and the rules its limits need.
#[derive(Debug, Clone, Default)]
pub struct Translated {
    /// The domain's top level.
    pub level: Level,
    /// One rule per counted limit.
    pub rules: Vec<Rule>,
    /// Every limit, in file order.
    pub limits: Vec<Arc<Limit>>,
}

/// Translates one file; every refusal is returned.
pub fn translate(file: &DomainFile) -> Result<Translated, Vec<ConfigError>> {
    let mut out = Translated::default();
    let mut errors = Vec::new();
    let path = file.domain.clone();
    out.level = level(file, &file.descriptors, &path, &mut out, &mut errors);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn level(
    file: &DomainFile,
    descriptors: &[Descriptor],
    parent: &str,
    found: &mut Translated,
    errors: &mut Vec<ConfigError>,
) -> Level {
    let mut out = Level::default();
    for d in descriptors {
        let key = d.composite();
        let path = format!("{parent}.{key}");
        let limit = d.rate_limit.as_ref().and_then(|rl| {
            let (action, algorithm) = match rule(file, d, &path) {
                Ok(Some(r)) => {
                    let pair = (Some(r.action().as_str().to_owned()), r.algorithm());
                    found.rules.push(r);
                    pair
                }
                Ok(None) => (None, Algorithm::FixedWindow),
                Err(e) => {
                    errors.push(e);
                    return None;
                }
            };
            let limit = Arc::new(Limit {
                action,
                quota: rl.quota.clone(),
                name: rl.name.clone(),
                replaces: rl.replaces.clone(),
                shadow_mode: d.shadow_mode,
                quota_mode: d.quota_mode,
                metadata: d.metadata.clone(),
                algorithm,
                path: path.clone(),
            });
            found.limits.push(limit.clone());
            Some(limit)
        });
        let node = Node {
            limit,
            share_threshold: d.share_threshold,
            level: level(file, &d.descriptors, &path, found, errors),
        };
        out.insert(key, node);
    }
    out
}

/// The action for a descriptor path: readable when the path is already a short action name,
/// else sanitised and tagged with a digest of the exact path, so two paths never share one.
pub fn action_for(path: &str) -> String {
    let plain = format!("{FILE_OWNED_ACTION_PREFIX}{path}");
    if sluice_core::Action::parse(&plain).is_ok() {
        return plain;
    }
    let digest = Sha256::digest(path.as_bytes());
    let tag: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let room = MAX_ACTION_LEN - FILE_OWNED_ACTION_PREFIX.len() - tag.len() - 1;
    let sanitised: String = path
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(room)
        .collect();
    format!("{FILE_OWNED_ACTION_PREFIX}{sanitised}-{tag}")
}

/// The rule a descriptor's limit runs, or `None` when it needs no state (`unlimited`,
/// `requests_per_unit: 0`).
fn rule(file: &DomainFile, d: &Descriptor, path: &str) -> Result<Option<Rule>, ConfigError> {
    let Some(rl) = &d.rate_limit else {
        return Ok(None);
    };
    let Quota::PerUnit {
        unit,
        requests_per_unit,
    } = rl.quota
    else {
        return Ok(None);
    };
    if requests_per_unit == 0 {
        return Ok(None);
    }
    let at = &d.field;
    let refuse = |field: String, reason: String| ConfigError {
        file: file.file.clone(),
        error: FieldError::new(field, reason),
    };
    let algorithm = d.extension.map_or(Algorithm::FixedWindow, |e| e.algorithm);
    let capacity = d
        .extension
        .and_then(|e| e.capacity)
        .unwrap_or(u64::from(requests_per_unit));
    // month (30 days) and year (365 days) as the peer counts them: fixed windows aligned to the
    // epoch (floor(now / W)), which sluice's fixed_window takes up to 365 days; another
    // algorithm's window or period is refused by Rule::new beyond 7 days, naming the unit.
    let span = Span::from_millis(unit.millis()).ok_or_else(|| {
        refuse(
            format!("{at}.rate_limit.unit"),
            format!("{unit} is longer than sluice's longest window (365d)"),
        )
    })?;
    let limit = if algorithm.uses_rate() {
        RuleLimit::Rate(Rate {
            count: u64::from(requests_per_unit),
            period: span,
        })
    } else {
        RuleLimit::Window(span)
    };
    let mode = if d.shadow_mode || d.quota_mode {
        Mode::Shadow
    } else {
        Mode::Enforce
    };
    let description = owned_description(&file.file.display().to_string(), path);
    Rule::new(
        &action_for(path),
        algorithm,
        capacity,
        limit,
        mode,
        &description,
    )
    .map_err(|e| {
        let capacity_set = d.extension.and_then(|x| x.capacity).is_some();
        let field = match e.field.as_str() {
            "capacity" if capacity_set => format!("{at}.capacity"),
            "capacity" | "rate.count" => format!("{at}.rate_limit.requests_per_unit"),
            "window" | "rate.period" | "rate" => format!("{at}.rate_limit.unit"),
            "algorithm" => format!("{at}.algorithm"),
            other => format!("{at}.{other}"),
        };
        refuse(field, e.reason)
    })
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn translated(text: &str) -> Result<Translated, Vec<String>> {
        let f = super::super::config::parse(Path::new("c.yaml"), text)
            .map_err(|e| e.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        translate(&f).map_err(|e| e.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn actions_are_readable_when_they_can_be_and_distinct_always() {
        assert_eq!(action_for("edge.remote_address"), "rl:edge.remote_address");
        let a = action_for("edge.path_/api/*/x");
        let b = action_for("edge.path_/api/?/x");
        assert!(a.starts_with("rl:edge.path__api___x-"), "{a}");
        assert_ne!(a, b);
        let long = action_for(&"x".repeat(200));
        assert!(sluice_core::Action::parse(&long).is_ok(), "{long}");
    }

    #[test]
    fn limits_become_fixed_windows_or_the_algorithm_asked_for() {
        let t = translated(
            "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: u\n    algorithm: gcra\n    capacity: 4\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: free\n    rate_limit: {unlimited: true}\n  - key: never\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        )
        .expect("translates");
        assert_eq!(t.rules.len(), 2);
        let ip = &t.rules[0];
        assert_eq!(ip.action().as_str(), "rl:d.ip");
        assert_eq!(ip.algorithm(), Algorithm::FixedWindow);
        assert_eq!(ip.capacity(), 10);
        assert_eq!(
            ip.limit(),
            RuleLimit::Window(Span::from_millis(60_000).expect("span"))
        );
        assert_eq!(
            sluice_core::wire::ratelimit::file_owner(ip.description()),
            Some("c.yaml")
        );
        let u = &t.rules[1];
        assert_eq!(
            (u.algorithm(), u.capacity(), u.mode()),
            (Algorithm::Gcra, 4, Mode::Shadow)
        );
        let never = t.level.children.get("never").and_then(|n| n.limit.clone());
        assert_eq!(never.and_then(|l| l.action.clone()), None);
    }

    #[test]
    fn month_and_year_are_epoch_aligned_fixed_windows_of_30_and_365_days() {
        let t = translated("domain: d\ndescriptors:\n  - key: m\n    rate_limit: {unit: month, requests_per_unit: 10}\n  - key: y\n    rate_limit: {unit: year, requests_per_unit: 20}\n")
            .expect("translates");
        let day = 86_400_000;
        let got: Vec<_> = t
            .rules
            .iter()
            .map(|r| (r.algorithm(), r.capacity(), r.limit()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    Algorithm::FixedWindow,
                    10,
                    RuleLimit::Window(Span::from_millis(30 * day).expect("span"))
                ),
                (
                    Algorithm::FixedWindow,
                    20,
                    RuleLimit::Window(Span::from_millis(365 * day).expect("span"))
                ),
            ]
        );
        // The peer's window: now - now % divider (epoch-aligned), so clock-aligned windows.
        let sluice_core::params::Params::FixedWindow(w) = t.rules[1].params() else {
            panic!("fixed_window");
        };
        let year_ns = 365 * 86_400 * 1_000_000_000u64;
        let now = 1_795_000_000 * 1_000_000_000u64;
        assert_eq!(
            w.bounds(now),
            (now - now % year_ns, now - now % year_ns + year_ns)
        );
    }

    #[test]
    fn what_sluice_cannot_run_names_the_field() {
        let e = translated("domain: d\ndescriptors:\n  - key: m\n    algorithm: sliding_window\n    rate_limit: {unit: month, requests_per_unit: 10}\n")
            .expect_err("month");
        assert!(
            e[0].starts_with(
                "c.yaml: descriptors[0].rate_limit.unit: must be at most 7d for sliding_window"
            ),
            "{e:?}"
        );
        let e = translated("domain: d\ndescriptors:\n  - key: y\n    algorithm: gcra\n    rate_limit: {unit: year, requests_per_unit: 10}\n")
            .expect_err("year");
        assert!(
            e[0].starts_with("c.yaml: descriptors[0].rate_limit.unit: must be at most 7d"),
            "{e:?}"
        );
        let e = translated("domain: d\ndescriptors:\n  - key: m\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n")
            .expect_err("too many");
        assert!(
            e[0].starts_with("c.yaml: descriptors[0].rate_limit.requests_per_unit: "),
            "{e:?}"
        );
    }
}
