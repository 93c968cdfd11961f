//! Calls to the admin API. Same origin, so the session cookie goes along by itself; bodies are
//! sluice-core's wire types, and every failure comes back as a [`ServerError`] the page shows.

use gloo_net::http::{Request, RequestBuilder, Response};
use serde::Serialize;
use sluice_core::wire::{
    AuditBody, HistoryBody, HistoryRange, KeyView, ResetAllBody, ResetBody, RlqsSharesBody,
    RulesBody, SessionBody, SessionRequest, TopDeniedBody,
};
use sluice_core::Rule;

use crate::api::ServerError;

async fn finish(sent: Result<Response, gloo_net::Error>) -> Result<Response, ServerError> {
    let response = sent.map_err(|e| ServerError::network(&e.to_string()))?;
    if response.ok() {
        Ok(response)
    } else {
        let body = response.text().await.unwrap_or_default();
        Err(ServerError::from_response(response.status(), &body))
    }
}

async fn send(builder: RequestBuilder) -> Result<Response, ServerError> {
    finish(builder.send().await).await
}

async fn send_json<T: Serialize>(
    builder: RequestBuilder,
    body: &T,
) -> Result<Response, ServerError> {
    let request = builder
        .json(body)
        .map_err(|e| ServerError::network(&format!("could not encode the request: {e}")))?;
    finish(request.send().await).await
}

async fn read<T: serde::de::DeserializeOwned>(response: Response) -> Result<T, ServerError> {
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| ServerError::network(&e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| ServerError::unreadable(status, &e.to_string()))
}

/// `POST /v1/session`: trades the admin token for the session cookie.
pub async fn sign_in(token: &str) -> Result<(), ServerError> {
    let body = SessionRequest {
        token: token.to_owned(),
    };
    send_json(Request::post("/v1/session"), &body).await?;
    Ok(())
}

/// `DELETE /v1/session`.
pub async fn sign_out() -> Result<(), ServerError> {
    send(Request::delete("/v1/session")).await?;
    Ok(())
}

/// `GET /v1/rules` (also how the page learns whether its session is still good).
pub async fn rules() -> Result<RulesBody, ServerError> {
    read(send(Request::get("/v1/rules")).await?).await
}

/// `GET /v1/history?range=5m|1h&scope=active`: the outcomes in 10-second steps of every action
/// seen within 24 h (the views fill in the quiet rules: [`crate::scope`]).
pub async fn history(range: HistoryRange) -> Result<HistoryBody, ServerError> {
    let range = match range {
        HistoryRange::FiveMinutes => "5m",
        HistoryRange::OneHour => "1h",
    };
    let scope = crate::scope::VIEW_SCOPE.query();
    read(send(Request::get(&format!("/v1/history?range={range}&{scope}"))).await?).await
}

/// `GET /v1/keys?key=K&scope=active`: where one key stands on the actions where it has state (a
/// peek: consumes nothing).
pub async fn key_view(key: &str) -> Result<KeyView, ServerError> {
    read(send(Request::get(&crate::keys::key_url(key))).await?).await
}

/// `GET /v1/rlqs/shares[?key=K]`: each Envoy's share of the keys held over RLQS.
pub async fn rlqs_shares(key: Option<&str>) -> Result<RlqsSharesBody, ServerError> {
    read(send(Request::get(&crate::rlqs::shares_url(key))).await?).await
}

/// `GET /v1/top-denied`: the keys each action denied most over the last 5 minutes.
pub async fn top_denied() -> Result<TopDeniedBody, ServerError> {
    read(send(Request::get("/v1/top-denied")).await?).await
}

/// `PUT /v1/rules/{action}`: creates or replaces; answers the stored rule.
pub async fn put_rule(rule: &Rule) -> Result<Rule, ServerError> {
    let url = format!("/v1/rules/{}", path_segment(rule.action().as_str()));
    read(send_json(Request::put(&url), rule).await?).await
}

/// `DELETE /v1/rules/{action}`.
pub async fn delete_rule(action: &str) -> Result<(), ServerError> {
    send(Request::delete(&format!(
        "/v1/rules/{}",
        path_segment(action)
    )))
    .await?;
    Ok(())
}

/// `PUT /v1/rules/{action}/overrides/{key}`: creates or replaces one key's override; answers the
/// stored rule.
pub async fn put_override(key: &str, rule: &Rule, fresh: bool) -> Result<Rule, ServerError> {
    let mut url = crate::overrides::override_url(rule.action().as_str(), key);
    if fresh {
        // The key starts fresh under the override (its state on the action is reset too).
        url += "?fresh=true";
    }
    read(send_json(Request::put(&url), rule).await?).await
}

/// `DELETE /v1/rules/{action}/overrides/{key}`: the key is under the rule again.
pub async fn delete_override(action: &str, key: &str) -> Result<(), ServerError> {
    send(Request::delete(&crate::overrides::override_url(
        action, key,
    )))
    .await?;
    Ok(())
}

/// `DELETE /v1/keys?action=A&key=K`: removes the key's state under the action.
pub async fn reset_key(action: &str, key: &str) -> Result<ResetBody, ServerError> {
    read(send(Request::delete(&crate::reset::reset_url(action, key))).await?).await
}

/// `DELETE /v1/keys?action=*&key=K`: removes the key's state on every action.
pub async fn reset_all(key: &str) -> Result<ResetAllBody, ServerError> {
    read(send(Request::delete(&crate::reset::reset_all_url(key))).await?).await
}

/// `GET /v1/audit?limit=N&…`: the newest recorded changes that match, newest first.
pub async fn audit(
    limit: usize,
    filter: &crate::audit::AuditFilter,
) -> Result<AuditBody, ServerError> {
    read(send(Request::get(&filter.url(limit))).await?).await
}

/// `GET /v1/session`: who this page is signed in as.
pub async fn whoami() -> Result<SessionBody, ServerError> {
    read(send(Request::get("/v1/session")).await?).await
}

/// Percent-encodes anything outside the action alphabet (valid actions pass unchanged).
fn path_segment(action: &str) -> String {
    action
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
