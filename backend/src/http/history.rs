//! The operator's incident views on the admin listener: `GET /v1/history`, `GET /v1/keys` and
//! `GET /v1/top-denied`. All three read the store (so every replica answers the same) and change
//! nothing.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::Deserialize;
use sluice_core::wire::{
    ActionScope, ApiError, HistoryBody, HistoryRange, KeyView, TopDeniedBody, HISTORY_SPAN_MS,
    SCOPE_PARAM, TOP_DENIED_SPAN_MS,
};
use sluice_core::Rule;

use super::error::ApiFailure;
use crate::clock::now_ms;
use crate::history::{body, view, LAST_SEEN_SPAN_MS};
use crate::state::App;
use crate::touched_view::{self, TouchedSince};

/// Bound on one of these reads (one store call per rule, run concurrently).
const READ_DEADLINE: Duration = Duration::from_secs(5);

fn rules(app: &App) -> Vec<Rule> {
    app.rules
        .current()
        .rules
        .values()
        .map(|r| Rule::clone(r))
        .collect()
}

/// The value of the query parameter `name` (percent-decoded, `+` as a space), `None` when
/// absent. A value that is not UTF-8 once decoded, or a parameter given twice, is refused naming
/// it: a lossy decoding would look up another key than the one asked about.
pub fn query_param(query: Option<&str>, name: &str) -> Result<Option<String>, ApiFailure> {
    let mut found = None;
    for pair in query.unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(k).as_deref() != Some(name.as_bytes()) {
            continue;
        }
        if found.is_some() {
            return Err(ApiFailure::invalid(name, "given more than once"));
        }
        let bytes = decode(v)
            .ok_or_else(|| ApiFailure::invalid(name, "a `%` not followed by two hex digits"))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ApiFailure::invalid(
                name,
                "not UTF-8 once percent-decoded (keys are text: the filter sends a byte that is not UTF-8 as the three characters %XX, so look that text up, e.g. key=%25FF)",
            )
        })?;
        found = Some(text);
    }
    Ok(found)
}

/// Percent-decodes a query component (`+` is a space); `None` for a malformed escape.
fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                // Two hex digits exactly: `from_str_radix` alone also takes a sign (`%+1` is 1),
                // which would name another key than the one written.
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// `GET /v1/history` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct HistoryQuery {
    /// `5m` (30 steps) or `1h` (360 steps, the default).
    #[param(value_type = Option<HistoryRange>)]
    pub range: Option<String>,
    /// `all` (every action with a rule, the default) or `active` (actions seen within 24 h or
    /// with any count in the range).
    #[param(value_type = Option<ActionScope>)]
    pub scope: Option<String>,
}

/// The `scope` parameter of a per-action list, refused naming it when it is neither value.
pub fn scope_param(query: Option<&str>) -> Result<ActionScope, ApiFailure> {
    let value = query_param(query, SCOPE_PARAM)?;
    ActionScope::parse(value.as_deref()).map_err(|e| ApiFailure::invalid(SCOPE_PARAM, e))
}

/// Every action's counts over the last 5 minutes or hour, in 10 s steps.
#[utoipa::path(get, path = "/v1/history", tag = "admin",
    params(HistoryQuery),
    responses(
        (status = 200, description = "One entry per action with a rule (with scope=active: per action seen within 24 h or counted in the range), sorted; every step of the range present, oldest first, zeros included", body = HistoryBody),
        (status = 400, description = "`range` is not `5m` or `1h`, or `scope` not `all` or `active`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_history(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Json<HistoryBody>, ApiFailure> {
    let range = match query_param(query.as_deref(), "range")?.as_deref() {
        None => HistoryRange::OneHour,
        Some("5m") => HistoryRange::FiveMinutes,
        Some("1h") => HistoryRange::OneHour,
        Some(other) => {
            return Err(ApiFailure::invalid(
                "range",
                format!("must be 5m or 1h; got {other:?}"),
            ))
        }
    };
    let scope = scope_param(query.as_deref())?;
    let rules = rules(&app);
    let now = now_ms();
    let read = async {
        // Shown when seen within a day or counted in the range (an hour at most).
        let rules = match scope {
            ActionScope::All => rules,
            ActionScope::Active => {
                let span_ms = LAST_SEEN_SPAN_MS.max(HISTORY_SPAN_MS);
                let since = TouchedSince::Within {
                    span_ms,
                    now_ms: now,
                };
                touched_view::narrow(
                    app.store.as_ref(),
                    &app.activity,
                    rules,
                    since,
                    &BTreeSet::new(),
                )
                .await?
            }
        };
        body::history(app.store.as_ref(), &rules, range, scope, now).await
    };
    let body = app
        .store_call_within(READ_DEADLINE, read)
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    Ok(Json(body))
}

/// `GET /v1/keys` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct KeyQuery {
    /// The key, as the decision API receives it (any text, empty included; the URI is bounded at
    /// 64 KiB by the HTTP server).
    pub key: String,
    /// `all` (every action with a rule, the default) or `active` (actions under which the key
    /// has state; every other one reads as a key never seen there).
    #[param(value_type = Option<ActionScope>)]
    pub scope: Option<String>,
}

