//! Reserve, then commit, under `--ratelimit-config` (docs/rls.md, "Cost budgets: reserve, then
//! commit"): the sluice-rules path's marks on descriptors matched against an envoyproxy/ratelimit
//! file. A marked descriptor matches the limit its other entries match (a nested one included,
//! marks in any position); the commit refunds, debits and counts once per id on that limit's
//! counter; a refused reservation takes nothing; shadow and quota mode settle only what their
//! reservation debited; `unlimited` and `requests_per_unit: 0` have nothing to settle; bad marks
//! are refused with the sluice-rules path's own status. The settling cases run on memory, on a
//! real redis-server and on a real 3-master Redis Cluster (`support::RedisCluster`, the fixture
//! of the other Cluster tests), where a commit's script touches the state, its id mark and the
//! budget record in one slot. The RLS path takes the store's clock, so units are days (no window
//! edge inside a test, except at midnight UTC), as in `ratelimit_config`.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_backend::ratelimit::semantics::Semantics;
use sluice_backend::{Config, StoreChoice};
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{cluster, redis, TOKEN};
use crate::support::{RedisCluster, RedisServer};

type Rig = GrpcRig<RateLimitServiceClient<Channel>>;

const CONFIG: &str = "\
domain: budgets
descriptors:
  - key: tokens
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: plan
    value: pro
    descriptors:
      - key: tokens
        rate_limit: {unit: day, requests_per_unit: 500}
  - key: shadow_tokens
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: quota_tokens
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: day, requests_per_unit: 0}
";

async fn start(store: StoreChoice, name: &str) -> (Rig, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("sluice-it-rlb-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), CONFIG).unwrap();
    let mut config = Config::new(store, TOKEN);
    config.ratelimit_config = Some(dir.clone());
    // The domain `edge` is in no file: answered by sluice's rules, not OK as the peer would.
    config.ratelimit_semantics = Semantics::parse("own_rules_for_unknown_domains").unwrap();
    (Rig::start_with(config).await, dir)
}

fn descriptor(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..crate::rls::descriptor(entries)
    }
}

async fn ask_in(
    rig: &Rig,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut rls = rig.client.clone();
    let request = RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    };
    rls.should_rate_limit(request).await.map(|r| r.into_inner())
}

async fn ask(rig: &Rig, entries: &[(&str, &str)], hits: u64) -> RateLimitResponse {
    ask_in(rig, "budgets", vec![descriptor(entries, hits)])
        .await
        .unwrap()
}

fn code(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).unwrap()
}

/// Reserves `n` of `entries` (a request-time descriptor marked with `sluice_reservation` when an
/// id is given): the overall code.
async fn reserve(rig: &Rig, entries: &[(&str, &str)], id: Option<&str>, n: u64) -> Code {
    let mut e = entries.to_vec();
    if let Some(id) = id {
        e.push(("sluice_reservation", id));
    }
    code(&ask(rig, &e, n).await)
}

/// Commits `actual` for the reservation `id` of `reserved` (the marks first, as a route may
/// list them anywhere): the response, whose status must be a plain OK.
async fn commit(rig: &Rig, entries: &[(&str, &str)], id: &str, reserved: u64, actual: u64) {
    let reserved = reserved.to_string();
    let mut e = vec![
        ("sluice_commit", id),
        ("sluice_reserved", reserved.as_str()),
    ];
    e.extend_from_slice(entries);
    let r = ask(rig, &e, actual).await;
    assert_eq!(code(&r), Code::Ok, "{r:?}");
    assert_eq!(r.statuses[0].code, Code::Ok as i32, "{r:?}");
    assert!(
        r.statuses[0].current_limit.is_none(),
        "a commit is settled, not decided: {r:?}"
    );
}

/// What is left of `entries`' limit (a check of 0 hits).
async fn left(rig: &Rig, entries: &[(&str, &str)]) -> u32 {
    ask(rig, entries, 0).await.statuses[0].limit_remaining
}

