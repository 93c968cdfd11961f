//! The admin API's JSON bodies as the dashboard reads them, and how a failed call is described.
//!
//! Shapes follow the backend's contract (`GET /v1/rules`, `GET /v1/levels`, the SSE events that
//! carry the same bodies, and the `{"error", "field", "message"}` error body). Every field the
//! page does not strictly need has a default, so a newer backend adding fields does not break an
//! older page.

use serde::Deserialize;
use serde_json::Value;

/// `GET /v1/rules` and the SSE `rules` event.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RulesBody {
    /// Increases on every change; lets the page ignore a stale snapshot.
    #[serde(default)]
    pub version: u64,
    /// Rules in their JSON form (validated with sluice-core when turned into rows).
    #[serde(default)]
    pub rules: Vec<Value>,
}

/// `GET /v1/levels` and the SSE `levels` event.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LevelsBody {
    /// Server time of the snapshot, in Unix milliseconds.
    #[serde(default)]
    pub at_ms: u64,
    /// One entry per action with a rule.
    #[serde(default)]
    pub actions: Vec<ActionLevels>,
}

/// Live figures of one action.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ActionLevels {
    /// The action name.
    pub action: String,
    /// The rule's algorithm name.
    #[serde(default)]
    pub algorithm: String,
    /// The rule's capacity.
    #[serde(default)]
    pub capacity: u64,
    /// Requests allowed per second, recently.
    #[serde(default)]
    pub allowed_per_s: f64,
    /// Requests denied per second, recently.
    #[serde(default)]
    pub denied_per_s: f64,
    /// The most active keys.
    #[serde(default)]
    pub keys: Vec<KeyLevel>,
}

/// Where one key's funnel stands.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct KeyLevel {
    /// The key, exactly as clients sent it (untrusted text: shown as text only).
    pub key: String,
    /// How full the funnel is, in requests.
    #[serde(default)]
    pub level: f64,
    /// The funnel's size.
    #[serde(default)]
    pub capacity: u64,
    /// Requests of quantity 1 that could pass now.
    #[serde(default)]
    pub remaining: u64,
    /// When the key was last seen, in Unix milliseconds.
    #[serde(default)]
    pub last_seen_ms: u64,
}

/// The backend's error body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable code (`unauthorized`, `invalid_rule`, ...).
    #[serde(default)]
    pub error: String,
    /// The rule field at fault, for `invalid_rule`.
    #[serde(default)]
    pub field: Option<String>,
    /// What went wrong, for people.
    #[serde(default)]
    pub message: String,
}

/// A call that did not succeed, described so that nothing is swallowed: the HTTP status (0 when
/// the request never got an answer), the error code, the field if any, and a message to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// HTTP status, or 0 for a network failure.
    pub status: u16,
    /// The backend's error code, or a made-up one (`network`, `http_502`).
    pub code: String,
    /// The rule field the server named, if any.
    pub field: Option<String>,
    /// A message a person can act on.
    pub message: String,
}

impl ServerError {
    /// Describes a non-2xx answer from its status and body text. A body that is not the
    /// backend's error JSON (a proxy's HTML page, an empty body) is still shown, shortened.
    pub fn from_response(status: u16, body: &str) -> ServerError {
        if let Ok(parsed) = serde_json::from_str::<ErrorBody>(body) {
            if !parsed.message.is_empty() || !parsed.error.is_empty() {
                let code = if parsed.error.is_empty() {
                    format!("http_{status}")
                } else {
                    parsed.error
                };
                let message = if parsed.message.is_empty() {
                    format!("{code} (HTTP {status})")
                } else {
                    parsed.message
                };
                return ServerError {
                    status,
                    code,
                    field: parsed.field,
                    message,
                };
            }
        }
        let text = body.trim();
        let shown: String = text.chars().take(200).collect();
        let message = if shown.is_empty() {
            format!("the server answered HTTP {status} with no explanation")
        } else if shown.len() < text.len() {
            format!("the server answered HTTP {status}: {shown}…")
        } else {
            format!("the server answered HTTP {status}: {shown}")
        };
        ServerError {
            status,
            code: format!("http_{status}"),
            field: None,
            message,
        }
    }

    /// A request that got no answer at all (backend down, network gone).
    pub fn network(detail: &str) -> ServerError {
        ServerError {
            status: 0,
            code: "network".into(),
            field: None,
            message: format!("could not reach the sluice backend ({detail})"),
        }
    }

    /// Whether the session is missing or expired, so the page should ask for the token again.
    pub fn is_unauthorized(&self) -> bool {
        self.status == 401
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_levels_contract() {
        let body: LevelsBody = serde_json::from_str(
            r#"{"at_ms": 5, "actions": [{"action": "reply", "algorithm": "gcra", "capacity": 16,
               "allowed_per_s": 1.5, "denied_per_s": 0.0, "keys": [{"key": "k", "level": 3.5,
               "capacity": 16, "remaining": 12, "last_seen_ms": 4}], "future": true}]}"#,
        )
        .unwrap();
        assert_eq!(body.actions[0].keys[0].remaining, 12);
        assert_eq!(body.actions[0].allowed_per_s, 1.5);
    }

    #[test]
    fn invalid_rule_errors_keep_the_field() {
        let e = ServerError::from_response(
            400,
            r#"{"error":"invalid_rule","field":"capacity","message":"capacity: must be at least 1"}"#,
        );
        assert_eq!(e.field.as_deref(), Some("capacity"));
        assert_eq!(e.code, "invalid_rule");
        assert_eq!(e.message, "capacity: must be at least 1");
    }

    #[test]
    fn a_non_json_error_is_shown_not_swallowed() {
        let e = ServerError::from_response(502, "<html>Bad gateway</html>");
        assert_eq!(e.code, "http_502");
        assert!(
            e.message.contains("502") && e.message.contains("Bad gateway"),
            "{}",
            e.message
        );
        let empty = ServerError::from_response(500, "");
        assert!(empty.message.contains("500"));
        let long = ServerError::from_response(500, &"x".repeat(1000));
        assert!(long.message.len() < 300 && long.message.ends_with('…'));
    }
}
