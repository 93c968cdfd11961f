//! The model of the audit page (`app/audit.rs`): every recorded change (`GET /v1/audit`) as one
//! entry reading when, who, what kind, which action and key, and what changed, field by field.
//!
//! Keys, actions and `who` are stored text (a key is untrusted): kept as they are here, and only
//! ever put in text nodes by the view.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_core::wire::{AuditBody, AuditEntry, AuditKind};

/// One field that differs between `before` and `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The dotted JSON path (`capacity`, `rate.period`, `lease.max`).
    pub field: String,
    /// Its value before, as text (`—` when absent).
    pub before: String,
    /// Its value after (`—` when absent).
    pub after: String,
}

/// One audit entry as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// When, in milliseconds since the epoch (kept for the row's identity and attributes).
    pub at_ms: u64,
    /// `"2026-01-01 00:00:00.123 UTC"`.
    pub when: String,
    /// Who: `token` or `session:<id>`, as recorded.
    pub who: String,
    /// The kind's wire name (`override_put`), for attributes and styles.
    pub kind: &'static str,
    /// The kind in words (`override created`, `rule changed`, `key reset`).
    pub what: String,
    /// The action.
    pub action: String,
    /// The key, for overrides and resets.
    pub key: Option<String>,
    /// `"v12"`, or empty for a reset (which makes no rules version).
    pub version: String,
    /// The fields that changed, by path (the action, which the entry names, left out).
    pub changes: Vec<Change>,
    /// Whether every change has one side only (a creation or a deletion): the view lists the
    /// fields on one line then, with no arrows.
    pub one_sided: bool,
    /// A line for what is not a field diff: a reset's removed state.
    pub note: String,
}

/// The entries, newest first (the body's order among entries of the same millisecond).
pub fn audit_rows(body: &AuditBody) -> Vec<AuditRow> {
    let mut rows: Vec<AuditRow> = body.entries.iter().map(row).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.at_ms));
    rows
}

fn row(entry: &AuditEntry) -> AuditRow {
    let created = entry.before.as_ref().is_none_or(Value::is_null);
    let (kind, what) = match entry.kind {
        AuditKind::RulePut if created => ("rule_put", "rule created"),
        AuditKind::RulePut => ("rule_put", "rule changed"),
        AuditKind::RuleDelete => ("rule_delete", "rule deleted"),
        AuditKind::OverridePut if created => ("override_put", "override created"),
        AuditKind::OverridePut => ("override_put", "override changed"),
        AuditKind::OverrideDelete => ("override_delete", "override deleted"),
        AuditKind::KeyReset => ("key_reset", "key reset"),
        AuditKind::Unrecognized => ("unrecognized", "a change this page does not know"),
    };
    let (mut changes, note) = if entry.kind == AuditKind::KeyReset {
        (Vec::new(), reset_note(entry.before.as_ref()))
    } else {
        (
            diff(entry.before.as_ref(), entry.after.as_ref()),
            String::new(),
        )
    };
    changes.retain(|c| c.field != "action");
    let one_sided = !changes.is_empty()
        && changes
            .iter()
            .all(|c| c.before == ABSENT || c.after == ABSENT);
    AuditRow {
        at_ms: entry.at_ms,
        when: utc_text(entry.at_ms),
        who: entry.who.clone(),
        kind,
        what: what.to_owned(),
        action: entry.action.clone(),
        key: entry.key.clone(),
        version: entry.version.map(|v| format!("v{v}")).unwrap_or_default(),
        changes,
        one_sided,
        note,
    }
}

/// A reset's `before` (`{"removed": [algorithms]}`) in words.
fn reset_note(before: Option<&Value>) -> String {
    let removed: Vec<String> = before
        .and_then(|b| b.get("removed"))
        .and_then(Value::as_array)
        .map(|a| a.iter().map(leaf_text).collect())
        .unwrap_or_default();
    if removed.is_empty() {
        "the key held no state".to_owned()
    } else {
        format!("removed {} state", removed.join(" and "))
    }
}

/// The fields whose values differ between `before` and `after` (null or absent on either side
/// reads as no value), nested objects by dotted path, in path order. A field added (a new rule)
/// or removed (a deletion) is listed with `—` on the side where it is missing.
pub fn diff(before: Option<&Value>, after: Option<&Value>) -> Vec<Change> {
    let mut old = BTreeMap::new();
    let mut new = BTreeMap::new();
    if let Some(v) = before {
        flatten("", v, &mut old);
    }
    if let Some(v) = after {
        flatten("", v, &mut new);
    }
    let mut fields: Vec<&String> = old.keys().chain(new.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|f| old.get(*f) != new.get(*f))
        .map(|f| Change {
            field: f.clone(),
            before: old.get(f).cloned().unwrap_or_else(|| ABSENT.to_owned()),
            after: new.get(f).cloned().unwrap_or_else(|| ABSENT.to_owned()),
        })
        .collect()
}

/// How a missing value reads in a change.
pub const ABSENT: &str = "—";

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Null => {}
        Value::Object(map) => {
            for (name, v) in map {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                flatten(&path, v, out);
            }
        }
        // A top-level value that is not an object (none is recorded today) still shows.
        leaf => {
            let name = if prefix.is_empty() { "value" } else { prefix };
            out.insert(name.to_owned(), leaf_text(leaf));
        }
    }
}

