//! The audit trail (`GET /v1/audit`) and resetting a key (`DELETE /v1/keys?action=A&key=K`).
//!
//! Every change an admin makes to what limits whom (a rule or an override put or deleted, a key's
//! state reset) is recorded in the store with when, who and what it was before and after, and
//! the store keeps the newest [`crate::limits::AUDIT_KEEP`], so every replica shows the same
//! history.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rule::Algorithm;

/// What kind of change an audit entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// `PUT /v1/rules/{action}`: `before` the rule replaced (null if new), `after` the rule.
    RulePut,
    /// `DELETE /v1/rules/{action}`: `before` the rule, `after` null. Its overrides went with it.
    RuleDelete,
    /// `PUT /v1/rules/{action}/overrides/{key}`: `before` the override replaced (null if new).
    OverridePut,
    /// `DELETE /v1/rules/{action}/overrides/{key}`: `before` the override, `after` null.
    OverrideDelete,
    /// `DELETE /v1/keys?action=A&key=K`: `before` is `{"removed": [algorithms]}`, the state the
    /// key held (empty when it held none), `after` null.
    KeyReset,
    /// A kind this build does not know (recorded by a newer backend).
    #[serde(other)]
    Unrecognized,
}

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// When the replica that made the change received it, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Who made it: the admin identity's name (`"admin"` for `--admin-token`, or a name from
    /// `--admin-tokens-file`) for a Bearer token, `"<name> (session <id>)"` for a dashboard
    /// login (the id is the first 12 hex digits of the session's random nonce, the same for
    /// every request of that login and not usable as a credential). Older entries may say
    /// `"token"` or `"session:<id>"`.
    pub who: String,
    /// What kind of change.
    pub kind: AuditKind,
    /// The action changed.
    pub action: String,
    /// The key, for overrides and resets (untrusted text: render it as text only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The rules version the change produced; null for a reset (which changes no rule).
    #[serde(default)]
    pub version: Option<u64>,
    /// What was there before (a rule's JSON form; see [`AuditKind`]), null if nothing.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub before: Option<Value>,
    /// What is there after, null if nothing.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub after: Option<Value>,
}

/// `GET /v1/audit` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditBody {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
}

/// `DELETE /v1/keys?action=A&key=K` body: what the reset removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResetBody {
    /// The action.
    pub action: String,
    /// The key (untrusted text: render it as text only).
    pub key: String,
    /// The algorithms whose state the key held under this action and no longer does (a key
    /// holds one per algorithm its rule or override has used); empty when it held none.
    pub removed: Vec<Algorithm>,
}

impl AuditKind {
    /// The kind's name on the wire (`key_reset`), as `GET /v1/audit?kind=` takes it.
    pub fn name(self) -> &'static str {
        match self {
            AuditKind::RulePut => "rule_put",
            AuditKind::RuleDelete => "rule_delete",
            AuditKind::OverridePut => "override_put",
            AuditKind::OverrideDelete => "override_delete",
            AuditKind::KeyReset => "key_reset",
            AuditKind::Unrecognized => "unrecognized",
        }
    }

    /// Every kind a filter may name.
    pub const ALL: [AuditKind; 5] = [
        AuditKind::RulePut,
        AuditKind::RuleDelete,
        AuditKind::OverridePut,
        AuditKind::OverrideDelete,
        AuditKind::KeyReset,
    ];

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<AuditKind> {
        AuditKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// `DELETE /v1/keys?action=*&key=K` body: one key reset on every action with a rule, each
/// recorded in the audit trail as its own `key_reset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResetAllBody {
    /// The key (untrusted text: render it as text only).
    pub key: String,
    /// Per action, what the reset removed, sorted by action.
    pub actions: Vec<ResetBody>,
}

/// The `action` value of `DELETE /v1/keys` that resets the key on every action (no action can
/// be named so).
pub const EVERY_ACTION: &str = "*";

/// `GET /v1/session` body: who the caller is signed in as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionBody {
    /// The admin identity's name (`admin` for `--admin-token`).
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_unknown_kinds_and_missing_optionals() {
        let e: AuditEntry = serde_json::from_str(
            r#"{"at_ms":5,"who":"token","kind":"rule_renamed","action":"a","before":null}"#,
        )
        .expect("parses");
        assert_eq!(e.kind, AuditKind::Unrecognized);
        assert_eq!((e.key, e.version, e.after), (None, None, None));
        let reset = AuditEntry {
            at_ms: 1,
            who: "session:0123456789ab".into(),
            kind: AuditKind::KeyReset,
            action: "reply".into(),
            key: Some("alice".into()),
            version: None,
            before: Some(serde_json::json!({"removed": ["gcra"]})),
            after: None,
        };
        let json = serde_json::to_value(&reset).expect("serializes");
        assert_eq!(json["kind"], "key_reset");
        for kind in AuditKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.name());
            assert_eq!(AuditKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(
            serde_json::from_value::<AuditEntry>(json).expect("back"),
            reset
        );
    }
}
