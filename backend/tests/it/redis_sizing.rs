//! Redis under a key spray (a flood of fresh subjects), on real redis-servers with a tiny
//! `maxmemory`: what the backend warns about, what it answers when Redis is full, and that the
//! recommended setting keeps limited keys limited and every rule in place. See docs/storage.md,
//! "Sizing Redis", and docs/failure-modes.md, "A key spray".
//!
//! Sprays go through the Store API directly (256 calls in flight on the multiplexed
//! connection), bounded in count: ~40k decisions a second on the 2-core machine.

use crate::harness::{self, eventually, Sluice};
use crate::support::{RedisCluster, RedisServer};

use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde_json::Value;
use sluice_backend::store::redis::{
    RedisConfig, RedisStore, RedisTarget, ACTIVITY_TTL_MS, HEALTH_INTERVAL, RECOMMENDED_POLICY,
};
use sluice_backend::store::ActivityStore;
use sluice_backend::store::DecisionStore;
use sluice_backend::store::RuleStore;
use sluice_backend::store::{Activity, HealthStore, StoreError};
use sluice_core::cell::CellArgs;
use sluice_core::{Action, Rule};

/// A Redis small enough that a spray of tens of thousands of keys fills it.
const TINY: &str = "4mb";

async fn connect(url: &str) -> RedisStore {
    let mut config = RedisConfig::new(RedisTarget::Single(url.to_owned()));
    config.timeout = Duration::from_secs(5);
    config.max_in_flight = 4096;
    RedisStore::connect(config).await.expect("connect")
}

fn rule(action: &str, algorithm: &str, capacity: u64) -> Rule {
    Rule::from_json_str(&harness::long_rule(action, algorithm, capacity).to_string())
        .expect("valid rule")
}

/// What a spray got back.
#[derive(Debug, Default)]
struct Sprayed {
    allowed: u64,
    denied: u64,
    full: u64,
    /// Any other error, as text (a spray must never see one).
    other: Vec<String>,
    /// The first `store_full` message.
    full_message: Option<String>,
}

/// Decides one request for each of `count` fresh keys `<tag>-<i>`, 256 at a time.
async fn spray(store: &RedisStore, rule: &Rule, tag: &str, from: u64, count: u64) -> Sprayed {
    let answers: Vec<_> = stream::iter(from..from + count)
        .map(|i| async move { store.throttle(rule, &format!("{tag}-{i}"), 1).await })
        .buffer_unordered(256)
        .collect()
        .await;
    let mut out = Sprayed::default();
    for answer in answers {
        match answer {
            Ok(d) if d.allowed => out.allowed += 1,
            Ok(_) => out.denied += 1,
            Err(StoreError::Full(message)) => {
                out.full += 1;
                out.full_message.get_or_insert(message);
            }
            Err(e) => out.other.push(e.to_string()),
        }
    }
    out
}

/// One field of `INFO <section>` as a number.
fn info(redis: &RedisServer, section: &str, field: &str) -> u64 {
    let text = redis.cli(&["INFO", section]);
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
}

fn has_warning(warnings: &[String], about: &str) -> bool {
    warnings.iter().any(|w| w.contains(about))
}

/// A limited key, its rule, and how many requests it was allowed in all.
struct Victim {
    rule: Rule,
    key: String,
    allowed: u64,
}

impl Victim {
    /// Spends the whole capacity (3) and is denied twice: a subject being limited.
    async fn limited(store: &RedisStore, action: &str, algorithm: &str) -> Victim {
        let rule = rule(action, algorithm, 3);
        store.put_rule(&rule).await.expect("put rule");
        let mut victim = Victim {
            rule,
            key: format!("victim-of-{action}"),
            allowed: 0,
        };
        for _ in 0..5 {
            victim.try_once(store).await;
        }
        assert_eq!(
            victim.allowed, 3,
            "{algorithm}: a fresh key gets its capacity"
        );
        victim
    }

