//! The Redis store over a Sentinel-managed Redis (`RedisTarget::Sentinel`, `--redis-sentinel`):
//! the conformance suite through the master the sentinel names, the store following a failover
//! (the master SIGKILLed, and a manual failover that demotes a live master, answering READONLY),
//! and the settings and outages refused as what they are. Real redis-server processes on
//! loopback: a master, a replica and one sentinel (`redis-server sentinel.conf --sentinel`, the
//! Debian binary runs sentinel mode) with quorum 1 and a short down-after.
#![cfg(test)]
use crate::store_suite;
use crate::support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_backend::store::redis::{
    ConnectError, RedisConfig, RedisField, RedisStore, RedisTarget, SentinelTarget,
};
use sluice_backend::store::{DecisionStore, HealthStore, ManualClock, StoreError};
use store_suite::*;
use support::{free_port, RedisServer};

const MASTER: &str = "sluicemaster";

/// One sentinel process watching `MASTER`, killed (by PID) on drop.
struct Sentinel {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
    /// The sentinel's own `requirepass`, if any.
    password: Option<String>,
}

impl Sentinel {
    fn start(master_port: u16, down_after_ms: u64) -> Sentinel {
        Sentinel::start_with(master_port, down_after_ms, None, None)
    }

    /// With `password`, the sentinel requires it; with `master_password`, it authenticates to
    /// the master with it (`sentinel auth-pass`).
    fn start_with(
        master_port: u16,
        down_after_ms: u64,
        password: Option<&str>,
        master_password: Option<&str>,
    ) -> Sentinel {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("sluice-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {MASTER} {down_after_ms}\n\
                 sentinel failover-timeout {MASTER} 3000\n\
                 sentinel parallel-syncs {MASTER} 1\n{}{}",
                dir.display(),
                password.map_or(String::new(), |p| format!("requirepass {p}\n")),
                master_password.map_or(String::new(), |p| format!(
                    "sentinel auth-pass {MASTER} {p}\n"
                )),
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let sentinel = Sentinel {
            child,
            port,
            dir,
            password: password.map(str::to_owned),
        };
        sentinel.wait_until(Duration::from_secs(10), "it names the master", |s| {
            s.master_port() == Some(master_port)
        });
        sentinel
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(
                self.password
                    .iter()
                    .flat_map(|p| ["--no-auth-warning", "-a", p.as_str()]),
            )
            .args(args)
            .output()
            .expect("redis-cli on PATH");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port of the master the sentinel names now.
    fn master_port(&self) -> Option<u16> {
        let out = self.cli(&["SENTINEL", "get-master-addr-by-name", MASTER]);
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// How many replicas of the master the sentinel knows and could promote (their link to the
    /// master is up, as their own INFO says; a replica not yet asked is NOGOODSLAVE).
    fn replicas(&self) -> usize {
        let out = self.cli(&["SENTINEL", "replicas", MASTER]);
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        lines
            .windows(2)
            .filter(|w| w[0] == "master-link-status" && w[1] == "ok")
            .count()
    }

    fn wait_until(&self, within: Duration, what: &str, done: impl Fn(&Sentinel) -> bool) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if done(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "sentinel on port {}: not within {within:?}: {what}",
            self.port
        );
    }

    fn target(&self) -> SentinelTarget {
        SentinelTarget::parse(&format!("{MASTER}@127.0.0.1:{}", self.port)).expect("spec")
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, a replica of it, and one sentinel that knows both.
fn start_set(down_after_ms: u64) -> (RedisServer, RedisServer, Sentinel) {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let sentinel = Sentinel::start(master.port, down_after_ms);
    sentinel.wait_until(Duration::from_secs(10), "it knows the replica", |s| {
        s.replicas() == 1
    });
    (master, replica, sentinel)
}

async fn store_on(sentinel: &Sentinel, timeout: Duration) -> RedisStore {
    let mut config = RedisConfig::new(RedisTarget::Sentinel(sentinel.target()));
    config.timeout = timeout;
    RedisStore::connect(config)
        .await
        .expect("connect through the sentinel")
}

/// Decides `key` every 20 ms until it succeeds; returns how long it took, failing the test if
/// that was not within `within` (the answer that succeeds included).
async fn until_decided(
    store: &RedisStore,
    r: &sluice_core::Rule,
    key: &str,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        match store.throttle(r, key, 1).await {
            Ok(_) => {
                let took = start.elapsed();
                assert!(
                    took <= within,
                    "decided again after {took:?}, not within {within:?}"
                );
                return took;
            }
            Err(e) => {
                assert!(
                    matches!(e, StoreError::Unavailable(_) | StoreError::Timeout(_)),
                    "during a failover only outages, got {e:?}"
                );
                assert!(
                    start.elapsed() < within,
                    "not decided again within {within:?}: {e}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_store_passes_the_conformance_suite() {
    let (_master, _replica, sentinel) = start_set(5_000);
    let clock = ManualClock::new(B);
    let store = Arc::new(
        store_on(&sentinel, Duration::from_secs(5))
            .await
            .with_clock(clock.clone()),
    );
    assert_eq!(
        store.kind(),
        "redis",
        "a Sentinel-managed Redis is a single node to the store"
    );
    store.ping().await.expect("ping");
    // The memory-settings reading goes to the master too (a test redis-server has no maxmemory).
    let health = store.refresh_health().await;
    assert!(
        health.warnings.iter().any(|w| w.contains("maxmemory is 0")),
        "{health:?}"
    );
    whole_suite(store.clone(), &clock, 0x5e).await;
}

/// The bound: the sentinel's down-after, then 2 s for the vote, the promotion and the store's
/// next look at the sentinels (the same 2 s beyond detection that tests/reliability/test_failover.py
/// allows a Cluster and a Sentinel set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_store_follows_the_master_when_it_is_killed() {
    const DOWN_AFTER_MS: u64 = 500;
    let bound = Duration::from_millis(DOWN_AFTER_MS + 2_000);
    let (mut master, replica, sentinel) = start_set(DOWN_AFTER_MS);
    let store = store_on(&sentinel, Duration::from_millis(200)).await;
    let r = rule(r#"{"action":"fo","algorithm":"fixed_window","capacity":1000,"window":"1h"}"#);
    let before = store
        .throttle(&r, "k", 1)
        .await
        .expect("decided on the master");
    assert!(before.allowed);

    master.kill();
    let took = until_decided(&store, &r, "k", bound).await;
    assert_eq!(
        sentinel.master_port(),
        Some(replica.port),
        "the sentinel promoted the replica"
    );
    eprintln!(
        "decided again {took:?} after the master was killed (down-after {DOWN_AFTER_MS} ms, bound {bound:?})"
    );
    // Decisions go to the promoted replica: its own copy of the key holds every debit since.
    let after = store.throttle(&r, "k", 1).await.expect("decided");
    assert!(after.allowed);
    let count = replica.cli(&["GET", "sluice:{fo:k}:fixed_window"]);
    assert!(
        !count.trim().is_empty(),
        "the key lives on the new master, got {count:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_store_leaves_a_demoted_master() {
    // A manual failover demotes a master that stays up: it answers writes with READONLY (or
    // drops its clients), and the store must go to the new master, not keep reading stale state.
    let (master, replica, sentinel) = start_set(5_000);
    let store = store_on(&sentinel, Duration::from_millis(500)).await;
    let r = rule(
        r#"{"action":"demote","algorithm":"gcra","capacity":100,"rate":{"count":1,"period":"1s"}}"#,
    );
    store.throttle(&r, "k", 1).await.expect("decided");

    let said = sentinel.cli(&["SENTINEL", "FAILOVER", MASTER]);
    assert!(said.contains("OK"), "SENTINEL FAILOVER: {said}");
    sentinel.wait_until(Duration::from_secs(15), "it names the replica", |s| {
        s.master_port() == Some(replica.port)
    });
    // The sentinel converts the old master to a replica only once it has seen it report the
    // wrong role for a while; do what it will do, now, so the store meets a READONLY node.
    let said = master.cli(&["REPLICAOF", "127.0.0.1", &replica.port.to_string()]);
    assert!(said.contains("OK"), "REPLICAOF: {said}");
    until_decided(&store, &r, "k2", Duration::from_secs(10)).await;
    // Every later write lands on the new master.
    for i in 0..20 {
        store
            .throttle(&r, &format!("after-{i}"), 1)
            .await
            .expect("decided on the new master");
    }
    assert!(replica
        .cli(&["EXISTS", "sluice:{demote:after-19}:gcra"])
        .contains('1'));
}

#[tokio::test]
async fn sentinel_settings_are_checked_and_outages_are_unavailable() {
    // Both accepted forms name the same master and sentinels.
    let ours = SentinelTarget::parse("m@10.0.0.1:26379,10.0.0.2").expect("ours");
    let theirs =
        SentinelTarget::parse("m,10.0.0.1:26379,10.0.0.2:26379").expect("envoyproxy/ratelimit's");
    assert_eq!(ours, theirs);
    assert_eq!(
        ours.sentinels,
        vec![
            "redis://10.0.0.1:26379".to_owned(),
            "redis://10.0.0.2:26379".to_owned()
        ]
    );

    // A bad setting is a configuration error naming the field, before any connection.
    let bad = SentinelTarget {
        master: "m".into(),
        sentinels: vec!["redis://127.0.0.1:1/notadb".into()],
        master_password: None,
    };
    match RedisStore::connect(RedisConfig::new(RedisTarget::Sentinel(bad))).await {
        Err(ConnectError::Config(e)) => assert_eq!(e.field(), RedisField::Sentinel, "{e}"),
        other => panic!("expected a configuration error, got {:?}", other.err()),
    }

    // No sentinel listening: the store is unavailable (not a configuration error).
    let closed = free_port();
    let target = SentinelTarget::parse(&format!("m@127.0.0.1:{closed}")).expect("spec");
    match RedisStore::connect(RedisConfig::new(RedisTarget::Sentinel(target))).await {
        Err(ConnectError::Store(StoreError::Unavailable(_) | StoreError::Timeout(_))) => {}
        other => panic!("expected unavailable, got {:?}", other.err()),
    }

    // A sentinel that does not know the master: unavailable, saying so.
    let (_master, _replica, sentinel) = start_set(5_000);
    let target =
        SentinelTarget::parse(&format!("nosuchmaster@127.0.0.1:{}", sentinel.port)).expect("spec");
    match RedisStore::connect(RedisConfig::new(RedisTarget::Sentinel(target))).await {
        Err(ConnectError::Store(StoreError::Unavailable(detail))) => {
            assert!(detail.to_lowercase().contains("master"), "{detail}")
        }
        other => panic!("expected unavailable, got {:?}", other.err()),
    }
}

#[tokio::test]
async fn sentinel_and_master_passwords() {
    let master = RedisServer::start();
    assert!(master
        .cli(&["CONFIG", "SET", "requirepass", "masterpw"])
        .contains("OK"));
    let sentinel = Sentinel::start_with(master.port, 5_000, Some("sentinelpw"), Some("masterpw"));
    let spec = format!("{MASTER}@redis://:sentinelpw@127.0.0.1:{}", sentinel.port);
    let config = |master_password: Option<&str>| {
        let mut target = SentinelTarget::parse(&spec).expect("spec");
        target.master_password = master_password.map(str::to_owned);
        RedisConfig::new(RedisTarget::Sentinel(target))
    };

    let store = RedisStore::connect(config(Some("masterpw")))
        .await
        .expect("both passwords given");
    let r = rule(
        r#"{"action":"auth","algorithm":"gcra","capacity":2,"rate":{"count":1,"period":"1h"}}"#,
    );
    assert!(store.throttle(&r, "k", 1).await.expect("decided").allowed);
    assert_eq!(
        store.master(),
        Some(format!("{MASTER} at 127.0.0.1:{}", master.port))
    );

    // Without the master's password the master refuses (NOAUTH): unavailable, not a crash.
    match RedisStore::connect(config(None)).await {
        Err(ConnectError::Store(StoreError::Unavailable(_))) => {}
        other => panic!(
            "expected unavailable without the master password, got {:?}",
            other.err()
        ),
    }
    // Without the sentinel's password the sentinel refuses.
    let target = SentinelTarget {
        master_password: Some("masterpw".into()),
        ..SentinelTarget::parse(&format!("{MASTER}@127.0.0.1:{}", sentinel.port)).expect("spec")
    };
    match RedisStore::connect(RedisConfig::new(RedisTarget::Sentinel(target))).await {
        Err(ConnectError::Store(StoreError::Unavailable(_))) => {}
        other => panic!(
            "expected unavailable without the sentinel password, got {:?}",
            other.err()
        ),
    }
}
