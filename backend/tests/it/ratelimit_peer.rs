//! `--ratelimit-config` under the peer's semantics (the default): envoyproxy/ratelimit's answers,
//! request for request, for the sequences of its integration scripts (token quota, quota mode
//! across two services, the multi-service token quota) and each point where sluice's own
//! semantics differ (a refused request's other descriptors, an oversized debit, a check at
//! exactly the limit, a limit of 0, a descriptor's own `limit`, an unknown domain), on memory, a
//! real redis-server and a real 3-master Redis Cluster. Units are days, so no window edge falls
//! inside a test (except at midnight UTC).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_backend::{Config, StoreChoice};
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{cluster, redis, TOKEN};
use crate::support::{RedisCluster, RedisServer};

type Rig = GrpcRig<RateLimitServiceClient<Channel>>;

use Code::{Ok as OK, OverLimit as OVER};

/// The peer's example services (examples/ratelimit/config/example.yaml), per day, and limits for
/// the other points.
const CONFIG: &str = "\
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
    metadata:
      service_with_quota:
        name: service_1
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
    metadata:
      service_with_quota:
        name: service_2
  - key: tokens
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: budget
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: blocked
    rate_limit: {unit: day, requests_per_unit: 0}
";

async fn start(store: StoreChoice, name: &str) -> Rig {
    let dir = std::env::temp_dir().join(format!("sluice-it-rlp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), CONFIG).unwrap();
    let mut config = Config::new(store, TOKEN);
    config.ratelimit_config = Some(dir);
    Rig::start_with(config).await
}

fn d(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..crate::rls::descriptor(entries)
    }
}

async fn ask_in(
    rig: &Rig,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    let mut rls = rig.client.clone();
    let request = RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    };
    rls.should_rate_limit(request).await.unwrap().into_inner()
}

async fn ask(rig: &Rig, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    ask_in(rig, "rl", descriptors).await
}

/// The overall code, and each status's code and limit_remaining.
fn answer(r: &RateLimitResponse) -> (Code, Vec<(Code, u32)>) {
    let code = |c: i32| Code::try_from(c).unwrap();
    (
        code(r.overall_code),
        r.statuses
            .iter()
            .map(|s| (code(s.code), s.limit_remaining))
            .collect(),
    )
}

/// The `metadata.service_with_quota.name` of the answer's dynamic metadata (the service Envoy's
/// header mutation picks in the peer's example), if any.
fn service_with_quota(r: &RateLimitResponse) -> Option<String> {
    let field = |s: &envoy_types::pb::google::protobuf::Struct, k: &str| s.fields.get(k).cloned();
    let meta = r.dynamic_metadata.as_ref()?;
    let Some(Kind::StructValue(m)) = field(meta, "metadata")?.kind else {
        return None;
    };
    let Some(Kind::StructValue(s)) = field(&m, "service_with_quota")?.kind else {
        return None;
    };
    match field(&s, "name")?.kind {
        Some(Kind::StringValue(name)) => Some(name),
        _ => None,
    }
}

async fn sequences(rig: &Rig) {
    // token-quota.sh: a check (hits 0) on the request, a debit of 1 when the stream is done; 2
    // per day admits 3: the third check finds the counter at exactly 2, which is not over.
    let check = || vec![d(&[("tokens", "t")], Some(0))];
    let debit = || vec![d(&[("tokens", "t")], Some(1))];
    for (n, left) in [(1, 2), (2, 1), (3, 0)] {
        assert_eq!(
            answer(&ask(rig, check()).await),
            (OK, vec![(OK, left)]),
            "check {n}"
        );
        ask(rig, debit()).await;
    }
    assert_eq!(
        answer(&ask(rig, check()).await),
        (OVER, vec![(OVER, 0)]),
        "check 4"
    );

    // multiservice-tokenquota.sh: both services checked (quota mode, hits 0); the answer's
    // metadata names the service with quota; the debit goes to that service. Requests 1-5 are
    // served (two by service_1, three by service_2), the 6th is refused.
    let services = || {
        vec![
            d(&[("service", "service_1")], Some(0)),
            d(&[("service", "service_2")], Some(0)),
        ]
    };
    for (n, want) in [
        (1, "service_1"),
        (2, "service_1"),
        (3, "service_2"),
        (4, "service_2"),
        (5, "service_2"),
    ] {
        let r = ask(rig, services()).await;
        assert_eq!(r.overall_code, OK as i32, "request {n}: {r:?}");
        assert_eq!(service_with_quota(&r).as_deref(), Some(want), "request {n}");
        ask(rig, vec![d(&[("service", want)], Some(1))]).await;
    }
    let r = ask(rig, services()).await;
    assert_eq!(answer(&r), (OVER, vec![(OVER, 0), (OVER, 0)]), "request 6");
}

