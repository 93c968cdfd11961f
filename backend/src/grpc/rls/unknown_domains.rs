//! RLS requests for a domain in no file of `--ratelimit-config`: answered OK with no limit, as
//! the peer answers them ([`super::config_path::unknown_domain`]). Why this file: that answer
//! used to be silent, so a config that dropped a domain (or a route that names the wrong one)
//! turned its limits off with nothing in the log or the metrics. Now each such domain is logged
//! once (WARN, with what sluice's own rules would have done) and counted in
//! `sluice_rls_unknown_domain_total{domain}`. The domain is the caller's string: at most
//! [`MAX_NAMED`] distinct ones are logged and labelled; the rest are counted under
//! [`OTHER_DOMAINS`] and said once.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex, PoisonError};

use sluice_core::wire::ratelimit::FILE_OWNED_ACTION_PREFIX;

use crate::metrics::Metrics;
use crate::rules::RuleSet;

/// Most distinct domains logged and given a label of their own.
pub const MAX_NAMED: usize = 100;

/// The label of the domains beyond [`MAX_NAMED`].
pub const OTHER_DOMAINS: &str = "(other)";

/// The process's book: one per process, as the log it keeps lines out of (the gRPC service and
/// the peer's `/json`, which makes a service per request, share it).
pub fn shared() -> &'static UnknownDomains {
    static BOOK: LazyLock<UnknownDomains> = LazyLock::new(UnknownDomains::default);
    &BOOK
}

/// The domains already seen, for one log line each.
#[derive(Debug, Default)]
pub struct UnknownDomains {
    seen: Mutex<HashSet<String>>,
}

/// How many rules `rules` holds of sluice's own (not written from the ratelimit config's files):
/// what `own_rules_for_unknown_domains` would decide such a domain's requests by.
pub fn own_rule_count(rules: &RuleSet) -> usize {
    rules
        .rules
        .keys()
        .filter(|a| !a.starts_with(FILE_OWNED_ACTION_PREFIX))
        .count()
}

impl UnknownDomains {
    /// Notes one request for `domain`, answered OK because no file has it: counted, and the
    /// first time logged at WARN.
    pub fn note(&self, domain: &str, metrics: &Metrics, rules: &RuleSet) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let named = seen.contains(domain) || seen.len() < MAX_NAMED;
        let label = if named { domain } else { OTHER_DOMAINS };
        metrics.rls_unknown_domain(label);
        if named {
            if seen.insert(domain.to_owned()) {
                tracing::warn!(
                    domain,
                    own_rules = own_rule_count(rules),
                    "RLS domain in no file of --ratelimit-config: answered OK with no limit (the peer's answer), logged once, counted in sluice_rls_unknown_domain_total; add it to a file, or set own_rules_for_unknown_domains to decide it by sluice's own rules"
                );
            }
        } else if seen.insert(OTHER_DOMAINS.to_owned()) {
            tracing::warn!(
                most = MAX_NAMED,
                "more RLS domains in no file of --ratelimit-config: each answered OK, no longer logged one by one, counted as domain=\"(other)\""
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_past_the_bound_share_one_label() {
        let metrics = Metrics::new();
        let book = UnknownDomains::default();
        let rules = RuleSet::default();
        for i in 0..MAX_NAMED + 5 {
            book.note(&format!("d{i}"), &metrics, &rules);
        }
        book.note("d0", &metrics, &rules);
        let text = metrics.encode();
        assert!(
            text.contains(r#"sluice_rls_unknown_domain_total{domain="d0"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"sluice_rls_unknown_domain_total{domain="(other)"} 5"#),
            "{text}"
        );
        let labels = text
            .lines()
            .filter(|l| l.starts_with("sluice_rls_unknown_domain_total{"))
            .count();
        assert_eq!(labels, MAX_NAMED + 1, "{text}");
    }
}