    /// One more attempt; returns whether it was allowed.
    async fn try_once(&mut self, store: &RedisStore) -> bool {
        let d = store
            .throttle(&self.rule, &self.key, 1)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.rule.action().as_str()));
        self.allowed += u64::from(d.allowed);
        d.allowed
    }
}

/// What a spray did to the subjects being limited, under one eviction policy.
struct SprayOutcome {
    /// "<action>: allowed N" for every victim allowed more than its capacity.
    resets: Vec<String>,
    /// Rules still in Redis afterwards.
    rules: usize,
    /// Keys Redis evicted (`INFO stats`).
    evicted: u64,
    /// `HealthStore::health()` read right after the spray.
    health: sluice_core::wire::StoreHealth,
}

/// Twelve limited subjects (one per algorithm that keeps trying during the spray, one per
/// algorithm that waits), then 100k fresh keys into a [`TINY`] Redis, half on a string-valued
/// algorithm (gcra), half on a hash-valued one (sliding_window), the active subjects trying
/// again after every 5k. Every sprayed request must be decided (no error, none refused).
async fn spray_against_limited_subjects(policy: &str) -> SprayOutcome {
    let redis = RedisServer::start_with(&[
        "--maxmemory",
        TINY,
        "--maxmemory-policy",
        policy,
        "--lfu-log-factor",
        "0",
    ]);
    let store = connect(&redis.url()).await;
    let mut active = Vec::new();
    let mut idle = Vec::new();
    for algorithm in harness::ALGORITHMS {
        active.push(Victim::limited(&store, &format!("active-{algorithm}"), algorithm).await);
        idle.push(Victim::limited(&store, &format!("idle-{algorithm}"), algorithm).await);
    }
    let gcra = rule("spray-gcra", "gcra", 5);
    let window = rule("spray-window", "sliding_window", 5);
    store.put_rule(&gcra).await.expect("put rule");
    store.put_rule(&window).await.expect("put rule");

    for round in 0..20u64 {
        let on = if round % 2 == 0 { &gcra } else { &window };
        let got = spray(&store, on, "spray", round * 5_000, 5_000).await;
        assert_eq!(
            (got.allowed, got.full, got.other.len()),
            (5_000, 0, 0),
            "{policy}: every sprayed key decided, none refused: {:?}",
            got.other.first()
        );
        for victim in &mut active {
            victim.try_once(&store).await;
        }
    }
    let health = store.refresh_health().await;
    let mut resets = Vec::new();
    for victim in active.iter_mut().chain(idle.iter_mut()) {
        victim.try_once(&store).await;
        if victim.allowed != 3 {
            resets.push(format!(
                "{}: allowed {}",
                victim.rule.action().as_str(),
                victim.allowed
            ));
        }
    }
    let rules = store.load_rules().await.expect("rules").rules.len();
    let evicted = info(&redis, "stats", "evicted_keys");
    eprintln!(
        "spray of 100000 keys into {TINY} ({policy}, lfu-log-factor 0): {evicted} evicted, {} \
         keys left, used_memory {} B, limited subjects reset: {resets:?}",
        redis.cli(&["DBSIZE"]).trim(),
        info(&redis, "memory", "used_memory")
    );
    SprayOutcome {
        resets,
        rules,
        evicted,
        health,
    }
}

/// The recommended setting under a spray several times what Redis holds: Redis evicts, no
/// request fails, every subject being limited (whether it keeps trying during the spray or
/// waits) is still limited exactly, for every algorithm, and every rule is still there; the
/// backend says Redis is evicting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recommended_policy_keeps_limited_keys_and_every_rule_under_a_spray() {
    let outcome = spray_against_limited_subjects(RECOMMENDED_POLICY).await;
    assert!(
        outcome.evicted > 10_000,
        "the spray must overflow Redis for this test to mean anything: {} evicted",
        outcome.evicted
    );
    assert_eq!(outcome.resets, Vec::<String>::new());
    assert_eq!(outcome.rules, 14, "every rule survives");
    assert!(outcome.health.evictions >= 10_000, "{:?}", outcome.health);
    assert_eq!(outcome.health.warnings.len(), 1, "{:?}", outcome.health);
    assert!(
        outcome.health.warnings[0].starts_with("Redis is evicting keys"),
        "{:?}",
        outcome.health
    );
}