async fn points(rig: &Rig) {
    // A refused request's other descriptors are counted: the nested limit (2) refuses the
    // third request, and to_number (3) counts it anyway, so the fourth finds it over.
    let marketing = || d(&[("message_type", "marketing"), ("to_number", "206")], None);
    let number = || d(&[("to_number", "206")], None);
    assert_eq!(
        answer(&ask(rig, vec![marketing(), number()]).await),
        (OK, vec![(OK, 1), (OK, 2)])
    );
    assert_eq!(
        answer(&ask(rig, vec![marketing(), number()]).await),
        (OK, vec![(OK, 0), (OK, 1)])
    );
    assert_eq!(
        answer(&ask(rig, vec![marketing(), number()]).await),
        (OVER, vec![(OVER, 0), (OK, 0)])
    );
    assert_eq!(
        answer(&ask(rig, vec![number()]).await),
        (OVER, vec![(OVER, 0)])
    );

    // An oversized debit takes the counter past the limit: 8 of 10, then 5 is over, and after it
    // even a check without debit is over (the counter is past 10, not at it).
    let budget = |hits| vec![d(&[("budget", "b")], Some(hits))];
    assert_eq!(answer(&ask(rig, budget(8)).await), (OK, vec![(OK, 2)]));
    assert_eq!(answer(&ask(rig, budget(5)).await), (OVER, vec![(OVER, 0)]));
    assert_eq!(answer(&ask(rig, budget(0)).await), (OVER, vec![(OVER, 0)]));
    // A debit far larger than the limit is over too, and no panic or wrap.
    assert_eq!(answer(&ask(rig, budget(1_000_000_000)).await).0, OVER);

    // A limit of 0: a check without debit passes (nothing counted is over 0), a hit is over.
    assert_eq!(
        answer(&ask(rig, vec![d(&[("blocked", "x")], Some(0))]).await),
        (OK, vec![(OK, 0)])
    );
    assert_eq!(
        answer(&ask(rig, vec![d(&[("blocked", "x")], None)]).await),
        (OVER, vec![(OVER, 0)])
    );

    // A descriptor's own limit is used: 2 per day on entries no file limit matches.
    let own = || RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: 4, // DAY
        }),
        ..d(&[("anything", "a")], None)
    };
    let r = ask(rig, vec![own()]).await;
    assert_eq!(answer(&r), (OK, vec![(OK, 1)]));
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(2)
    );
    // The peer's metadata names the override on its descriptor.
    let meta = format!("{:?}", r.dynamic_metadata);
    assert!(meta.contains("requests_per_unit:2 unit:DAY"), "{meta}");
    assert_eq!(answer(&ask(rig, vec![own()]).await), (OK, vec![(OK, 0)]));
    assert_eq!(
        answer(&ask(rig, vec![own()]).await),
        (OVER, vec![(OVER, 0)])
    );
    // An override with no unit is refused, naming the field.
    let mut rls = rig.client.clone();
    let bad = RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: 0,
        }),
        ..d(&[("anything", "a")], None)
    };
    let e = rls
        .should_rate_limit(RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![bad],
            hits_addend: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().starts_with("descriptors[0].limit.unit"),
        "{}",
        e.message()
    );

    // A domain in no file is OK, every descriptor without a limit.
    let r = ask_in(
        rig,
        "nowhere",
        vec![d(&[("a", "1")], None), d(&[("b", "2")], None)],
    )
    .await;
    assert_eq!(answer(&r), (OK, vec![(OK, 0), (OK, 0)]));
    assert!(r.statuses.iter().all(|s| s.current_limit.is_none()));
    // Issue 40: no longer silent; counted by domain (the log line: ratelimit_http.rs).
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains(r#"sluice_rls_unknown_domain_total{domain="nowhere"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_answers_on_memory() {
    let rig = start(StoreChoice::Memory, "memory").await;
    sequences(&rig).await;
    points(&rig).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_answers_on_redis() {
    let server = RedisServer::start();
    let rig = start(redis(&server.url()), "redis").await;
    sequences(&rig).await;
    points(&rig).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_answers_on_a_redis_cluster() {
    let redis_cluster = RedisCluster::start();
    let rig = start(cluster(redis_cluster.urls()), "cluster").await;
    sequences(&rig).await;
    points(&rig).await;
}

/// The same sequences under sluice's semantics, with the answers docs/rls.md ("Whose
/// semantics") documents: counters stop at the limit, so each service serves exactly its limit.
async fn strict_sequences(rig: &Rig, domain: &str) {
    let check = || vec![d(&[("tokens", "t")], Some(0))];
    let debit = || vec![d(&[("tokens", "t")], Some(1))];
    for (n, left) in [(1, 2), (2, 1)] {
        assert_eq!(
            answer(&ask_in(rig, domain, check()).await),
            (OK, vec![(OK, left)]),
            "check {n}"
        );
        ask_in(rig, domain, debit()).await;
    }
    // At exactly the limit nothing is left: over (the peer passes a third).
    assert_eq!(
        answer(&ask_in(rig, domain, check()).await),
        (OVER, vec![(OVER, 0)]),
        "check 3"
    );

    let services = || {
        vec![
            d(&[("service", "service_1")], Some(0)),
            d(&[("service", "service_2")], Some(0)),
        ]
    };
    for (n, want) in [(1, "service_1"), (2, "service_2"), (3, "service_2")] {
        let r = ask_in(rig, domain, services()).await;
        assert_eq!(r.overall_code, OK as i32, "request {n}: {r:?}");
        assert_eq!(service_with_quota(&r).as_deref(), Some(want), "request {n}");
        ask_in(rig, domain, vec![d(&[("service", want)], Some(1))]).await;
    }
    assert_eq!(
        answer(&ask_in(rig, domain, services()).await).0,
        OVER,
        "request 4"
    );

    // A refused request debits none of its descriptors: to_number keeps its third unit.
    let marketing = || d(&[("message_type", "marketing"), ("to_number", "206")], None);
    let number = || d(&[("to_number", "206")], None);
    for _ in 0..2 {
        assert_eq!(
            answer(&ask_in(rig, domain, vec![marketing(), number()]).await).0,
            OK
        );
    }
    assert_eq!(
        answer(&ask_in(rig, domain, vec![marketing(), number()]).await).0,
        OVER
    );
    assert_eq!(
        answer(&ask_in(rig, domain, vec![number()]).await),
        (OK, vec![(OK, 0)])
    );

    // A lone oversized debit takes what is left: the counter stops at 10.
    let budget = |hits| vec![d(&[("budget", "b")], Some(hits))];
    assert_eq!(
        answer(&ask_in(rig, domain, budget(8)).await),
        (OK, vec![(OK, 2)])
    );
    assert_eq!(
        answer(&ask_in(rig, domain, budget(5)).await),
        (OVER, vec![(OVER, 0)])
    );
    assert_eq!(
        answer(&ask_in(rig, domain, budget(0)).await),
        (OVER, vec![(OVER, 0)])
    );
}

/// A configuration whose file says `sluice_semantics: sluice` for its domain, beside one that
/// does not (the peer's, the default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_semantics_by_name_in_a_file_and_point_by_point() {
    let dir = std::env::temp_dir().join(format!("sluice-it-rlp-named-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let strict = CONFIG.replace("domain: rl\n", "domain: strict\nsluice_semantics: sluice\n");
    std::fs::write(dir.join("strict.yaml"), strict).unwrap();
    std::fs::write(dir.join("peer.yaml"), CONFIG).unwrap();
    let mut config = Config::new(StoreChoice::Memory, TOKEN);
    config.ratelimit_config = Some(dir.clone());
    let rig = Rig::start_with(config).await;
    strict_sequences(&rig, "strict").await;
    sequences(&rig).await;
    // The sluice filter's own domain (its `grpc` callouts) is sluice's rules even under the
    // peer's semantics: never the OK of an unknown domain.
    put_rule_a(&rig).await;
    over_soon(&rig, sluice_core::descriptor::FILTER_DOMAIN).await;

    // Point by point from the setting: overrides refused, unknown domains to sluice's rules.
    let mut config = Config::new(StoreChoice::Memory, TOKEN);
    config.ratelimit_config = Some(dir.clone());
    config.ratelimit_semantics = sluice_backend::ratelimit::semantics::Semantics::parse(
        "refuse_limit_overrides,own_rules_for_unknown_domains",
    )
    .unwrap();
    let rig = Rig::start_with(config).await;
    let own = RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: 4,
        }),
        ..d(&[("tokens", "a")], None)
    };
    let mut rls = rig.client.clone();
    let e = rls
        .should_rate_limit(RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![own],
            hits_addend: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().starts_with("descriptors[0].limit"),
        "{}",
        e.message()
    );
    // A domain in no file goes to sluice's rules: its first entry names the action `a`, 1 per
    // hour, so a request is soon over (the peer would answer OK to every one).
    put_rule_a(&rig).await;
    over_soon(&rig, "nowhere").await;
    // Still the peer's counting on the domain: the token quota admits 3.
    sequences(&rig).await;
    // And the strict file keeps its own.
    strict_sequences(&rig, "strict").await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Puts the sluice rule `a`: 1 per hour.
async fn put_rule_a(rig: &Rig) {
    let put = rig
        .http
        .put(format!("{}/v1/rules/a", rig.admin))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"action": "a", "algorithm": "token_bucket", "capacity": 1, "rate": {"count": 1, "period": "1h"}}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{put:?}");
}