/// Where one key stands under every rule, without consuming anything.
#[utoipa::path(get, path = "/v1/keys", tag = "admin",
    params(KeyQuery),
    responses(
        (status = 200, description = "One entry per action with a rule (with scope=active: per action under which the key has state), sorted", body = KeyView),
        (status = 400, description = "`key` missing, given twice, or not UTF-8 once percent-decoded; `scope` not `all` or `active`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_key(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Json<KeyView>, ApiFailure> {
    let key = query_param(query.as_deref(), "key")?
        .ok_or_else(|| ApiFailure::invalid("key", "required: GET /v1/keys?key=<key>"))?;
    let scope = scope_param(query.as_deref())?;
    // The rule each action applies to this key: its override if it has one.
    let set = app.rules.current();
    let rules: Vec<Rule> = set
        .rules
        .keys()
        .filter_map(|action| set.rule_for(action, &key))
        .map(|r| Rule::clone(r))
        .collect();
    let read = async {
        // State under an action needs a touch of it (a decision, a report) at some time; an
        // override is listed whether or not the key was ever seen.
        let rules = match scope {
            ActionScope::All => rules,
            ActionScope::Active => {
                let overridden: BTreeSet<&str> = set
                    .overrides
                    .iter()
                    .filter(|(_, by_key)| by_key.contains_key(&key))
                    .map(|(action, _)| action.as_str())
                    .collect();
                let since = TouchedSince::Ever;
                touched_view::narrow(app.store.as_ref(), &app.activity, rules, since, &overridden)
                    .await?
            }
        };
        view::key_view(app.store.as_ref(), &rules, &key, now_ms()).await
    };
    let mut body = app
        .store_call_within(READ_DEADLINE, read)
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    for state in &mut body.actions {
        state.overridden = set
            .overrides
            .get(state.action.as_str())
            .is_some_and(|by_key| by_key.contains_key(&key));
    }
    if scope == ActionScope::Active {
        body.actions.retain(|a| a.is_active());
    }
    Ok(Json(body))
}

/// The keys the backend denied most per action over the last 5 minutes.
#[utoipa::path(get, path = "/v1/top-denied", tag = "admin",
    responses(
        (status = 200, description = "Actions with any denial in the span, sorted; at most 10 keys each, most denied first", body = TopDeniedBody),
        (status = 401, body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_top_denied(
    State(app): State<Arc<App>>,
) -> Result<Json<TopDeniedBody>, ApiFailure> {
    let rules = rules(&app);
    let now = now_ms();
    let read = async {
        // Denials recorded within the span touched their actions when they were written.
        let since = TouchedSince::Within {
            span_ms: TOP_DENIED_SPAN_MS,
            now_ms: now,
        };
        let rules = touched_view::narrow(
            app.store.as_ref(),
            &app.activity,
            rules,
            since,
            &BTreeSet::new(),
        )
        .await?;
        view::top_denied(app.store.as_ref(), &rules, now).await
    };
    let body = app
        .store_call_within(READ_DEADLINE, read)
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    Ok(Json(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(r: Result<Option<String>, ApiFailure>) -> String {
        r.err().and_then(|f| f.body.field).unwrap_or_default()
    }

    #[test]
    fn query_values_decode_exactly_or_are_refused_naming_the_parameter() {
        let q = |s: &str| query_param(Some(s), "key");
        assert_eq!(q("key=alice").ok().flatten().as_deref(), Some("alice"));
        assert_eq!(q("key=").ok().flatten().as_deref(), Some(""));
        assert_eq!(q("key").ok().flatten().as_deref(), Some(""));
        assert_eq!(q("other=1").ok().flatten(), None);
        assert_eq!(query_param(None, "key").ok().flatten(), None);
        assert_eq!(
            q("x=1&key=a%20b+c%2B%25FF%E2%9C%93")
                .ok()
                .flatten()
                .as_deref(),
            Some("a b c+%FF✓")
        );
        assert_eq!(q("k%65y=x").ok().flatten().as_deref(), Some("x"));
        assert_eq!(field(q("key=%FF")), "key");
        assert_eq!(field(q("key=%F")), "key");
        assert_eq!(field(q("key=%zz")), "key");
        assert_eq!(field(q("key=a&key=b")), "key");
        // A sign is no hex digit (`%+1` once decoded to 0x01: a reset of another key).
        assert_eq!(field(q("key=%+1")), "key");
        assert_eq!(field(q("k%+5y=x&key=a")), "");
        assert_eq!(q("k%+5y=x").ok().flatten(), None);
    }
}
