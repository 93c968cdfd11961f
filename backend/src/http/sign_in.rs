//! Sign-ins on the admin listener: a Bearer token (on any admin route) or a token posted to
//! `POST /v1/session`, each checked as one attempt of the client's address
//! ([`crate::sign_ins`]): past its bound on failed sign-ins the address gets 429
//! `too_many_sign_ins` with `Retry-After` before its token is even checked, and every wrong
//! token counts. The WARN lines are rate-limited ([`crate::log_limit`]): a guesser must not be
//! able to flood the log, and each line still says how many failures it stands for and where
//! the latest came from.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::{header, Extensions, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_core::wire::ErrorCode;

use super::error::ApiFailure;
use crate::log_limit::LOG_EVERY;
use crate::state::App;

/// The client's address, as the listener accepted it (`serve.rs` puts it on every request).
pub fn peer(extensions: &Extensions) -> Option<IpAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

/// The identity an `Authorization` value's Bearer token names, if any (the check a Bearer
/// sign-in runs).
pub fn bearer_name(app: &App, value: &HeaderValue) -> Option<String> {
    value
        .to_str()
        .ok()
        .and_then(|v| app.auth.bearer_name(v))
        .map(str::to_owned)
}

/// A sign-in refused unchecked: its address spent its failed sign-ins. Answered as 429.
#[derive(Debug, Clone, Copy)]
pub struct Refused {
    /// Whole seconds until the address may try again (at least 1).
    pub retry_after_secs: u64,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let secs = self.retry_after_secs;
        let mut response = ApiFailure::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManySignIns,
            format!("too many failed sign-ins from this address; try again in {secs} s"),
        )
        .into_response();
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// Checks a presented credential (`check`: what it names, `None` when wrong) as one sign-in
/// of `peer` (`how`: "Bearer token", "dashboard login", for the log). `Err`: refused unchecked;
/// `Ok(None)`: wrong, counted and logged (at most one line per [`LOG_EVERY`]).
pub fn attempt<T>(
    app: &App,
    peer: Option<IpAddr>,
    how: &'static str,
    check: impl FnOnce() -> Option<T>,
) -> Result<Option<T>, Refused> {
    let outcome = match peer {
        Some(peer) => app.sign_ins.attempt(peer, Instant::now(), check),
        // No address (never on a listener's connection): nothing to count it under.
        None => Ok(check()),
    };
    match outcome {
        Ok(Some(accepted)) => Ok(Some(accepted)),
        Ok(None) => {
            wrong_token(app, peer, how);
            Ok(None)
        }
        Err(wait) => Err(refused(app, peer, wait)),
    }
}

fn wrong_token(app: &App, peer: Option<IpAddr>, how: &'static str) {
    if let Some(count) = app.sign_ins.lines().admit("wrong token") {
        let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
        tracing::warn!(
            %peer,
            how,
            count,
            "admin sign-in with a wrong token ({count} failed sign-ins since the last line, the latest from {peer}; at most one line per {} s)",
            LOG_EVERY.as_secs()
        );
    }
}

fn refused(app: &App, peer: Option<IpAddr>, wait: Duration) -> Refused {
    if let Some(count) = app.sign_ins.lines().admit("sign-ins refused") {
        let peer = peer.map_or_else(|| "unknown".to_owned(), |p| p.to_string());
        tracing::warn!(
            %peer,
            count,
            "admin sign-in refused: too many failed sign-ins from this address (429; {count} such refusals since the last line, the latest from {peer}; at most one line per {} s)",
            LOG_EVERY.as_secs()
        );
    }
    Refused {
        retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
    }
}
