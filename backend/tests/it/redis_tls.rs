//! The Redis store over TLS, on real TLS-only redis-servers requiring a client certificate
//! (`--port 0 --tls-port P --tls-auth-clients yes`, certificates made at test time by
//! `tls_support`): the whole conformance suite on a single node (with an ACL user, its default
//! user off), a 3-master Cluster (`--tls-cluster yes`) and a Sentinel set (`--tls-replication
//! yes`, the sentinel TLS-only too); and the misconfigurations refused clearly and at once: a
//! wrong CA, no client certificate, TLS against a plaintext Redis. The binary takes the peer's
//! `REDIS_TLS*` and `REDIS_AUTH` variables.
#![cfg(test)]
use crate::store_suite;
use crate::support;
use crate::tls_support::{tls_cluster, Pki, TlsRedis};

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_backend::store::redis::{
    ConnectError, HostnameCheck, RedisConfig, RedisSecurity, RedisStore, RedisTarget, RedisTls,
    SentinelTarget,
};
use sluice_backend::store::{HealthStore, ManualClock, StoreError};
use store_suite::*;
use support::RedisServer;

/// The redis-server arguments of an ACL user `app` (password `apppw`) with the default user off.
const ACL: [&str; 10] = [
    "--user", "default", "off", "--user", "app", "on", ">apppw", "~*", "&*", "+@all",
];
/// redis-cli's arguments for that user.
const ACL_CLI: [&str; 4] = ["--user", "app", "--pass", "apppw"];

fn config(target: RedisTarget, security: RedisSecurity) -> RedisConfig {
    let mut config = RedisConfig::new(target);
    config.timeout = Duration::from_secs(2);
    config.security = security;
    config
}

