//! The admin listener's hardening (issue 40 item 10): failed sign-ins bounded per client address
//! (429 with `Retry-After`, the token not even checked past the bound, a session already held
//! still working) with their WARN lines rate-limited; the session cookie `Secure` when the admin
//! listener serves TLS; secret files readable by every user and a serving certificate that is
//! expired or about to expire warned about at start, naming the flag and the file.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sluice_backend::tls::{ListenerName, ListenersTls, TlsFiles};
use sluice_backend::StoreChoice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{eventually, Sluice, TOKEN};
use crate::support::{free_port, spawn_logged};
use crate::tls_rig::{client, connect, Ca, Dir, Leaf, Logs, TlsRig, Usage};

/// The default bound: failed sign-ins one address may make back to back.
const BURST: usize = 10;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn failed_logins_are_bounded_per_address_and_logged_at_most_once_per_period() {
    let (logs, _guard) = Logs::capture();
    let s = Sluice::start(StoreChoice::Memory).await;
    // A dashboard signed in before the guessing starts.
    let ok = s.post_session(json!({"token": TOKEN})).await;
    assert_eq!(ok.status().as_u16(), 204);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap();
    let pair = cookie.split(';').next().unwrap().to_owned();

    for i in 0..BURST {
        let wrong = s
            .post_session(json!({"token": format!("guess-{i:020}")}))
            .await;
        assert_eq!(wrong.status().as_u16(), 401, "failure {i}");
    }
    // Past the bound: 429 with Retry-After, even for the right token (a refusal that checked
    // it would tell a guesser when it hit).
    for token in ["one-more-guess-00000000".to_owned(), TOKEN.to_owned()] {
        let r = s.post_session(json!({ "token": token })).await;
        assert_eq!(r.status().as_u16(), 429, "{token}");
        let retry: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=6).contains(&retry), "Retry-After {retry}");
        assert!(r.headers().get("set-cookie").is_none());
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "too_many_sign_ins", "{body}");
    }
    // A Bearer token from that address is a sign-in too: refused unchecked.
    let (status, body) = s.admin_get("/v1/rules").await;
    assert_eq!(status, 429, "{body}");
    // The session held from before is not a sign-in: it still works.
    let r = s
        .http
        .get(format!("{}/v1/rules", s.admin))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // Ten failures and three refusals: one WARN line for the failures, one for the refusals.
    let failures = logs.lines_with(&["admin sign-in with a wrong token"]);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].contains("WARN") && failures[0].contains("127.0.0.1"),
        "{failures:?}"
    );
    let refusals = logs.lines_with(&["admin sign-in refused"]);
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
    s.stop().await;
}