async fn metric(rig: &Rig, name: &str) -> f64 {
    let text = rig
        .http
        .get(format!("{}/metrics", rig.decision))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn budgets(rig: &Rig) {
    let alice: &[(&str, &str)] = &[("tokens", "alice")];
    // Reserve 300, use 100: 200 come back.
    assert_eq!(reserve(rig, alice, Some("r1"), 300).await, Code::Ok);
    assert_eq!(left(rig, alice).await, 700);
    commit(rig, alice, "r1", 300, 100).await;
    assert_eq!(left(rig, alice).await, 900);
    // The same commit again (a retry): counted once.
    let duplicates = metric(rig, "sluice_commit_duplicates_total").await;
    commit(rig, alice, "r1", 300, 100).await;
    assert_eq!(left(rig, alice).await, 900);
    assert_eq!(
        metric(rig, "sluice_commit_duplicates_total").await,
        duplicates + 1.0
    );
    // Reserve 300, use 450. No id on the reservation, so nothing was recorded under "r2": its
    // commit cannot claim the 300 and debits all 450 (a commit credits only what was recorded).
    assert_eq!(reserve(rig, alice, None, 300).await, Code::Ok);
    commit(rig, alice, "r2", 300, 450).await;
    assert_eq!(left(rig, alice).await, 150);
    // A reservation that no longer fits is refused and takes nothing; an unmarked debit of the
    // same size is the peer's token-quota debit and takes what is left, as before.
    assert_eq!(reserve(rig, alice, Some("r3"), 600).await, Code::OverLimit);
    assert_eq!(left(rig, alice).await, 150);
    assert_eq!(reserve(rig, alice, None, 600).await, Code::OverLimit);
    assert_eq!(left(rig, alice).await, 0);
    // Issue 40: a commit descriptor with an id nothing reserved, claiming 600 of which 0 were
    // used, gives nothing back on the spent budget (it used to refund 600).
    commit(rig, alice, "forged", 600, 0).await;
    assert_eq!(left(rig, alice).await, 0, "a forged commit credited units");

    // The marks never change the match: a nested limit, marks between its entries.
    let pro: &[(&str, &str)] = &[("plan", "pro"), ("tokens", "bob")];
    let marked = [
        ("plan", "pro"),
        ("sluice_reservation", "p1"),
        ("tokens", "bob"),
    ];
    assert_eq!(code(&ask(rig, &marked, 200).await), Code::Ok);
    assert_eq!(left(rig, pro).await, 300);
    assert_eq!(
        left(rig, &[("tokens", "bob")]).await,
        1000,
        "not the top-level limit"
    );
    let marked = [
        ("plan", "pro"),
        ("sluice_commit", "p1"),
        ("tokens", "bob"),
        ("sluice_reserved", "200"),
    ];
    assert_eq!(code(&ask(rig, &marked, 50).await), Code::Ok);
    assert_eq!(left(rig, pro).await, 450);

    // Shadow mode counts what enforcement would: an allowed reservation is settled; one it would
    // have refused debited nothing, and its commit changes nothing.
    let shadow: &[(&str, &str)] = &[("shadow_tokens", "carol")];
    assert_eq!(reserve(rig, shadow, Some("s1"), 80).await, Code::Ok);
    commit(rig, shadow, "s1", 80, 20).await;
    assert_eq!(left(rig, shadow).await, 80);
    assert_eq!(
        reserve(rig, shadow, Some("s2"), 90).await,
        Code::Ok,
        "shadow never refuses"
    );
    assert_eq!(left(rig, shadow).await, 80);
    commit(rig, shadow, "s2", 90, 10).await;
    assert_eq!(
        left(rig, shadow).await,
        80,
        "a would-deny reservation settles nothing"
    );
    // Quota mode: the same, per descriptor.
    let quota: &[(&str, &str)] = &[("quota_tokens", "dave")];
    assert_eq!(reserve(rig, quota, Some("q1"), 60).await, Code::Ok);
    commit(rig, quota, "q1", 60, 90).await;
    assert_eq!(left(rig, quota).await, 10);

    // Nothing to settle: unlimited, requests_per_unit 0 (a commit answers OK, not over), no match.
    commit(rig, &[("free", "x")], "u1", 10, 5).await;
    commit(rig, &[("blocked", "x")], "z1", 10, 5).await;
    commit(rig, &[("nowhere", "x")], "n1", 10, 5).await;
    assert_eq!(
        reserve(rig, &[("blocked", "x")], Some("z2"), 1).await,
        Code::OverLimit
    );
}

/// A reservation with its id is in flight on the key view until its commit, as on the
/// sluice-rules path (the `rl:` rule is a rule like any other).
async fn in_flight_until_its_commit(rig: &Rig) {
    let budget = || async {
        let view = rig.key_view("erin").await;
        let actions = view["actions"].as_array().cloned().unwrap_or_default();
        actions
            .into_iter()
            .find(|a| a["action"] == "rl:budgets.tokens")
            .map(|a| a["budget"].clone())
            .unwrap_or(view)
    };
    let erin: &[(&str, &str)] = &[("tokens", "erin")];
    assert_eq!(reserve(rig, erin, Some("f1"), 70).await, Code::Ok);
    let held = budget().await;
    assert_eq!(held["reserved_in_flight"].as_u64(), Some(70), "{held}");
    commit(rig, erin, "f1", 70, 110).await;
    let done = budget().await;
    assert_eq!(
        (
            done["reserved_in_flight"].as_u64(),
            done["debited"].as_u64()
        ),
        (Some(0), Some(40)),
        "{done}"
    );
}

/// Every settling case on one instance over `store`: the cases use distinct keys, so one store
/// (one Cluster) serves them all.
async fn settle_on(store: StoreChoice, name: &str) {
    let (rig, dir) = start(store, name).await;
    budgets(&rig).await;
    in_flight_until_its_commit(&rig).await;
    rig.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_then_commit_on_a_ratelimit_config_on_memory() {
    settle_on(StoreChoice::Memory, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_then_commit_on_a_ratelimit_config_on_redis() {
    let server = RedisServer::start();
    settle_on(redis(&server.url()), "redis").await;
}

/// On a Cluster the limits' keys spread over the masters; each commit is one script call in its
/// key's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_then_commit_on_a_ratelimit_config_on_a_redis_cluster() {
    let redis_cluster = RedisCluster::start();
    settle_on(cluster(redis_cluster.urls()), "cluster").await;
    // More than one master holds keys: the cases did cross slots, so a script touching a key
    // outside its state's hash tag would have failed with CROSSSLOT above.
    let holding = redis_cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]).trim() != "0")
        .count();
    assert!(holding > 1, "the budgets' keys sit on one master only");
}