/// Why `volatile-ttl` is warned about: the same spray resets subjects being limited (a denial
/// does not rewrite a key, so a limited key looks older than the spray's fresh ones, and keys
/// of rules with shorter periods go first), though the rules survive as under any `volatile-*`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_ttl_resets_limited_keys_under_the_same_spray() {
    let outcome = spray_against_limited_subjects("volatile-ttl").await;
    assert!(
        !outcome.resets.is_empty(),
        "volatile-ttl kept every limited key"
    );
    assert_eq!(outcome.rules, 14);
    assert!(
        has_warning(&outcome.health.warnings, "maxmemory-policy is volatile-ttl"),
        "{:?}",
        outcome.health
    );
}

/// `noeviction`: the warning is there from the start (store and /readyz, and the levels the
/// dashboard reads); once Redis is full every write is refused as `store_full` (503, counted as
/// `kind="full"`), never `store_unavailable`; a key already limited is still denied (a denial
/// writes nothing), and rule writes fail the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noeviction_warns_and_a_full_redis_answers_store_full() {
    let redis = RedisServer::start_with(&["--maxmemory", TINY, "--maxmemory-policy", "noeviction"]);
    let store = connect(&redis.url()).await;
    let warnings = store.health().warnings;
    assert!(
        has_warning(&warnings, "maxmemory-policy is noeviction"),
        "{warnings:?}"
    );

    let s = Sluice::start(harness::redis(&redis.url())).await;
    let ready: Value = crate::harness::get_json(&s.http, format!("{}/readyz", s.decision)).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert!(
        ready["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w
                .as_str()
                .is_some_and(|w| w.contains("maxmemory-policy is noeviction")))),
        "{ready}"
    );
    let mut victim = Victim::limited(&store, "login", "gcra").await;
    let (status, _) = s.put_rule(harness::long_rule("post", "gcra", 5)).await;
    assert_eq!(status, 200);
    let (status, levels) = s.admin_get("/v1/levels").await;
    assert_eq!(status, 200, "{levels}");
    assert!(
        levels["store"]["warnings"]
            .to_string()
            .contains("noeviction"),
        "{levels}"
    );

    // Fill Redis: at most 150k keys, stopping at the first refusals.
    let spray_rule = rule("spray", "gcra", 5);
    store.put_rule(&spray_rule).await.expect("put rule");
    let mut sprayed = Sprayed::default();
    for round in 0..30u64 {
        let got = spray(&store, &spray_rule, "spray", round * 5_000, 5_000).await;
        assert!(got.other.is_empty(), "only store_full: {:?}", got.other);
        sprayed.full += got.full;
        sprayed.full_message = sprayed.full_message.or(got.full_message);
        if sprayed.full > 0 {
            break;
        }
    }
    assert!(sprayed.full > 0, "Redis never filled up");
    let message = sprayed.full_message.unwrap_or_default();
    assert!(
        message.contains("OOM command not allowed when used memory > 'maxmemory'"),
        "{message}"
    );

    // Right at maxmemory, freed client buffers let an odd write through now and then; take
    // Redis well below what it holds so that "full" is not a matter of a few bytes.
    redis.cli(&["CONFIG", "SET", "maxmemory", "1mb"]);
    // A fresh key: refused. The limited key: still denied, as before.
    match store.throttle(&spray_rule, "fresh", 1).await {
        Err(StoreError::Full(_)) => {}
        other => panic!("expected store_full, got {other:?}"),
    }
    assert!(!victim.try_once(&store).await);
    assert_eq!(victim.allowed, 3);
    // Rule writes and activity are writes too.
    assert!(matches!(
        store.put_rule(&rule("another", "gcra", 1)).await,
        Err(StoreError::Full(_))
    ));
    let action = Action::parse("spray").expect("action");
    let batch = [Activity {
        action,
        key: "k".into(),
        last_seen_ms: 1,
        allowed: 1,
        denied: 0,
    }];
    assert!(matches!(
        store.record_activity(&batch).await,
        Err(StoreError::Full(_))
    ));

    let (status, body) = s.throttle("post", "someone-new", 1).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "store_full", "{body}");
    let (status, body) = s.throttle("login", &victim.key, 1).await;
    assert_eq!(
        (status, &body["allowed"]),
        (200, &Value::Bool(false)),
        "{body}"
    );
    let metrics = s.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_store_errors_total{")
                && l.contains("kind=\"full\"")
                && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Still ready: Redis answers; the warning says why decisions fail.
    crate::harness::get_with_status(&s.http, format!("{}/readyz", s.decision), 200).await;
    s.stop().await;
}

