//! The model of the per-key overrides listed under each rule (`app/rules_view.rs` draws them, the
//! editor edits them): one line per override, the admin API path of an override, and what the
//! page shows right after a save or a delete.
//!
//! An override is a whole rule in force for one key of an action (sluice-core's
//! [`KeyOverride`]); the key is untrusted text, kept as it is here and only ever put in text nodes
//! and attributes by the view.

use sluice_core::wire::{KeyOverride, RulesBody};
use sluice_core::Rule;

use crate::rules_view::limit_text;

/// One override as its line under the rule reads.
#[derive(Debug, Clone, PartialEq)]
pub struct OverrideRow {
    /// The key, exactly as stored.
    pub key: String,
    /// `"gcra · capacity 160 · 300 per 1m (5/s) · enforce"`.
    pub summary: String,
    /// The override's rule, for the editor.
    pub rule: Rule,
}

/// The overrides of `action`, sorted by key (whatever order the body came in).
pub fn overrides_of(body: &RulesBody, action: &str) -> Vec<OverrideRow> {
    let mut rows: Vec<OverrideRow> = body
        .overrides
        .iter()
        .filter(|o| o.rule.action().as_str() == action)
        .map(|o| OverrideRow {
            key: o.key.clone(),
            summary: summary(&o.rule),
            rule: o.rule.clone(),
        })
        .collect();
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    rows
}

/// How an override's rule reads on one line.
pub fn summary(rule: &Rule) -> String {
    format!(
        "{} · capacity {} · {} · {}",
        rule.algorithm(),
        rule.capacity(),
        limit_text(rule),
        rule.mode().name()
    )
}

/// The keys of `action` that already have an override: a new override may not take one of them.
pub fn keys_of(body: &RulesBody, action: &str) -> Vec<String> {
    body.overrides
        .iter()
        .filter(|o| o.rule.action().as_str() == action)
        .map(|o| o.key.clone())
        .collect()
}

/// `/v1/rules/{action}/overrides/{key}`, each segment percent-encoded whole (every byte outside
/// the unreserved set, as `encodeURIComponent` would), so `/`, `%`, `?`, `#`, spaces, quotes and
/// non-ASCII arrive as typed and a key never becomes another path.
pub fn override_url(action: &str, key: &str) -> String {
    format!(
        "/v1/rules/{}/overrides/{}",
        percent_encode(action),
        percent_encode(key)
    )
}

/// Whether a browser can name `key` as a path segment: not `.` or `..`, which the URL standard
/// resolves away (encoded as `%2E` too) before a request leaves the page, so the request would
/// reach another path. The editor refuses them, and an override with such a key made through the
/// API is listed but cannot be edited or deleted from the page.
pub fn nameable_in_path(key: &str) -> bool {
    !matches!(key, "." | "..")
}

/// Every byte outside `A-Z a-z 0-9 - _ . ~` as `%XX`.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// Puts the stored override of `key` in place, or adds it: what the page shows right after a
/// save, before the SSE `rules` event confirms it.
pub fn upsert(body: &mut RulesBody, key: &str, rule: Rule) {
    let action = rule.action().clone();
    match body
        .overrides
        .iter_mut()
        .find(|o| o.rule.action() == &action && o.key == key)
    {
        Some(slot) => slot.rule = rule,
        None => body.overrides.push(KeyOverride {
            key: key.to_owned(),
            rule,
        }),
    }
}

/// Drops the override of `key` under `action`: what the page shows right after a delete.
pub fn remove(body: &mut RulesBody, action: &str, key: &str) {
    body.overrides
        .retain(|o| !(o.rule.action().as_str() == action && o.key == key));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{body, rule};

    const BODY: &str = r#"{"version": 4, "rules": [
        {"action": "reply", "algorithm": "gcra", "capacity": 16, "rate": {"count": 30, "period": "60s"}},
        {"action": "login", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}],
      "overrides": [
        {"key": "vip", "rule": {"action": "reply", "algorithm": "gcra", "capacity": 160,
                                 "rate": {"count": 300, "period": "60s"}}},
        {"key": "a/b c", "rule": {"action": "reply", "algorithm": "fixed_window", "capacity": 1,
                                   "window": "60s", "mode": "shadow"}},
        {"key": "vip", "rule": {"action": "login", "algorithm": "sliding_log", "capacity": 50,
                                 "window": "60s"}}]}"#;

    #[test]
    fn an_actions_overrides_read_by_key() {
        let body = body(BODY);
        let rows = overrides_of(&body, "reply");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "a/b c");
        assert_eq!(
            rows[0].summary,
            "fixed_window · capacity 1 · 1m window · shadow"
        );
        assert_eq!(rows[1].key, "vip");
        assert_eq!(
            rows[1].summary,
            "gcra · capacity 160 · 300 per 1m (5/s) · enforce"
        );
        assert_eq!(overrides_of(&body, "login").len(), 1);
        assert!(overrides_of(&body, "nothing").is_empty());
        assert_eq!(keys_of(&body, "reply"), ["vip", "a/b c"]);
        // A body without the field (no overrides anywhere) reads as none.
        let plain = self::body(r#"{"version": 1, "rules": []}"#);
        assert!(overrides_of(&plain, "reply").is_empty());
    }

    #[test]
    fn any_key_is_one_path_segment() {
        assert_eq!(
            override_url("reply", "vip"),
            "/v1/rules/reply/overrides/vip"
        );
        assert_eq!(
            override_url("reply", "a/b %2F c?d#e\"'<é>"),
            "/v1/rules/reply/overrides/a%2Fb%20%252F%20c%3Fd%23e%22%27%3C%C3%A9%3E"
        );
        assert_eq!(
            override_url("reply", "..."),
            "/v1/rules/reply/overrides/..."
        );
        // `.` and `..` would be resolved away by the browser's URL parser, encoded or not.
        assert!(!nameable_in_path("..") && !nameable_in_path("."));
        assert!(nameable_in_path("...") && nameable_in_path("%2e%2e") && nameable_in_path("a/.."));
    }

    #[test]
    fn a_save_replaces_or_adds_and_a_delete_removes_only_that_key() {
        let mut body = body(BODY);
        upsert(
            &mut body,
            "vip",
            rule(
                r#"{"action": "reply", "algorithm": "gcra", "capacity": 999, "rate": {"count": 1, "period": "1s"}}"#,
            ),
        );
        upsert(
            &mut body,
            "new",
            rule(
                r#"{"action": "reply", "algorithm": "gcra", "capacity": 2, "rate": {"count": 1, "period": "1s"}}"#,
            ),
        );
        let rows = overrides_of(&body, "reply");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2].rule.capacity(), 999);
        // The other action's override of the same key is untouched.
        assert_eq!(overrides_of(&body, "login")[0].rule.capacity(), 50);
        remove(&mut body, "reply", "vip");
        assert_eq!(keys_of(&body, "reply"), ["a/b c", "new"]);
        assert_eq!(keys_of(&body, "login"), ["vip"]);
    }
}
