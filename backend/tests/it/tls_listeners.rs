//! TLS on the listeners, against real TLS clients (tokio-rustls) and certificates made at test
//! time: every listener answers a TLS client; with a client CA, a client without a certificate,
//! with one from another CA or with an expired one is refused at the handshake, logged within
//! the second, counted, and nothing it sent is decided or debited; a plaintext client on a TLS
//! listener is refused the same way; a rotated certificate is served after the change, and a
//! bad rotated file keeps the old one, with an ERROR naming the file.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::Value;
use sluice_backend::tls::{ListenerName, ListenersTls, TlsFiles};

use crate::harness::eventually;
use crate::tls_rig::{
    client, connect, grpc_channel, https, plaintext, Ca, Dir, Logs, TlsRig, Usage,
};

fn files(
    listener: ListenerName,
    server: &crate::tls_rig::Leaf,
    client_ca: Option<&Ca>,
) -> TlsFiles {
    TlsFiles {
        listener,
        cert: server.cert.clone(),
        key: server.key.clone(),
        client_ca: client_ca.map(Ca::pem),
        client_san: None,
    }
}

/// The value of `sluice_tls_refused_total{listener, reason}` in `metrics`.
fn refused(metrics: &str, listener: &str, reason: &str) -> u64 {
    let series =
        format!("sluice_tls_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

#[tokio::test]
async fn each_listener_serves_tls_and_mutual_tls_refuses_the_others_before_the_store() {
    let (logs, _guard) = Logs::capture();
    let dir = Dir::new("mtls");
    let ca = Ca::new(&dir, "ca");
    let other = Ca::new(&dir, "other");
    // Expires within the second it is made: used last, after the rest of the set-up.
    let expired = ca.leaf("expired", Usage::Client("envoy.test"), 0);
    let made = Instant::now();
    let server = ca.leaf("server", Usage::Server, 1);
    let good = ca.leaf("good", Usage::Client("envoy.test"), 1);
    let stranger = other.leaf("stranger", Usage::Client("envoy.test"), 1);

    let rig = TlsRig::start(ListenersTls {
        grpc: Some(files(ListenerName::Grpc, &server, Some(&ca))),
        decision: Some(files(ListenerName::Decision, &server, Some(&ca))),
        admin: Some(files(ListenerName::Admin, &server, None)),
    })
    .await;
    let anonymous = client(&ca.pem(), None, &[b"http/1.1"]);
    let trusted = client(&ca.pem(), Some(&good), &[b"http/1.1"]);

    // The admin listener: TLS without client certificates; the token still applies.
    let admin = rig.admin;
    let healthy = eventually(
        Duration::from_secs(10),
        "the admin listener answers over TLS",
        || {
            let anonymous = anonymous.clone();
            async move { https(admin, anonymous, "GET", "/healthz", None).await.ok() }
        },
    )
    .await;
    assert_eq!(healthy.0, 200, "{healthy:?}");
    let rule = r#"{"action":"api","algorithm":"fixed_window","capacity":10,"window":"7d"}"#;
    let put = https(admin, anonymous.clone(), "PUT", "/v1/rules/api", Some(rule))
        .await
        .unwrap();
    assert_eq!(put.0, 200, "{put:?}");

    // The decision listener with mutual TLS: a client with an accepted certificate decides.
    let throttle = r#"{"action":"api","key":"k","quantity":1}"#;
    let decide = |config| https(rig.decision, config, "POST", "/v1/throttle", Some(throttle));
    let first = eventually(
        Duration::from_secs(5),
        "the rule reaches the decisions",
        || {
            let answer = decide(trusted.clone());
            async move {
                let (status, body) = answer.await.unwrap();
                let body: Value = serde_json::from_str(&body).unwrap();
                (status == 200 && body["allowed"] == true).then_some(body)
            }
        },
    )
    .await;
    assert_eq!(first["remaining"], 9, "{first}");

    // Refused at the handshake: no certificate, one from another CA, an expired one, and a
    // plaintext client. Each is logged at once (within the second) and counted.
    let strange = client(&ca.pem(), Some(&stranger), &[b"http/1.1"]);
    let no_cert = decide(anonymous.clone()).await;
    assert!(no_cert.is_err(), "no certificate: {no_cert:?}");
    let wrong_ca = decide(strange).await;
    assert!(wrong_ca.is_err(), "another CA: {wrong_ca:?}");
    if let Some(rest) = Duration::from_millis(2_100).checked_sub(made.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let stale = decide(client(&ca.pem(), Some(&expired), &[b"http/1.1"])).await;
    assert!(stale.is_err(), "expired: {stale:?}");
    let seen = Instant::now();
    let answer = plaintext(rig.decision).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "a plaintext client got an HTTP answer: {:?}",
        String::from_utf8_lossy(&answer)
    );
    for reason in ["no_client_certificate", "unknown_ca", "expired", "not_tls"] {
        let lines = eventually(Duration::from_secs(1), "the refusal is logged", || {
            let lines =
                logs.lines_with(&["TLS handshake refused", "listener=\"decision\"", reason]);
            async move { (!lines.is_empty()).then_some(lines) }
        })
        .await;
        assert!(lines[0].contains("WARN"), "{lines:?}");
    }
    assert!(seen.elapsed() < Duration::from_secs(1));

    // The gRPC listener: RLS over mutual TLS answers; without a certificate, refused.
    let h2 = |leaf| client(&ca.pem(), leaf, &[b"h2"]);
    let channel = grpc_channel(rig.grpc, h2(Some(&good))).await.unwrap();
    let answer = RateLimitServiceClient::new(channel)
        .should_rate_limit(RateLimitRequest {
            domain: "edge".into(),
            // An action without a rule: answered, nothing debited.
            descriptors: vec![crate::rls::descriptor(&[("unruled", "k")])],
            hits_addend: 0,
        })
        .await;
    assert!(answer.is_ok(), "{answer:?}");
    let refused_grpc = match grpc_channel(rig.grpc, h2(None)).await {
        Err(e) => Err(e.to_string()),
        Ok(channel) => RateLimitServiceClient::new(channel)
            .should_rate_limit(RateLimitRequest::default())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    assert!(
        refused_grpc.is_err(),
        "a gRPC client without a certificate was answered"
    );

    // Nothing of the refused clients reached the store: the good client's next decision sees
    // its own first debit and no other.
    let (status, body) = decide(trusted.clone()).await.unwrap();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, &body["remaining"]),
        (200, &Value::from(8)),
        "{body}"
    );

    let (_, metrics) = https(rig.decision, trusted, "GET", "/metrics", None)
        .await
        .unwrap();
    for reason in ["no_client_certificate", "unknown_ca", "expired"] {
        assert_eq!(refused(&metrics, "decision", reason), 1, "{reason}");
    }
    // At least: another test's plaintext client polling a port it was handed (free_port) may
    // land on this listener too.
    assert!(refused(&metrics, "decision", "not_tls") >= 1);
    assert!(refused(&metrics, "grpc", "no_client_certificate") >= 1);
    assert_eq!(refused(&metrics, "admin", "unknown_ca"), 0);
    rig.stop().await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_and_a_bad_new_file_keeps_the_old() {
    let (logs, _guard) = Logs::capture();
    let dir = Dir::new("rotate");
    let first_ca = Ca::new(&dir, "first");
    let next_ca = Ca::new(&dir, "next");
    let first = first_ca.leaf("first-server", Usage::Server, 1);
    let next = next_ca.leaf("next-server", Usage::Server, 1);
    let live = crate::tls_rig::Leaf {
        cert: dir.path("live.pem"),
        key: dir.path("live.key"),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let rig = TlsRig::start(ListenersTls {
        decision: Some(files(ListenerName::Decision, &live, None)),
        ..ListenersTls::default()
    })
    .await;
    let trusts_first = client(&first_ca.pem(), None, &[b"http/1.1"]);
    let trusts_next = client(&next_ca.pem(), None, &[b"http/1.1"]);
    let addr = rig.decision;
    eventually(
        Duration::from_secs(10),
        "the first certificate is served",
        || {
            let c = trusts_first.clone();
            async move { https(addr, c, "GET", "/metrics", None).await.ok() }
        },
    )
    .await;
    assert!(connect(addr, trusts_next.clone()).await.is_err());

    // Rotation: key first, then the certificate (a moment of mismatch is refused and logged,
    // the old pair served meanwhile).
    std::fs::copy(&next.key, &live.key).unwrap();
    std::fs::copy(&next.cert, &live.cert).unwrap();
    let rotated = Instant::now();
    eventually(
        Duration::from_secs(3),
        "the rotated certificate is served",
        || {
            let c = trusts_next.clone();
            async move { connect(addr, c).await.ok().map(|_| ()) }
        },
    )
    .await;
    assert!(rotated.elapsed() < Duration::from_secs(3));
    assert!(connect(addr, trusts_first).await.is_err());

    // A bad new file: the certificate in force stays, and an ERROR names the file and why.
    std::fs::write(&live.cert, b"not a certificate\n").unwrap();
    let line = eventually(Duration::from_secs(3), "the bad file is logged", || {
        let lines = logs.lines_with(&[
            "ERROR",
            "--decision-tls-cert",
            "live.pem",
            "still serving the previous certificate",
        ]);
        async move { lines.into_iter().next() }
    })
    .await;
    assert!(line.contains("no PEM certificate"), "{line}");
    let still = https(addr, trusts_next, "GET", "/metrics", None).await;
    assert_eq!(still.map(|(status, _)| status).ok(), Some(200));
    rig.stop().await;
}

#[tokio::test]
async fn bad_files_stop_the_start_naming_the_flag_and_file() {
    let dir = Dir::new("bad");
    let ca = Ca::new(&dir, "ca");
    let server = ca.leaf("server", Usage::Server, 1);
    let other = ca.leaf("other", Usage::Server, 1);
    let garbage = dir.path("garbage.pem");
    std::fs::write(&garbage, b"-----BEGIN NOTHING-----\n").unwrap();
    let cases = [
        (
            TlsFiles {
                cert: dir.path("missing.pem"),
                ..files(ListenerName::Decision, &server, None)
            },
            "--decision-tls-cert (SLUICE_DECISION_TLS_CERT) ",
            "missing.pem: cannot read it",
        ),
        (
            TlsFiles {
                cert: garbage.clone(),
                ..files(ListenerName::Admin, &server, None)
            },
            "--admin-tls-cert (SLUICE_ADMIN_TLS_CERT) ",
            "garbage.pem: not a PEM certificate file: a -----BEGIN NOTHING----- section has no -----END NOTHING----- line",
        ),
        (
            TlsFiles {
                key: other.key.clone(),
                ..files(ListenerName::Grpc, &server, None)
            },
            "--grpc-tls-key (SLUICE_GRPC_TLS_KEY, GRPC_SERVER_TLS_KEY) ",
            "does not match the certificate",
        ),
        (
            TlsFiles {
                client_ca: Some(garbage.clone()),
                ..files(ListenerName::Grpc, &server, None)
            },
            "--grpc-tls-client-ca (SLUICE_GRPC_TLS_CLIENT_CA, GRPC_CLIENT_TLS_CACERT) ",
            "garbage.pem: not a PEM certificate file",
        ),
    ];
    for (files, flag, why) in cases {
        let listener = files.listener;
        let mut tls = ListenersTls::default();
        match listener {
            ListenerName::Grpc => tls.grpc = Some(files),
            ListenerName::Decision => tls.decision = Some(files),
            ListenerName::Admin => tls.admin = Some(files),
        }
        let mut config =
            sluice_backend::Config::new(sluice_backend::StoreChoice::Memory, crate::harness::TOKEN);
        config.listener_tls = tls;
        let e = crate::harness::Sluice::start_err(config).await.to_string();
        assert!(e.contains(flag) && e.contains(why), "{e}");
    }
}

#[tokio::test]
async fn a_tls_client_on_a_plaintext_listener_is_refused_logged_and_counted() {
    let (logs, _guard) = Logs::capture();
    let dir = Dir::new("plain");
    let ca = Ca::new(&dir, "ca");
    let rig = TlsRig::start(ListenersTls::default()).await;
    let http = crate::harness::client();
    let metrics_url = format!("http://{}/metrics", rig.decision);
    eventually(
        Duration::from_secs(10),
        "the decision listener answers",
        || {
            let r = http.get(&metrics_url).send();
            async move { r.await.ok().filter(|r| r.status().is_success()) }
        },
    )
    .await;
    let tls = client(&ca.pem(), None, &[b"h2"]);
    for addr in [rig.decision, rig.grpc] {
        let refused = connect(addr, tls.clone()).await;
        assert!(
            refused.is_err(),
            "a TLS client on a plaintext listener: {addr}"
        );
    }
    for listener in ["decision", "grpc"] {
        eventually(Duration::from_secs(1), "the refusal is logged", || {
            let lines = logs.lines_with(&[
                "WARN",
                "a TLS client on a plaintext listener",
                &format!("listener=\"{listener}\""),
            ]);
            async move { (!lines.is_empty()).then_some(()) }
        })
        .await;
    }
    let metrics = http
        .get(&metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(refused(&metrics, "decision", "tls_client"), 1);
    assert_eq!(refused(&metrics, "grpc", "tls_client"), 1);
    assert_eq!(refused(&metrics, "admin", "tls_client"), 0);
    // Plaintext clients are served as before.
    crate::harness::get_with_status(&http, format!("http://{}/healthz", rig.admin), 200).await;
    rig.stop().await;
}
