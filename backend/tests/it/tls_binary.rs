//! The `sluice` binary with envoyproxy/ratelimit's TLS settings under their own names
//! (`GRPC_SERVER_USE_TLS`, `GRPC_SERVER_TLS_CERT`, `GRPC_SERVER_TLS_KEY`,
//! `GRPC_CLIENT_TLS_CACERT`, `GRPC_CLIENT_TLS_SAN`), the admin token from a file (never logged),
//! and the warning for a listener beyond loopback without TLS.

use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use crate::harness::eventually;
use crate::support::{free_port, spawn_logged};
use crate::tls_rig::{client, grpc_channel, Ca, Dir, Usage};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

#[tokio::test]
async fn the_peer_tls_settings_token_file_and_plaintext_warning() {
    let dir = Dir::new("binary");
    let ca = Ca::new(&dir, "ca");
    let server = ca.leaf("server", Usage::Server, 1);
    let envoy = ca.leaf("envoy", Usage::Client("envoy.test"), 1);
    let someone = ca.leaf("someone", Usage::Client("someone.test"), 1);
    let token = "token-from-a-file-0123456789abcdef";
    let token_file = dir.path("admin-token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let (grpc, decision, admin) = (free_port(), free_port(), free_port());
    let (mut child, stderr) = spawn_logged(
        Command::new(BIN)
            .env_remove("SLUICE_ADMIN_TOKEN")
            .env_remove("SLUICE_RLS_LISTEN")
            .env("GRPC_SERVER_USE_TLS", "true")
            .env("GRPC_SERVER_TLS_CERT", &server.cert)
            .env("GRPC_SERVER_TLS_KEY", &server.key)
            .env("GRPC_CLIENT_TLS_CACERT", ca.pem())
            .env("GRPC_CLIENT_TLS_SAN", "envoy.test")
            .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
            .args(["--decision-listen", &format!("0.0.0.0:{decision}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .arg("--admin-token-file")
            .arg(&token_file),
    );
    let http = crate::harness::client();
    let rules = format!("http://127.0.0.1:{admin}/v1/rules");
    let status = eventually(
        Duration::from_secs(10),
        "the admin listener answers",
        || {
            let r = http.get(&rules).bearer_auth(token).send();
            async move { r.await.ok().map(|r| r.status().as_u16()) }
        },
    )
    .await;
    assert_eq!(status, 200, "the token from the file opens the admin API");
    let wrong = http
        .get(&rules)
        .bearer_auth("another-token-0123456789")
        .send();
    assert_eq!(wrong.await.unwrap().status().as_u16(), 401);

    let ca_pem = ca.pem();
    let ask = |leaf| {
        let ca_pem = ca_pem.clone();
        async move {
            let channel = grpc_channel(
                std::net::SocketAddr::from(([127, 0, 0, 1], grpc)),
                client(&ca_pem, Some(leaf), &[b"h2"]),
            )
            .await
            .map_err(|e| e.to_string())?;
            RateLimitServiceClient::new(channel)
                .should_rate_limit(RateLimitRequest {
                    domain: "edge".into(),
                    descriptors: vec![crate::rls::descriptor(&[("unruled", "k")])],
                    hits_addend: 0,
                })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    assert_eq!(
        ask(&envoy).await,
        Ok(()),
        "the client named by GRPC_CLIENT_TLS_SAN"
    );
    assert!(
        ask(&someone).await.is_err(),
        "a client of the CA with another name"
    );
    let log = eventually(Duration::from_secs(1), "the refusal is logged", || {
        let log = stderr.lock().unwrap().clone();
        async move { log.contains("reason=\"wrong_name\"").then_some(log) }
    })
    .await;
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("the decision listener is bound to 0.0.0.0")
            && l.contains("without TLS")),
        "{log}"
    );
    assert!(
        log.contains("listener=\"grpc\"") && log.contains("mutual=true"),
        "{log}"
    );
    assert!(!log.contains(token), "the token was logged:\n{log}");
    let _ = child.kill();
    let _ = child.wait();
}