/// A value as text: a string as itself (`""` when empty, so it is seen), anything else as JSON.
fn leaf_text(value: &Value) -> String {
    match value {
        Value::String(s) if s.is_empty() => "\"\"".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `"2026-01-01 00:00:00.123 UTC"` for milliseconds since the epoch.
pub fn utc_text(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

/// Howard Hinnant's days-since-1970 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// What the audit page filters on (each empty: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// One action.
    pub action: String,
    /// One key (exact).
    pub key: String,
    /// One kind's wire name (`key_reset`).
    pub kind: String,
}

impl AuditFilter {
    /// `GET /v1/audit?limit=N&…` with the filters set, each value percent-encoded whole.
    pub fn url(&self, limit: usize) -> String {
        let mut url = format!("/v1/audit?limit={limit}");
        for (name, value) in [
            ("action", &self.action),
            ("key", &self.key),
            ("kind", &self.kind),
        ] {
            if !value.is_empty() {
                url += &format!("&{name}={}", crate::overrides::percent_encode(value));
            }
        }
        url
    }

    /// Whether any filter is set.
    pub fn is_set(&self) -> bool {
        *self != AuditFilter::default()
    }
}

/// The kinds a filter offers: (wire name, words).
pub fn kind_choices() -> Vec<(&'static str, &'static str)> {
    AuditKind::ALL
        .iter()
        .map(|k| {
            let words = match k {
                AuditKind::RulePut => "rule saved",
                AuditKind::RuleDelete => "rule deleted",
                AuditKind::OverridePut => "override saved",
                AuditKind::OverrideDelete => "override deleted",
                AuditKind::KeyReset => "key reset",
                AuditKind::Unrecognized => "other",
            };
            (k.name(), words)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_one_url() {
        assert_eq!(AuditFilter::default().url(100), "/v1/audit?limit=100");
        let f = AuditFilter {
            action: "reply".into(),
            key: "a&b c".into(),
            kind: "key_reset".into(),
        };
        assert!(f.is_set());
        assert_eq!(
            f.url(100),
            "/v1/audit?limit=100&action=reply&key=a%26b%20c&kind=key_reset"
        );
        assert_eq!(kind_choices().len(), 5);
        assert_eq!(kind_choices()[4], ("key_reset", "key reset"));
    }
    use serde_json::json;

    fn body(json: &str) -> AuditBody {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn times_read_in_utc() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc_text(1_767_225_600_123), "2026-01-01 00:00:00.123 UTC");
        assert_eq!(utc_text(951_868_799_999), "2000-02-29 23:59:59.999 UTC");
        assert_eq!(utc_text(1_795_396_464_000), "2026-11-23 01:14:24.000 UTC");
    }

    #[test]
    fn a_change_lists_only_the_fields_that_moved() {
        let before = json!({"action": "reply", "algorithm": "gcra", "capacity": 16,
            "rate": {"count": 30, "period": "1m"}, "mode": "enforce", "description": ""});
        let after = json!({"action": "reply", "algorithm": "gcra", "capacity": 160,
            "rate": {"count": 30, "period": "10s"}, "mode": "enforce", "description": "VIP",
            "lease": {"max": 64, "ttl": "1s"}});
        let changes = diff(Some(&before), Some(&after));
        let flat: Vec<(&str, &str, &str)> = changes
            .iter()
            .map(|c| (c.field.as_str(), c.before.as_str(), c.after.as_str()))
            .collect();
        assert_eq!(
            flat,
            [
                ("capacity", "16", "160"),
                ("description", "\"\"", "VIP"),
                ("lease.max", ABSENT, "64"),
                ("lease.ttl", ABSENT, "1s"),
                ("rate.period", "1m", "10s"),
            ]
        );
        // Nothing before: every field is new; nothing after: every field went.
        assert_eq!(diff(None, Some(&before)).len(), 7);
        assert!(diff(Some(&before), Some(&Value::Null))
            .iter()
            .all(|c| c.after == ABSENT));
        assert!(diff(Some(&before), Some(&before)).is_empty());
    }

    #[test]
    fn entries_read_newest_first_with_their_kind_in_words() {
        let rows = audit_rows(&body(
            r#"{"entries": [
            {"at_ms": 3000, "who": "session:0123456789ab", "kind": "key_reset", "action": "reply",
             "key": "a/b \"c\"", "version": null, "before": {"removed": ["gcra"]}, "after": null},
            {"at_ms": 5000, "who": "token", "kind": "override_put", "action": "reply", "key": "vip",
             "version": 7, "before": null, "after": {"capacity": 160}},
            {"at_ms": 2000, "who": "token", "kind": "rule_put", "action": "reply", "version": 6,
             "before": {"capacity": 1}, "after": {"capacity": 2}},
            {"at_ms": 1000, "who": "token", "kind": "rule_renamed", "action": "reply",
             "before": null, "after": null}]}"#,
        ));
        assert_eq!(
            rows.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
            [5000, 3000, 2000, 1000]
        );
        assert_eq!(rows[0].what, "override created");
        assert_eq!(rows[0].version, "v7");
        assert_eq!(rows[0].changes[0].after, "160");
        assert!(rows[0].one_sided);
        assert_eq!(rows[1].kind, "key_reset");
        assert_eq!(rows[1].key.as_deref(), Some("a/b \"c\""));
        assert_eq!(rows[1].note, "removed gcra state");
        assert!(rows[1].changes.is_empty() && rows[1].version.is_empty());
        assert_eq!(rows[1].who, "session:0123456789ab");
        assert_eq!(rows[2].what, "rule changed");
        assert_eq!(rows[2].key, None);
        assert!(!rows[2].one_sided);
        assert_eq!(rows[3].kind, "unrecognized");
        let none = audit_rows(&body(
            r#"{"entries": [{"at_ms": 1, "who": "token", "kind": "key_reset", "action": "a",
                "key": "", "before": {"removed": []}, "after": null}]}"#,
        ));
        assert_eq!(none[0].note, "the key held no state");
    }
}