/// Bad marks are refused exactly as the sluice-rules path refuses them (same code, same
/// message), and a request without marks keeps the peer's meaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_marks_are_refused_as_the_sluice_rules_path_refuses_them() {
    let (rig, dir) = start(StoreChoice::Memory, "bad").await;
    let long = "i".repeat(129);
    let bad: [&[(&str, &str)]; 6] = [
        &[
            ("tokens", "a"),
            ("sluice_commit", "r"),
            ("sluice_reserved", "x"),
        ],
        &[
            ("tokens", "a"),
            ("sluice_commit", "r"),
            ("sluice_reserved", "2000000000"),
        ],
        &[("tokens", "a"), ("sluice_commit", "r")],
        &[("tokens", "a"), ("sluice_reserved", "5")],
        &[
            ("tokens", "a"),
            ("sluice_commit", &long),
            ("sluice_reserved", "5"),
        ],
        &[
            ("tokens", "a"),
            ("sluice_commit", "r"),
            ("sluice_reservation", "r"),
        ],
    ];
    for entries in bad {
        let refused = |domain: &'static str| {
            let d = descriptor(entries, 1);
            let rig = &rig;
            async move { ask_in(rig, domain, vec![d]).await.unwrap_err() }
        };
        let (configured, rules) = (refused("budgets").await, refused("edge").await);
        assert_eq!(
            configured.code(),
            tonic::Code::InvalidArgument,
            "{configured:?}"
        );
        assert_eq!(
            (configured.code(), configured.message()),
            (rules.code(), rules.message()),
            "{entries:?}"
        );
        assert!(
            configured.message().starts_with("descriptors[0].entries: "),
            "{configured:?}"
        );
    }
    rig.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
