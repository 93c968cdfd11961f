//! `--ratelimit-config`: envoyproxy/ratelimit configuration files served on the rate limit
//! service (gRPC, in-process sluice): the peer's answers for its README's examples, the
//! token-quota pattern, quota mode, the reload within a second (and a bad edit refused, the last
//! good configuration kept), the rules owned by the file in the admin API and the audit trail,
//! and the start refused naming the field. Units are days, so no window edge falls inside a test
//! (except at midnight UTC).

use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{value::Kind, UInt64Value};
use serde_json::Value;
use sluice_backend::ratelimit::semantics::Semantics;
use sluice_backend::{Config, StoreChoice};
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{eventually, redis, Sluice, TOKEN};
use crate::support::RedisServer;

type Rig = GrpcRig<RateLimitServiceClient<Channel>>;

const CONFIG: &str = "\
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: tokens
    metadata: {plan: free}
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        rate_limit: {name: specific_limit, unit: day, requests_per_unit: 1}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        rate_limit: {replaces: [{name: specific_limit}], unit: day, requests_per_unit: 3}
";

/// A fresh directory holding `config.yaml`.
fn config_dir(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-it-rl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), text).unwrap();
    dir
}

/// Under sluice's semantics (`--ratelimit-semantics sluice`): the peer's are tested in
/// ratelimit_peer.rs.
async fn start(dir: &Path) -> Rig {
    let mut config = Config::new(StoreChoice::Memory, TOKEN);
    config.ratelimit_config = Some(dir.to_owned());
    config.ratelimit_semantics = Semantics::SLUICE;
    Rig::start_with(config).await
}

fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..crate::rls::descriptor(entries)
    }
}

impl Rig {
    /// `GET path` on the admin listener with the token, as JSON.
    async fn admin_json(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.admin))
            .bearer_auth(TOKEN);
        r.send().await.unwrap().json().await.unwrap()
    }

    async fn ask_configured(&self, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
        let mut rls = self.client.clone();
        let request = RateLimitRequest {
            domain: "messaging".into(),
            descriptors,
            hits_addend: 0,
        };
        rls.should_rate_limit(request).await.unwrap().into_inner()
    }

    /// The overall code and each status's code for descriptors given as entry lists.
    async fn codes(&self, descriptors: &[&[(&str, &str)]]) -> (Code, Vec<Code>) {
        let r = self
            .ask_configured(descriptors.iter().map(|e| descriptor(e, None)).collect())
            .await;
        codes(&r)
    }
}

fn codes(r: &RateLimitResponse) -> (Code, Vec<Code>) {
    let code = |c: i32| Code::try_from(c).unwrap();
    (
        code(r.overall_code),
        r.statuses.iter().map(|s| code(s.code)).collect(),
    )
}