/// Every key sluice writes, but the rules hash, carries a TTL, so a `volatile-*` policy can evict
/// throttle state and activity and never the rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_but_the_rules_hash_carries_a_ttl() {
    let redis = RedisServer::start();
    let store = connect(&redis.url()).await;
    for algorithm in harness::ALGORITHMS {
        let rule = rule(&format!("ttl-{algorithm}"), algorithm, 3);
        store.put_rule(&rule).await.expect("put rule");
        for key in ["short", &"long{braced}".repeat(20)] {
            let d = store.throttle(&rule, key, 1).await.expect("decide");
            assert!(d.allowed);
        }
    }
    let cell = CellArgs::new(15, 30, 60, 1).expect("cell args");
    store.cell_throttle("cell-key", cell).await.expect("cell");
    let action = Action::parse("ttl-gcra").expect("action");
    store
        .record_activity(&[Activity {
            action,
            key: "short".into(),
            last_seen_ms: 1,
            allowed: 1,
            denied: 0,
        }])
        .await
        .expect("activity");
    // The older layout's version key (no TTL) is migrated into the hash and deleted on load.
    redis.cli(&["SET", "{sluice:rules}:version", "7"]);
    store.load_rules().await.expect("load");

    let keys: Vec<String> = redis
        .cli(&["--scan"])
        .lines()
        .map(str::to_owned)
        .filter(|k| !k.is_empty())
        .collect();
    // 6 algorithms x 2 keys, 1 cell key, 2 activity keys, the rules hash.
    assert_eq!(keys.len(), 16, "{keys:?}");
    for key in &keys {
        let ttl: i64 = redis.cli(&["PTTL", key]).trim().parse().expect("PTTL");
        if key == "{sluice:rules}" {
            assert_eq!(ttl, -1, "the rules never expire");
        } else {
            assert!(ttl > 0, "{key} has no TTL ({ttl})");
            if key.starts_with("{sluice:activity:") {
                assert!(ttl <= ACTIVITY_TTL_MS as i64, "{key}: {ttl}");
            } else {
                // Rules of 1 unit per hour, capacity 3 (meters), or 7-day windows.
                assert!(ttl <= 14 * 24 * 3_600_000 + 1_000, "{key}: {ttl}");
            }
        }
    }
}

/// Bytes of Redis memory (`used_memory`) per throttle key, by algorithm: the figures in
/// docs/storage.md. Each algorithm on its own redis-server (so one's hash-table growth is not
/// billed to another), 20k keys `user-<algorithm>-<n>` with one admitted request each: the
/// state, the key name (~40 bytes here), its TTL and Redis's per-key overhead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_bytes_per_key_by_algorithm() {
    const KEYS: u64 = 20_000;
    let mut table = Vec::new();
    for algorithm in harness::ALGORITHMS {
        let redis = RedisServer::start();
        let store = connect(&redis.url()).await;
        let rule = rule("bytes", algorithm, 5);
        store.put_rule(&rule).await.expect("put rule");
        let before = info(&redis, "memory", "used_memory");
        let got = spray(&store, &rule, &format!("user-{algorithm}"), 100_000, KEYS).await;
        assert_eq!(got.allowed, KEYS, "{:?}", got.other.first());
        let after = info(&redis, "memory", "used_memory");
        table.push((algorithm, after.saturating_sub(before) / KEYS));
    }
    eprintln!("used_memory per throttle key ({KEYS} keys each, one request per key):");
    for (algorithm, per_key) in &table {
        eprintln!("  {algorithm:<15} {per_key:>4} B");
    }
    for (algorithm, per_key) in table {
        // A string, or a small listpack hash or list, with its key and TTL: ~100-300 B. Far
        // more means a script writes something it should not.
        assert!(
            (50..400).contains(&per_key),
            "{algorithm}: {per_key} B per key"
        );
    }
}

