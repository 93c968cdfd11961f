//! The dashboard's static files on the admin listener, and the security headers of every admin
//! response. Trunk writes one inline module script into index.html (the wasm loader); the page is
//! read on each request and the SHA-256 of its inline scripts goes into that response's
//! Content-Security-Policy, so no `'unsafe-inline'` script is ever allowed and a rebuilt dashboard
//! needs no restart.

use std::path::{Path, PathBuf};

use axum::handler::HandlerWithoutStateExt;
use axum::http::{header, HeaderValue};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use tower_http::services::ServeDir;

/// Where the dashboard comes from.
#[derive(Debug, Clone)]
pub struct Dashboard {
    dir: Option<PathBuf>,
}

const NOT_BUILT: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sluice: dashboard not built</title></head>
<body>
<h1>sluice</h1>
<p>The admin API is running, but the dashboard has not been built.</p>
<p>Build it with <code>scripts/install/40-dashboard.sh &amp;&amp; scripts/build-dashboard.sh</code>
from the repository root (this writes <code>dashboard/dist</code>), then restart <code>sluice</code> from the repository root, or point it at
the build with <code>--dashboard-dir DIR</code> (<code>SLUICE_DASHBOARD_DIR</code>).</p>
<p>The API is described at <a href="/v1/openapi.json">/v1/openapi.json</a>.</p>
</body></html>
"#;

/// Standard base64 with padding (RFC 4648, section 4): the CSP's script hashes here, and
/// protobuf `bytes` in the peer's JSON ([`super::peer::encode`]).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The contents of every inline `<script>` (one without `src`) in an HTML page.
pub fn inline_scripts(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<script") {
        let after = &rest[start..];
        let Some(tag_end) = after.find('>') else {
            break;
        };
        let tag = &after[..tag_end];
        let body_start = &after[tag_end + 1..];
        let Some(close) = body_start.find("</script>") else {
            break;
        };
        if !tag.contains("src=") && !body_start[..close].trim().is_empty() {
            out.push(&body_start[..close]);
        }
        rest = &body_start[close..];
    }
    out
}

/// The Content-Security-Policy for a page whose inline scripts are `scripts`.
pub fn content_security_policy(scripts: &[&str]) -> String {
    let hashes: String = scripts
        .iter()
        .map(|s| format!(" 'sha256-{}'", base64(&Sha256::digest(s.as_bytes()))))
        .collect();
    format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{hashes}; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

impl Dashboard {
    /// The dashboard in `dir` (which must hold index.html), or the "not built" page.
    pub fn new(dir: Option<&Path>) -> Dashboard {
        let dir = dir.and_then(|d| {
            let index = d.join("index.html");
            if index.is_file() {
                Some(d.to_owned())
            } else {
                tracing::warn!(index = %index.display(), "dashboard directory has no index.html; serving build instructions at /");
                None
            }
        });
        Dashboard { dir }
    }

    /// For the start-up log.
    pub fn describe(&self) -> String {
        match &self.dir {
            Some(d) => d.display().to_string(),
            None => "not built (/ explains how to build it)".into(),
        }
    }

    /// The Content-Security-Policy of every admin response that is not the dashboard's page.
    pub fn base_csp() -> HeaderValue {
        HeaderValue::from_str(&content_security_policy(&[]))
            .unwrap_or_else(|_| HeaderValue::from_static("default-src 'self'"))
    }

    /// The router serving the files (as the admin router's fallback). Paths that are not files
    /// get index.html (client-side routes).
    pub fn router(&self) -> Router {
        match &self.dir {
            Some(dir) => {
                let index_path = dir.join("index.html");
                let index = move || serve_index(index_path.clone());
                Router::new()
                    .route("/", get(index.clone()))
                    .route("/index.html", get(index.clone()))
                    .fallback_service(ServeDir::new(dir).fallback(index.into_service()))
            }
            None => Router::new()
                .route("/", get(not_built))
                .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, Html("not found\n")) }),
        }
    }
}

async fn serve_index(path: PathBuf) -> Response {
    match tokio::fs::read_to_string(&path).await {
        Ok(html) => {
            let csp = content_security_policy(&inline_scripts(&html));
            let mut response = ([(header::CACHE_CONTROL, "no-cache")], Html(html)).into_response();
            if let Ok(value) = HeaderValue::from_str(&csp) {
                response
                    .headers_mut()
                    .insert(header::CONTENT_SECURITY_POLICY, value);
            }
            response
        }
        Err(e) => {
            tracing::warn!(index = %path.display(), error = %e, "cannot read the dashboard's index.html");
            not_built().await.into_response()
        }
    }
}

async fn not_built() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(NOT_BUILT))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn only_inline_scripts_are_hashed() {
        let html = r#"<head><script src="/a.js"></script><script type="module">import init from '/x.js';</script></head>"#;
        assert_eq!(inline_scripts(html), vec!["import init from '/x.js';"]);
        let csp = content_security_policy(&inline_scripts(html));
        assert!(csp.contains("'wasm-unsafe-eval' 'sha256-"), "{csp}");
        assert!(csp.starts_with("default-src 'self'"));
    }
}