/// Connects with `security` expecting a refusal; returns its text and how long it took.
async fn refused(target: RedisTarget, security: RedisSecurity) -> (String, Duration) {
    let start = Instant::now();
    let outcome = RedisStore::connect(config(target, security)).await;
    let took = start.elapsed();
    match outcome {
        Err(ConnectError::Store(StoreError::Unavailable(text))) => (text, took),
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("connected with settings that must be refused"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_single_node_passes_the_suite_and_refuses_a_wrong_ca_or_no_client_certificate() {
    let pki = Pki::new("single");
    let server = TlsRedis::start(&pki, &ACL, &ACL_CLI);
    let clock = ManualClock::new(B);
    let security = RedisSecurity {
        user: Some("app".into()),
        password: Some("apppw".into()),
        ..pki.security()
    };
    let store = Arc::new(
        RedisStore::connect(config(RedisTarget::Single(server.url()), security.clone()))
            .await
            .expect("connect over TLS with the client certificate and the ACL user")
            .with_clock(clock.clone()),
    );
    store.ping().await.expect("ping over TLS");
    whole_suite(store.clone(), &clock, 0x7151).await;
    assert_ne!(
        server.cli(&["DBSIZE"]).trim(),
        "0",
        "the suite's keys are in the TLS server"
    );

    // A CA that did not sign the server's certificate.
    let other = Pki::new("other");
    let (text, took) = refused(
        RedisTarget::Single(server.tls_url()),
        RedisSecurity {
            user: Some("app".into()),
            password: Some("apppw".into()),
            ..pki.security_trusting(&other)
        },
    )
    .await;
    println!("wrong CA refused in {took:?}: {text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
    assert!(text.contains("--redis-tls-ca-cert"), "{text}");
    assert!(took < Duration::from_secs(1), "took {took:?}");

    // The right CA, but no client certificate: the server refuses the handshake.
    let ca_only = RedisSecurity {
        tls: Some(Box::new(RedisTls {
            client: None,
            ..*pki.security().tls.expect("tls")
        })),
        user: Some("app".into()),
        password: Some("apppw".into()),
    };
    let (text, took) = refused(RedisTarget::Single(server.url()), ca_only).await;
    println!("no client certificate refused in {took:?}: {text}");
    assert!(text.contains("client certificate"), "{text}");
    assert!(took < Duration::from_secs(1), "took {took:?}");

    // The wrong password for the ACL user.
    let start = Instant::now();
    let wrong = RedisStore::connect(config(
        RedisTarget::Single(server.url()),
        RedisSecurity {
            password: Some("nope".into()),
            ..security
        },
    ))
    .await;
    assert!(wrong.is_err(), "a wrong password must not connect");
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// A certificate naming another host: refused naming the hostname check, and accepted with it
/// skipped (the peer's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION); the chain is still checked.
#[tokio::test]
async fn a_certificate_for_another_name_needs_the_hostname_check_skipped() {
    let pki = Pki::naming("elsewhere", "DNS:redis.elsewhere.example");
    let server = TlsRedis::start(&pki, &[], &[]);
    let (text, took) = refused(RedisTarget::Single(server.tls_url()), pki.security()).await;
    println!("a certificate for another name refused in {took:?}: {text}");
    assert!(text.contains("not valid for name"), "{text}");
    assert!(
        text.contains("--redis-tls-skip-hostname-verification"),
        "{text}"
    );
    let skip = |security: RedisSecurity| RedisSecurity {
        tls: security.tls.map(|tls| {
            Box::new(RedisTls {
                hostname: HostnameCheck::Skip,
                ..*tls
            })
        }),
        ..security
    };
    let store = RedisStore::connect(config(
        RedisTarget::Single(server.tls_url()),
        skip(pki.security()),
    ))
    .await
    .expect("the hostname check skipped");
    store.ping().await.expect("ping");
    let other = Pki::new("elsewhere-other");
    let (text, _) = refused(
        RedisTarget::Single(server.tls_url()),
        skip(pki.security_trusting(&other)),
    )
    .await;
    assert!(
        text.contains("UnknownIssuer"),
        "the chain is still checked: {text}"
    );
}

#[tokio::test]
async fn tls_against_a_plaintext_redis_is_named_at_once() {
    let pki = Pki::new("plain");
    let plain = RedisServer::start();
    // The default command timeout (100 ms) bounds the handshake that gets no answer.
    let start = Instant::now();
    let mut config = RedisConfig::new(RedisTarget::Single(plain.url()));
    config.security = pki.security();
    let outcome = RedisStore::connect(config).await;
    let took = start.elapsed();
    let text = match outcome {
        Err(ConnectError::Store(StoreError::Unavailable(text))) => text,
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("a TLS client connected to a plaintext Redis"),
    };
    println!("TLS to a plaintext Redis refused in {took:?}: {text}");
    assert!(text.contains("plaintext"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", plain.port)),
        "{text}"
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_cluster_passes_the_suite() {
    let pki = Pki::new("cluster");
    let nodes = tls_cluster(&pki);
    let urls: Vec<String> = nodes.iter().map(TlsRedis::tls_url).collect();
    let clock = ManualClock::new(B);
    let store = Arc::new(
        RedisStore::connect(config(RedisTarget::Cluster(urls.clone()), pki.security()))
            .await
            .expect("connect to the TLS cluster")
            .with_clock(clock.clone()),
    );
    assert_eq!(store.kind(), "redis-cluster");
    // The readiness check opens its own TLS connection to every master.
    store.ping().await.expect("every master answers over TLS");
    whole_suite(store.clone(), &clock, 0x71c1).await;
    let holding = nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]).trim() != "0")
        .count();
    assert_eq!(holding, 3, "every TLS master holds some keys");

    let other = Pki::new("cluster-other");
    let (text, took) = refused(RedisTarget::Cluster(urls), pki.security_trusting(&other)).await;
    println!("TLS cluster with a wrong CA refused in {took:?}: {text}");
    assert!(
        text.contains("UnknownIssuer") || text.contains("certificate"),
        "{text}"
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sentinel_with_an_acl_user_passes_the_suite() {
    const MASTER: &str = "tlsmaster";
    let pki = Pki::new("sentinel");
    // The master and its replica admit the ACL user only; the replica and the sentinel sign in
    // as it, and so does the store (--redis-user, --redis-password).
    let with_acl = |extra: &[&str]| -> Vec<String> {
        ["--tls-replication", "yes"]
            .iter()
            .chain(extra)
            .chain(&ACL)
            .map(|a| a.to_string())
            .collect()
    };
    let master_args = with_acl(&[]);
    let master_args: Vec<&str> = master_args.iter().map(String::as_str).collect();
    let master = TlsRedis::start(&pki, &master_args, &ACL_CLI);
    let port = master.port.to_string();
    let replica_args = with_acl(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--masteruser",
        "app",
        "--masterauth",
        "apppw",
    ]);
    let replica_args: Vec<&str> = replica_args.iter().map(String::as_str).collect();
    let _replica = TlsRedis::start(&pki, &replica_args, &ACL_CLI);
    let sentinel = TlsRedis::sentinel(&pki, MASTER, master.port, 5_000, Some(("app", "apppw")));
    sentinel.wait_until(Duration::from_secs(10), "it knows the replica", |s| {
        s.cli(&["SENTINEL", "replicas", MASTER])
            .contains("master-link-status")
    });
    let target =
        SentinelTarget::parse(&format!("{MASTER}@127.0.0.1:{}", sentinel.port)).expect("spec");
    let clock = ManualClock::new(B);
    let store = Arc::new(
        RedisStore::connect(config(
            RedisTarget::Sentinel(target.clone()),
            RedisSecurity {
                user: Some("app".into()),
                password: Some("apppw".into()),
                ..pki.security()
            },
        ))
        .await
        .expect("connect through the TLS sentinel to the TLS master as the ACL user")
        .with_clock(clock.clone()),
    );
    store.ping().await.expect("ping");
    whole_suite(store.clone(), &clock, 0x7153).await;
    assert_ne!(
        master.cli(&["DBSIZE"]).trim(),
        "0",
        "the keys are on the master"
    );

    let other = Pki::new("sentinel-other");
    let (text, took) = refused(RedisTarget::Sentinel(target), pki.security_trusting(&other)).await;
    println!("TLS sentinel with a wrong CA refused in {took:?}: {text}");
    assert!(
        text.contains("UnknownIssuer") || text.contains("certificate"),
        "{text}"
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// The binary with envoyproxy/ratelimit's variables only (REDIS_TLS, REDIS_TLS_CACERT,
/// REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY, REDIS_AUTH) and a plain `redis://` URL: ready
/// over TLS; with a wrong CA it stops at start naming the certificate problem.
#[tokio::test]
async fn the_binary_takes_the_peers_tls_variables() {
    let pki = Pki::new("binary");
    let server = TlsRedis::start(&pki, &ACL, &ACL_CLI);
    let other = Pki::new("binary-other");
    let run = |ca: &Pki| {
        let (aport, dport) = (support::free_port(), support::free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args([
                "--grpc-listen",
                "off",
                "--admin-token",
                "test-admin-token-0123456789",
            ])
            .args(["--admin-listen", &format!("127.0.0.1:{aport}")])
            .args(["--decision-listen", &format!("127.0.0.1:{dport}")])
            // A debug build's TLS handshake on a loaded machine can outlast the default 100 ms.
            .args(["--redis-timeout-ms", "2000"])
            .env("SLUICE_REDIS_URL", server.url())
            .env("REDIS_TLS", "true")
            .env("REDIS_TLS_CACERT", ca.file("ca.crt"))
            .env("REDIS_TLS_CLIENT_CERT", pki.file("client.crt"))
            .env("REDIS_TLS_CLIENT_KEY", pki.file("client.key"))
            .env("REDIS_AUTH", "app:apppw");
        let (child, log) = support::spawn_logged(&mut command);
        (child, log, aport)
    };

    let (mut child, log, aport) = run(&pki);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{aport}/readyz"))
            .send()
            .await
        {
            if r.status().is_success() {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not ready: {}",
            log.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();

    let start = Instant::now();
    let (mut child, log, _) = run(&other);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "still running with a wrong CA: {}",
            log.lock().expect("log")
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    let text = log.lock().expect("log").clone();
    println!("the binary stopped {took:?} after its start with a wrong CA: {text}");
    assert!(!status.success());
    assert!(text.contains("UnknownIssuer"), "{text}");
    assert!(text.contains("REDIS_TLS_CACERT"), "{text}");
}