use Code::{Ok as OK, OverLimit as OVER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_answers_for_its_readme_examples() {
    let dir = config_dir("answers", CONFIG);
    let rig = start(&dir).await;
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "206")];
    let number: &[(&str, &str)] = &[("to_number", "206")];
    // Example 2: both descriptors; the nested limit (2) refuses the third request, and the
    // refused request debits nothing of the other (sluice's all-or-nothing).
    let r = rig
        .ask_configured(vec![descriptor(marketing, None), descriptor(number, None)])
        .await;
    assert_eq!(codes(&r), (OK, vec![OK, OK]));
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (2, Unit::Day as i32));
    assert_eq!(r.statuses[0].limit_remaining, 1);
    assert_eq!(r.statuses[1].limit_remaining, 2);
    let reset = r.statuses[0].duration_until_reset.unwrap().seconds;
    assert!((1..=86_400).contains(&reset), "{reset}");
    assert_eq!(rig.codes(&[marketing, number]).await, (OK, vec![OK, OK]));
    assert_eq!(rig.codes(&[marketing, number]).await.0, OVER);
    assert_eq!(
        rig.codes(&[number]).await,
        (OK, vec![OK]),
        "the third to_number hit is left"
    );
    assert_eq!(rig.codes(&[number]).await, (OVER, vec![OVER]));
    // Example 3: requests_per_unit 0 is always over; other addresses have no limit here.
    assert_eq!(
        rig.codes(&[&[("remote_address", "50.0.0.5")]]).await,
        (OVER, vec![OVER])
    );
    assert_eq!(
        rig.codes(&[&[("remote_address", "50.0.0.1")]]).await,
        (OK, vec![OK])
    );
    // Example 5: unlimited answers OK with limit_remaining 2^32-1 and no current_limit.
    let r = rig
        .ask_configured(vec![descriptor(&[("ldap", "x")], None)])
        .await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    assert!(r.statuses[0].current_limit.is_none());
    // Example 6: shadow mode never refuses.
    for _ in 0..3 {
        assert_eq!(rig.codes(&[&[("shadow", "s")]]).await, (OK, vec![OK]));
    }
    // Example 7: with both, only the replacing limit (3) applies and the replaced one (1) is
    // not debited.
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bk")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bk")];
    for _ in 0..3 {
        assert_eq!(rig.codes(&[one, two]).await, (OK, vec![OK, OK]));
    }
    assert_eq!(rig.codes(&[one, two]).await.0, OVER);
    assert_eq!(
        rig.codes(&[one]).await,
        (OK, vec![OK]),
        "the replaced limit is untouched"
    );
    assert_eq!(rig.codes(&[one]).await, (OVER, vec![OVER]));
    // Quota mode: each descriptor over on its own, the request over only when all are.
    let a: &[(&str, &str)] = &[("quota_a", "u")];
    let b: &[(&str, &str)] = &[("quota_b", "u")];
    assert_eq!(rig.codes(&[a, b]).await, (OK, vec![OK, OK]));
    assert_eq!(rig.codes(&[a, b]).await, (OVER, vec![OVER, OVER]));
    let fresh: &[(&str, &str)] = &[("quota_b", "other")];
    assert_eq!(rig.codes(&[a, fresh]).await, (OK, vec![OVER, OK]));
    // An unknown domain answers through sluice's own rules (none here: OK).
    let mut rls = rig.client.clone();
    let other = RateLimitRequest {
        domain: "elsewhere".into(),
        descriptors: vec![descriptor(&[("to_number", "206")], None)],
        hits_addend: 0,
    };
    let r = rls.should_rate_limit(other).await.unwrap().into_inner();
    assert_eq!(codes(&r), (OK, vec![OK]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_quota_pattern_checks_then_debits_what_was_used() {
    let dir = config_dir("tokens", CONFIG);
    let rig = start(&dir).await;
    let tokens: &[(&str, &str)] = &[("tokens", "alice")];
    // The request: hits_addend 0 checks without debiting, and the descriptor's metadata comes
    // back in the dynamic metadata.
    let r = rig.ask_configured(vec![descriptor(tokens, Some(0))]).await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    assert_eq!(r.statuses[0].limit_remaining, 10);
    let md = r.dynamic_metadata.clone().unwrap();
    assert_eq!(
        md.fields.get("domain").and_then(|v| v.kind.clone()),
        Some(Kind::StringValue("messaging".into()))
    );
    let plan = md.fields.get("metadata").and_then(|v| match &v.kind {
        Some(Kind::StructValue(s)) => s.fields.get("plan").and_then(|p| p.kind.clone()),
        _ => None,
    });
    assert_eq!(plan, Some(Kind::StringValue("free".into())));
    // When the stream is done: debit the tokens used.
    assert_eq!(
        codes(&rig.ask_configured(vec![descriptor(tokens, Some(7))]).await).0,
        OK
    );
    let r = rig.ask_configured(vec![descriptor(tokens, Some(0))]).await;
    assert_eq!((codes(&r).0, r.statuses[0].limit_remaining), (OK, 3));
    // A response larger than what is left takes what is left; the next check refuses.
    assert_eq!(
        codes(&rig.ask_configured(vec![descriptor(tokens, Some(5))]).await).0,
        OVER
    );
    let r = rig.ask_configured(vec![descriptor(tokens, Some(0))]).await;
    assert_eq!(codes(&r), (OVER, vec![OVER]));
    // Another user is untouched.
    let r = rig
        .ask_configured(vec![descriptor(&[("tokens", "bob")], Some(0))])
        .await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_applies_within_a_second_and_a_bad_edit_keeps_the_last_good() {
    let dir = config_dir("reload", "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 1}\n  - key: gone\n    rate_limit: {unit: day, requests_per_unit: 1}\n");
    let rig = start(&dir).await;
    let number: &[(&str, &str)] = &[("to_number", "1")];
    assert_eq!(rig.codes(&[number]).await.0, OK);
    assert_eq!(rig.codes(&[number]).await.0, OVER);
    // The file's rule in the admin API, owned by the file and refused to edits.
    let rules = rig.admin_json("/v1/rules").await;
    let rule = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "rl:messaging.to_number")
        .cloned()
        .unwrap_or_else(|| panic!("no owned rule in {rules}"));
    assert_eq!(rule["algorithm"], "fixed_window");
    assert!(rule["description"]
        .as_str()
        .unwrap()
        .starts_with(&format!("from ratelimit config {}", dir.display())));
    let put = rig
        .http
        .put(format!("{}/v1/rules/rl:messaging.to_number", rig.admin))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"algorithm": "gcra", "capacity": 5, "rate": {"count": 1, "period": "1s"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 400);
    let body: Value = put.json().await.unwrap();
    assert!(body.to_string().contains("config.yaml"), "{body}");
    // Raise the limit: in force within a second, with the version bumped and audited.
    let changed = std::time::Instant::now();
    std::fs::write(dir.join("config.yaml"), "domain: messaging\ndescriptors:\n  - key: to_number\n    algorithm: sliding_window\n    rate_limit: {unit: day, requests_per_unit: 5}\n").unwrap();
    eventually(Duration::from_secs(2), "the raised limit", || async {
        (rig.codes(&[&[("to_number", "2")]]).await.1[0] == OK && rig.codes(&[number]).await.0 == OK)
            .then_some(())
    })
    .await;
    assert!(
        changed.elapsed() < Duration::from_secs(1),
        "{:?}",
        changed.elapsed()
    );
    let audit = rig.admin_json("/v1/audit").await;
    // The changed rule put, the descriptor the file no longer has deleted, both audited.
    let entries = audit["entries"].as_array().unwrap();
    let by = |kind: &str, action: &str| {
        entries
            .iter()
            .find(|e| e["kind"] == kind && e["action"] == action)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} of {action} in {audit}"))
    };
    let put = by("rule_put", "rl:messaging.to_number");
    assert_eq!(put["who"], "ratelimit-config");
    assert_eq!(put["after"]["algorithm"], "sliding_window");
    assert_eq!(
        by("rule_delete", "rl:messaging.gone")["who"],
        "ratelimit-config"
    );
    let rules = rig.admin_json("/v1/rules").await;
    assert!(!rules.to_string().contains("rl:messaging.gone"), "{rules}");
    // A bad edit: refused, the last good configuration stays.
    std::fs::write(dir.join("config.yaml"), "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n").unwrap();
    let status = eventually(
        Duration::from_secs(2),
        "the refusal in GET /v1/ratelimit-config",
        || async {
            let body = rig.admin_json("/v1/ratelimit-config").await;
            (!body["refused"].as_array()?.is_empty()).then_some(body)
        },
    )
    .await;
    let refusal = status["refused"][0].as_str().unwrap();
    assert!(
        refusal.ends_with("config.yaml: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight' (second, minute, hour, day, week, month or year)"),
        "{status}"
    );
    let limit = &status["limits"][0];
    assert_eq!(limit["path"], "messaging.to_number", "{status}");
    assert_eq!(limit["action"], "rl:messaging.to_number");
    assert_eq!(
        (limit["unit"].as_str(), limit["requests_per_unit"].as_u64()),
        (Some("day"), Some(5))
    );
    for _ in 0..3 {
        assert_eq!(rig.codes(&[&[("to_number", "3")]]).await.0, OK);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_stops_the_start_naming_the_field() {
    let dir = config_dir("bad", "domain: messaging\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    let mut config = Config::new(StoreChoice::Memory, TOKEN);
    config.ratelimit_config = Some(dir.clone());
    let e = Sluice::start_err(config).await.to_string();
    assert!(
        e.contains(
            "config.yaml: descriptors[1].rate_limit.unit: invalid rate limit unit 'fortnight'"
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_redis_share_the_buckets_and_both_see_a_change() {
    let server = RedisServer::start();
    let dir = config_dir("replicas", "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 2}\n");
    let start_one = || {
        let mut config = Config::new(redis(&server.url()), TOKEN);
        config.ratelimit_config = Some(dir.clone());
        Rig::start_with(config)
    };
    let (a, b) = (start_one().await, start_one().await);
    let number: &[(&str, &str)] = &[("to_number", "1")];
    assert_eq!(a.codes(&[number]).await.0, OK);
    assert_eq!(b.codes(&[number]).await.0, OK);
    assert_eq!(
        a.codes(&[number]).await.0,
        OVER,
        "one bucket for both replicas"
    );
    assert_eq!(b.codes(&[number]).await.0, OVER);
    std::fs::write(
        dir.join("config.yaml"),
        "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 4}\n",
    )
    .unwrap();
    let attempt = std::sync::atomic::AtomicU32::new(0);
    for rig in [&a, &b] {
        eventually(
            Duration::from_secs(2),
            "the raised limit on each replica",
            || async {
                // A fresh number each attempt: three hits pass only under the raised limit.
                let n = attempt
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    .to_string();
                let fresh: &[(&str, &str)] = &[("to_number", &n)];
                for _ in 0..3 {
                    if rig.codes(&[fresh]).await.0 != OK {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_owned_limit_takes_per_key_overrides() {
    let dir = config_dir(
        "override",
        "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
    );
    let rig = start(&dir).await;
    let r = rig
        .http
        .put(format!(
            "{}/v1/rules/rl:messaging.to_number/overrides/vip",
            rig.admin
        ))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"algorithm": "fixed_window", "capacity": 3, "window": "1d"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    let vip: &[(&str, &str)] = &[("to_number", "vip")];
    let other: &[(&str, &str)] = &[("to_number", "other")];
    for _ in 0..3 {
        assert_eq!(rig.codes(&[vip]).await.0, OK);
    }
    assert_eq!(rig.codes(&[vip]).await.0, OVER);
    assert_eq!(rig.codes(&[other]).await.0, OK);
    assert_eq!(rig.codes(&[other]).await.0, OVER);
    let _ = std::fs::remove_dir_all(&dir);
}
