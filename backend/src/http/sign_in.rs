//! Failed admin sign-ins on the admin listener: a wrong Bearer token or a wrong token posted to
//! `POST /v1/session`. Each is counted against the client's address ([`crate::sign_ins`]); past
//! its bound the address gets 429 `too_many_sign_ins` with `Retry-After` before any token of it
//! is checked. The WARN lines are rate-limited ([`crate::log_limit`]): a guesser must not be
//! able to flood the log, and the line still says how many failures it stands for and from where
//! the latest came.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

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

/// Before a token of `peer` is checked: the 429 to answer when its failed sign-ins are spent
/// (`None`: go on and check it).
pub fn refusal(app: &App, peer: Option<IpAddr>) -> Option<Response> {
    let peer = peer?;
    let Err(wait) = app.sign_ins.check(peer, Instant::now()) else {
        return None;
    };
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    if let Some(count) = app.sign_ins.lines().admit("sign-ins refused") {
        tracing::warn!(
            %peer,
            count,
            "admin sign-in refused: too many failed sign-ins from this address (429; {count} such refusals since the last line; at most one line per {} s)",
            LOG_EVERY.as_secs()
        );
    }
    let mut response = ApiFailure::new(
        StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::TooManySignIns,
        format!("too many failed sign-ins from this address; try again in {secs} s"),
    )
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    Some(response)
}

/// Counts a failed sign-in of `peer` (`how`: "Bearer token", "dashboard login") and logs it,
/// at most one line per [`LOG_EVERY`].
pub fn failed(app: &App, peer: Option<IpAddr>, how: &'static str) {
    if let Some(peer) = peer {
        app.sign_ins.failed(peer, Instant::now());
    }
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