/// A descriptor naming the action `a` in `domain` is over within the rules' refresh: the domain
/// is answered by sluice's rules (the peer's unknown domain would be OK every time).
async fn over_soon(rig: &Rig, domain: &str) {
    crate::harness::eventually(
        std::time::Duration::from_secs(5),
        "the rule in force",
        || async {
            let r = ask_in(rig, domain, vec![d(&[("a", "1")], None)]).await;
            (r.overall_code == OVER as i32).then_some(())
        },
    )
    .await;
}

/// The peer's users' sizes on Redis: 5,000 descriptors, each with a nested one (10,000 rules),
/// start at the default store timeout (their rules published, then read back a page at a time,
/// never one long script) and answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_rules_start_and_answer_on_redis() {
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("sluice-it-rlp-10k-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut yaml = String::from("domain: big\ndescriptors:\n");
    for i in 0..5_000 {
        yaml.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: day, requests_per_unit: 2}}\n    descriptors:\n      - key: n\n        rate_limit: {{unit: day, requests_per_unit: 1}}\n"
        ));
    }
    std::fs::write(dir.join("big.yaml"), yaml).unwrap();
    let StoreChoice::Redis(mut store) = redis(&server.url()) else {
        unreachable!("a Redis choice")
    };
    store.timeout = std::time::Duration::from_millis(100);
    let mut config = Config::new(StoreChoice::Redis(store), TOKEN);
    config.ratelimit_config = Some(dir.clone());
    let rig = Rig::start_with(config).await;
    let rules: serde_json::Value = rig
        .http
        .get(format!("{}/v1/rules", rig.admin))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        rules["rules"].as_array().map(Vec::len),
        Some(10_000),
        "all published and read back"
    );
    let nested = || vec![d(&[("k4999", "a"), ("n", "b")], None)];
    assert_eq!(
        answer(&ask_in(&rig, "big", nested()).await),
        (OK, vec![(OK, 0)])
    );
    assert_eq!(
        answer(&ask_in(&rig, "big", nested()).await),
        (OVER, vec![(OVER, 0)])
    );
    let _ = std::fs::remove_dir_all(&dir);
}