/// The settings are read again without being asked (a change is seen within one interval), and
/// the task that reads them ends with the store: its connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_reread_periodically_and_the_reader_ends_with_the_store() {
    let redis =
        RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]);
    let baseline = info(&redis, "clients", "connected_clients");
    let store = connect(&redis.url()).await;
    assert_eq!(store.health().warnings, Vec::<String>::new());
    assert_eq!(store.health().kind, "redis");
    assert!(info(&redis, "clients", "connected_clients") > baseline);

    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    let warnings = eventually(
        HEALTH_INTERVAL + Duration::from_secs(5),
        "the policy change is read again",
        || {
            let warnings = store.health().warnings;
            async move { (!warnings.is_empty()).then_some(warnings) }
        },
    )
    .await;
    assert!(
        has_warning(
            &warnings,
            "maxmemory-policy is allkeys-random: it may evict the rules hash"
        ),
        "{warnings:?}"
    );
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", RECOMMENDED_POLICY]);
    let now = store.refresh_health().await.warnings;
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(
        now[0].starts_with("Redis maxmemory is 0 (no limit)"),
        "{now:?}"
    );

    drop(store);
    eventually(
        Duration::from_secs(5),
        "the store's connection (and its reader task) is gone",
        || {
            let clients = info(&redis, "clients", "connected_clients");
            async move { (clients <= baseline).then_some(()) }
        },
    )
    .await;
}

/// A Redis that refuses CONFIG (renamed away, or an ACL user without it) still works; the
/// backend says it cannot check the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_config_get_is_a_warning_not_a_failure() {
    let renamed = RedisServer::start_with(&["--rename-command", "CONFIG", ""]);
    let store = connect(&renamed.url()).await;
    let warnings = store.health().warnings;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("cannot read the Redis memory settings (CONFIG GET maxmemory* was refused: ERR unknown command"),
        "{warnings:?}"
    );
    let rule = rule("works", "gcra", 1);
    store.put_rule(&rule).await.expect("put rule");
    assert!(store.throttle(&rule, "k", 1).await.expect("decide").allowed);

    let acl = RedisServer::start();
    acl.cli(&[
        "ACL", "SETUSER", "sluice", "on", ">pw", "~*", "&*", "+@all", "-config",
    ]);
    let url = format!("redis://sluice:pw@127.0.0.1:{}/", acl.port);
    let store = connect(&url).await;
    let warnings = store.health().warnings;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("was refused: NOPERM"), "{warnings:?}");
    assert!(store.throttle(&rule, "k", 1).await.expect("decide").allowed);
}

/// On a Cluster every master is read; a warning names the masters it applies to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_master_is_read() {
    let cluster = RedisCluster::start();
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "SET", "maxmemory", "64mb"]);
        node.cli(&["CONFIG", "SET", "maxmemory-policy", RECOMMENDED_POLICY]);
    }
    let odd = &cluster.nodes[1];
    odd.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = Duration::from_secs(5);
    let store = RedisStore::connect(config).await.expect("connect");
    let warnings = store.health().warnings;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("maxmemory-policy is noeviction")
            && warnings[0].ends_with(&format!("[nodes 127.0.0.1:{}]", odd.port)),
        "{warnings:?}"
    );
    odd.cli(&["CONFIG", "SET", "maxmemory-policy", RECOMMENDED_POLICY]);
    assert_eq!(store.refresh_health().await.warnings, Vec::<String>::new());
    assert_eq!(store.health().kind, "redis-cluster");
}