#[tokio::test]
async fn wrong_bearer_tokens_are_bounded_on_every_admin_route() {
    let s = Sluice::start(StoreChoice::Memory).await;
    let wrong = |path: &str| {
        s.http
            .request(Method::GET, format!("{}{path}", s.admin))
            .bearer_auth("not-the-admin-token-0000")
            .send()
    };
    for i in 0..BURST {
        let path = if i % 2 == 0 {
            "/v1/rules"
        } else {
            "/v1/session"
        };
        assert_eq!(wrong(path).await.unwrap().status().as_u16(), 401, "{path}");
    }
    for path in ["/v1/rules", "/v1/session", "/v1/levels"] {
        let r = wrong(path).await.unwrap();
        assert_eq!(r.status().as_u16(), 429, "{path}");
        assert!(r.headers().contains_key("retry-after"), "{path}");
    }
    // No credential at all is not a sign-in: still the plain 401.
    let r = s
        .http
        .get(format!("{}/v1/rules", s.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    s.stop().await;
}

/// On several worker threads, so the guesses are checked in parallel: the bound is checked and
/// spent under one lock (`SignIns::attempt`), not read by each before any has counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guesses_sent_together_get_no_more_tries_than_guesses_in_a_row() {
    let s = Sluice::start(StoreChoice::Memory).await;
    let guesses = (0..3 * BURST).map(|i| {
        s.http
            .post(format!("{}/v1/session", s.admin))
            .json(&json!({"token": format!("parallel-guess-{i:012}")}))
            .send()
    });
    let answers = futures::future::join_all(guesses).await;
    let statuses: Vec<u16> = answers
        .iter()
        .map(|r| r.as_ref().unwrap().status().as_u16())
        .collect();
    let checked = statuses.iter().filter(|&&s| s == 401).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((checked, refused), (BURST, 2 * BURST), "{statuses:?}");
    s.stop().await;
}

/// `POST /v1/session` with the token over TLS: the answer's head.
async fn login_over_tls(rig: &TlsRig, ca: &Ca) -> String {
    let mut tls = eventually(
        Duration::from_secs(10),
        "the admin listener answers TLS",
        || {
            let config = client(&ca.pem(), None, &[b"http/1.1"]);
            let addr = rig.admin;
            async move { connect(addr, config).await.ok() }
        },
    )
    .await;
    let body = format!(r#"{{"token":"{TOKEN}"}}"#);
    let request = format!(
        "POST /v1/session HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

fn admin_tls(server: &Leaf) -> ListenersTls {
    ListenersTls {
        admin: Some(TlsFiles {
            listener: ListenerName::Admin,
            cert: server.cert.clone(),
            key: server.key.clone(),
            client_ca: None,
            client_san: None,
        }),
        ..ListenersTls::default()
    }
}

#[tokio::test]
async fn the_session_cookie_is_secure_over_tls_only() {
    let dir = Dir::new("cookie");
    let ca = Ca::new(&dir, "ca");
    let server = ca.leaf("server", Usage::Server, 30);
    chmod(&server.key, 0o600);
    let rig = TlsRig::start(admin_tls(&server)).await;
    let head = login_over_tls(&rig, &ca).await;
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    let cookie = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {head}"));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Secure"] {
        assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
    }
    rig.stop().await;

    // Over plaintext (loopback, the default) a Secure cookie would never be sent back.
    let s = Sluice::start(StoreChoice::Memory).await;
    let ok = s.post_session(json!({"token": TOKEN})).await;
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(!cookie.contains("Secure"), "{cookie}");
    s.stop().await;
}

#[tokio::test]
async fn a_key_readable_by_everyone_and_an_expired_certificate_are_warned_at_start() {
    let (logs, _guard) = Logs::capture();
    let dir = Dir::new("startwarn");
    let ca = Ca::new(&dir, "ca");
    // Expires within the second it is made.
    let expired = ca.leaf("expired", Usage::Server, 0);
    chmod(&expired.key, 0o644);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let rig = TlsRig::start(admin_tls(&expired)).await;
    let key = expired.key.display().to_string();
    let lines = eventually(
        Duration::from_secs(5),
        "the key's mode is warned about",
        || {
            let lines = logs.lines_with(&["--admin-tls-key", &key, "mode 0644"]);
            async move { (!lines.is_empty()).then_some(lines) }
        },
    )
    .await;
    assert!(
        lines[0].contains("WARN") && lines[0].contains("readable by every user"),
        "{lines:?}"
    );
    let cert = expired.cert.display().to_string();
    let lines = logs.lines_with(&["--admin-tls-cert", &cert, "expired at"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("WARN"), "{lines:?}");
    rig.stop().await;

    // A key only its owner reads and a certificate valid for a month: no word about either.
    let (quiet, _guard) = Logs::capture();
    let fine = ca.leaf("fine", Usage::Server, 30);
    chmod(&fine.key, 0o600);
    let rig = TlsRig::start(admin_tls(&fine)).await;
    let head = login_over_tls(&rig, &ca).await;
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    assert!(quiet.lines_with(&["readable by every user"]).is_empty());
    assert!(quiet.lines_with(&["listener's certificate"]).is_empty());
    rig.stop().await;
}

#[tokio::test]
async fn the_binary_warns_about_readable_token_files_and_a_certificate_about_to_expire() {
    let dir = Dir::new("filemodes");
    let ca = Ca::new(&dir, "ca");
    let server = ca.leaf("server", Usage::Server, 1);
    chmod(&server.key, 0o640);
    let token_file = dir.path("admin-token");
    std::fs::write(&token_file, "token-from-a-file-0123456789abcdef\n").unwrap();
    chmod(&token_file, 0o644);
    let tokens_file = dir.path("admin-tokens");
    std::fs::write(&tokens_file, "alice alice-token-0123456789abcdef\n").unwrap();
    chmod(&tokens_file, 0o600);
    let (grpc, decision, admin) = (free_port(), free_port(), free_port());
    let (mut child, stderr) = spawn_logged(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .env_remove("SLUICE_ADMIN_TOKEN")
            .env_remove("SLUICE_RLS_LISTEN")
            .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
            .args(["--decision-listen", &format!("127.0.0.1:{decision}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .arg("--admin-token-file")
            .arg(&token_file)
            .arg("--admin-tokens-file")
            .arg(&tokens_file)
            .arg("--admin-tls-cert")
            .arg(&server.cert)
            .arg("--admin-tls-key")
            .arg(&server.key),
    );
    let log = eventually(Duration::from_secs(10), "the admin listener starts", || {
        let log = stderr.lock().unwrap().clone();
        async move { log.contains("listener serves TLS").then_some(log) }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let token_path = token_file.display().to_string();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("--admin-token-file")
            && l.contains(&token_path)
            && l.contains("mode 0644")),
        "{log}"
    );
    // Owner-only (the tokens file) and group-readable (the key) are not warned about.
    assert!(
        !log.contains("--admin-tokens-file (SLUICE_ADMIN_TOKENS_FILE) "),
        "{log}"
    );
    assert!(!log.contains("--admin-tls-key"), "{log}");
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("--admin-tls-cert")
            && l.contains("expires at")
            && (l.contains("(in 1 day)") || l.contains("(within a day)"))),
        "{log}"
    );
    assert!(
        !log.contains("token-from-a-file"),
        "a token was logged:\n{log}"
    );
}
