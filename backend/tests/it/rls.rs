//! Envoy's rate limit service (gRPC RLS v3) against an in-process sluice on port-0 listeners,
//! with envoy-types' own tonic client: statuses, headers and metadata per descriptor; several
//! descriptors all or nothing; unknown actions and shadow rules answer OK; rule changes apply; a
//! stopped redis-server is a quick UNAVAILABLE; bad input is INVALID_ARGUMENT naming the field.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{value::Kind, UInt64Value, Value as PbValue};
use serde_json::{json, Value};
use sluice_backend::StoreChoice;
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{self, eventually, TOKEN};
use crate::support;

/// sluice with its rate limit service, and envoy-types' client to it.
type Rig = GrpcRig<RateLimitServiceClient<Channel>>;

impl Rig {
    async fn ask(&self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        let mut rls = self.client.clone();
        rls.should_rate_limit(request).await.map(|r| r.into_inner())
    }

    async fn ok(&self, request: RateLimitRequest) -> RateLimitResponse {
        self.ask(request).await.unwrap()
    }
}

/// A descriptor of `entries` (also for ratelimit_config's tests).
pub(crate) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

/// The dynamic metadata `sluice` list as JSON.
fn metadata(r: &RateLimitResponse) -> Vec<Value> {
    fn json_of(v: &PbValue) -> Value {
        match &v.kind {
            None | Some(Kind::NullValue(_)) => Value::Null,
            Some(Kind::BoolValue(b)) => json!(b),
            Some(Kind::NumberValue(n)) => json!(n),
            Some(Kind::StringValue(s)) => json!(s),
            Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(json_of).collect()),
            Some(Kind::StructValue(s)) => Value::Object(
                s.fields
                    .iter()
                    .map(|(k, v)| (k.clone(), json_of(v)))
                    .collect(),
            ),
        }
    }
    let s = r.dynamic_metadata.as_ref().expect("dynamic metadata");
    match json_of(s.fields.get("sluice").expect("sluice key")) {
        Value::Array(a) => a,
        other => panic!("not a list: {other}"),
    }
}

fn invalid_field(result: Result<RateLimitResponse, tonic::Status>, field: &str) {
    let status = result.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().starts_with(&format!("{field}: ")),
        "names {field}: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_capacity_then_over_limit_with_statuses_headers_and_metadata() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(
        json!({"action": "user", "algorithm": "fixed_window", "capacity": 3, "window": "60s"}),
    )
    .await;
    let ask = || request(vec![descriptor(&[("user", "alice")])]);
    for left in [2u32, 1, 0] {
        let r = rig.ok(ask()).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        let s = &r.statuses[0];
        assert_eq!(s.code, Code::Ok as i32);
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("user", 3, Unit::Minute as i32)
        );
        assert_eq!(s.limit_remaining, left);
        let reset = s.duration_until_reset.unwrap();
        // A clock-aligned window: in its last second the whole seconds are 0, the nanos are not.
        let reset_ns = i128::from(reset.seconds) * 1_000_000_000 + i128::from(reset.nanos);
        assert!((1..=60_000_000_000).contains(&reset_ns), "{reset:?}");
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"user\";q=3;w=60"));
        assert_eq!(
            header(&r, "ratelimit"),
            Some(
                format!(
                    "\"user\";r={left};t={}",
                    reset.seconds + i64::from(reset.nanos > 0)
                )
                .as_str()
            )
        );
        assert_eq!(header(&r, "retry-after"), None);
        let m = metadata(&r);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["allowed"], json!(true));
        assert_eq!(m[0]["capacity"], json!(3.0));
        assert_eq!(m[0]["window_ms"], json!(60_000.0));
        assert_eq!(m[0]["retry_after_ms"], Value::Null);
    }
    let r = rig.ok(ask()).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let m = metadata(&r);
    assert_eq!(m[0]["allowed"], json!(false));
    let retry_ms = m[0]["retry_after_ms"].as_f64().unwrap();
    assert!(retry_ms > 0.0 && retry_ms <= 60_000.0, "{retry_ms}");
    assert_eq!(retry, (retry_ms as u64).div_ceil(1000).max(1));
    // The same bucket as the HTTP decision API's.
    let http = rig
        .http
        .post(format!("{}/v1/throttle", rig.decision))
        .json(&json!({"action": "user", "key": "alice", "quantity": 0}))
        .send()
        .await
        .unwrap();
    let body: Value = http.json().await.unwrap();
    assert_eq!(body["remaining"], json!(0), "{body}");
    // Counted as the HTTP path counts.
    let metrics = rig.metrics().await;
    assert!(
        metrics.contains("action=\"user\"") && metrics.contains("outcome=\"denied\""),
        "{metrics}"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_descriptors_one_over_is_over_limit_and_consumes_nothing() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(harness::long_rule("user", "gcra", 5)).await;
    rig.put_rule(harness::long_rule("remote_address", "sliding_log", 1))
        .await;
    let both = || {
        request(vec![
            descriptor(&[("user", "alice")]),
            descriptor(&[("remote_address", "10.0.0.7")]),
        ])
    };
    let r = rig.ok(both()).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (4, 0)
    );
    assert_eq!(
        header(&r, "ratelimit-policy").unwrap(),
        "\"user\";q=5;w=18000, \"remote_address\";q=1;w=604800"
    );
    for _ in 0..3 {
        let r = rig.ok(both()).await;
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
        assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
        assert_eq!(r.statuses[0].limit_remaining, 4, "alice's quota untouched");
        assert!(header(&r, "retry-after").is_some());
        let m = metadata(&r);
        assert_eq!(
            (m[0]["allowed"].clone(), m[1]["allowed"].clone()),
            (json!(true), json!(false))
        );
    }
    // Alice alone still has her 4.
    for left in [3u32, 2, 1, 0] {
        let r = rig
            .ok(request(vec![descriptor(&[("user", "alice")])]))
            .await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, left);
    }
    let r = rig
        .ok(request(vec![descriptor(&[("user", "alice")])]))
        .await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_actions_answer_ok_and_are_counted() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(harness::long_rule("user", "token_bucket", 1))
        .await;
    let r = rig
        .ok(request(vec![
            descriptor(&[("generic_key", "nobody"), ("user", "x")]),
            descriptor(&[("user", "bob")]),
        ]))
        .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(r.statuses[0].current_limit, None);
    assert_eq!(r.statuses[1].limit_remaining, 0);
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"user\";q=1;w=3600"));
    let m = metadata(&r);
    assert_eq!(m[0], Value::Null);
    assert_eq!(m[1]["allowed"], json!(true));
    let r = rig
        .ok(request(vec![descriptor(&[("generic_key", "nobody")])]))
        .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert!(r.response_headers_to_add.is_empty());
    let metrics = rig.metrics().await;
    let unknown = metrics
        .lines()
        .find(|l| l.starts_with("sluice_unknown_action_total "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(unknown.ends_with(" 2"), "{unknown}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_rules_answer_ok_with_a_header_and_rule_changes_apply() {
    let rig = Rig::start(StoreChoice::Memory).await;
    let mut rule = harness::long_rule("login", "leaky_bucket", 1);
    rule["mode"] = json!("shadow");
    rig.put_rule(rule.clone()).await;
    let ask = || {
        request(vec![descriptor(&[
            ("generic_key", "login"),
            ("user", "eve"),
        ])])
    };
    let r = rig.ok(ask()).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(header(&r, "x-sluice-shadow"), None);
    for _ in 0..2 {
        let r = rig.ok(ask()).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
        assert_eq!(header(&r, "x-sluice-shadow"), Some("would-deny"));
        assert_eq!(header(&r, "retry-after"), None);
        assert_eq!(metadata(&r)[0]["would_deny"], json!(true));
    }
    // Enforced through the admin API: the next call is refused.
    rule["mode"] = json!("enforce");
    rig.put_rule(rule.clone()).await;
    eventually(
        Duration::from_secs(1),
        "the enforced rule applies",
        || async {
            let r = rig.ok(ask()).await;
            (r.overall_code == Code::OverLimit as i32).then_some(())
        },
    )
    .await;
    // A larger capacity lets eve through again.
    rig.put_rule(harness::long_rule("login", "leaky_bucket", 10))
        .await;
    eventually(
        Duration::from_secs(1),
        "the larger rule applies",
        || async {
            let r = rig.ok(ask()).await;
            (r.overall_code == Code::Ok as i32).then_some(())
        },
    )
    .await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_is_a_quick_unavailable() {
    let mut redis = support::RedisServer::start();
    let rig = Rig::start(harness::redis(&redis.url())).await;
    rig.put_rule(harness::long_rule("user", "gcra", 5)).await;
    let ask = || request(vec![descriptor(&[("user", "alice")])]);
    assert_eq!(rig.ok(ask()).await.overall_code, Code::Ok as i32);
    redis.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let status = rig.ask(ask()).await.expect_err("no store, no answer");
        let took = started.elapsed();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(
            ["store_unavailable", "store_timeout", "overloaded"]
                .iter()
                .any(|c| status.message().starts_with(c)),
            "{status:?}"
        );
        // The harness's Redis timeout is 500 ms.
        assert!(took < Duration::from_secs(2), "took {took:?}");
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument_naming_the_field() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(harness::long_rule("user", "fixed_window", 2))
        .await;
    let mut r = request(vec![descriptor(&[("user", "a")])]);
    r.domain.clear();
    invalid_field(rig.ask(r).await, "domain");
    invalid_field(rig.ask(request(vec![])).await, "descriptors");
    invalid_field(
        rig.ask(request(vec![descriptor(&[("user", "a")]), descriptor(&[])]))
            .await,
        "descriptors[1].entries",
    );
    let huge = "x".repeat(10 * 1024);
    invalid_field(
        rig.ask(request(vec![descriptor(&[("generic_key", &huge)])]))
            .await,
        "descriptors[0].entries[0].value",
    );
    invalid_field(
        rig.ask(request(vec![descriptor(&[(&huge, "a")])])).await,
        "descriptors[0].entries[0].key",
    );
    let mut d = descriptor(&[("user", "a")]);
    d.hits_addend = Some(UInt64Value { value: 1 << 40 });
    invalid_field(
        rig.ask(request(vec![d])).await,
        "descriptors[0].hits_addend",
    );
    let mut r = request(vec![descriptor(&[("user", "a")])]);
    r.hits_addend = u32::MAX;
    invalid_field(rig.ask(r).await, "hits_addend");
    // A 10 KB subject is what a client sends, not a mistake: it is metered, exactly capacity.
    let ask = || request(vec![descriptor(&[("user", &huge)])]);
    assert_eq!(rig.ok(ask()).await.overall_code, Code::Ok as i32);
    assert_eq!(rig.ok(ask()).await.overall_code, Code::Ok as i32);
    assert_eq!(rig.ok(ask()).await.overall_code, Code::OverLimit as i32);
    // Beyond the message bound: refused by the decoder, quickly, and the service still answers.
    let started = Instant::now();
    let too_big = "y".repeat(300 * 1024);
    let status = rig
        .ask(request(vec![descriptor(&[("user", &too_big)])]))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        rig.ok(request(vec![descriptor(&[("user", "b")])]))
            .await
            .overall_code,
        Code::Ok as i32
    );
    rig.stop().await;
}

/// The binary: the gRPC listener (`SLUICE_GRPC_LISTEN`) serves the service (rules from
/// `--rules`), and SIGTERM stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_rls_on_its_flag_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("sluice-rls-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("rules.yaml");
    std::fs::write(
        &rules,
        "rules:\n- {action: user, algorithm: fixed_window, capacity: 1, window: 60s}\n",
    )
    .unwrap();
    let ports = [
        support::free_port(),
        support::free_port(),
        support::free_port(),
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--decision-listen", &format!("127.0.0.1:{}", ports[0])])
        .args(["--admin-listen", &format!("127.0.0.1:{}", ports[1])])
        .args(["--admin-token", TOKEN])
        .args(["--rules", rules.to_str().unwrap()])
        .env("SLUICE_GRPC_LISTEN", format!("127.0.0.1:{}", ports[2]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{}", ports[2]);
    let mut rls = eventually(Duration::from_secs(10), "the RLS listener accepts", || {
        let url = url.clone();
        async move { RateLimitServiceClient::connect(url).await.ok() }
    })
    .await;
    let ask = || request(vec![descriptor(&[("user", "alice")])]);
    let first = rls.should_rate_limit(ask()).await.unwrap().into_inner();
    let second = rls.should_rate_limit(ask()).await.unwrap().into_inner();
    assert_eq!(
        (first.overall_code, second.overall_code),
        (Code::Ok as i32, Code::OverLimit as i32)
    );
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "sluice did not exit on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(rls);
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three descriptors (per user 40, per IP 60, global 30) from 64 concurrent clients, 8 requests
/// each: decided all or nothing in one atomic store step, so exactly 30 pass and afterwards the
/// limits keep exactly 10, 60 − 30 and 0 (no denied request consumed anything). The earlier
/// peek-then-decide path let a request racing between peek and decision consume its first
/// descriptors and then be denied.
async fn three_descriptors_under_64_clients(rig: &Rig) {
    rig.put_rule(harness::long_rule("cu", "token_bucket", 40))
        .await;
    rig.put_rule(harness::long_rule("ci", "sliding_window", 60))
        .await;
    rig.put_rule(harness::long_rule("cg", "fixed_window", 30))
        .await;
    let three = || {
        request(vec![
            descriptor(&[("cu", "alice")]),
            descriptor(&[("ci", "10.0.0.1")]),
            descriptor(&[("cg", "all")]),
        ])
    };
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let mut rls = rig.client.clone();
            let request = three();
            tokio::spawn(async move {
                let mut passed = 0;
                for _ in 0..8 {
                    let r = rls
                        .should_rate_limit(request.clone())
                        .await
                        .unwrap()
                        .into_inner();
                    if r.overall_code == Code::Ok as i32 {
                        passed += 1;
                    }
                }
                passed
            })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        passed += task.await.unwrap();
    }
    assert_eq!(passed, 30);
    let left = |action: &'static str, key: &'static str| async move {
        // A peek: quantity 0 through the HTTP API (RLS always asks for at least 1).
        let r = rig
            .http
            .post(format!("{}/v1/throttle", rig.decision))
            .json(&json!({"action": action, "key": key, "quantity": 0}))
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["remaining"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(left("cu", "alice").await, 10);
    assert_eq!(left("ci", "10.0.0.1").await, 30);
    assert_eq!(left("cg", "all").await, 0);
    // Denied at the third: the first two answer their unchanged standing.
    let r = rig.ok(three()).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(
        (
            r.statuses[0].limit_remaining,
            r.statuses[1].limit_remaining,
            r.statuses[2].code
        ),
        (10, 30, Code::OverLimit as i32)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_descriptors_are_all_or_nothing_under_64_clients_on_memory() {
    let rig = Rig::start(StoreChoice::Memory).await;
    three_descriptors_under_64_clients(&rig).await;
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_descriptors_are_all_or_nothing_under_64_clients_on_redis() {
    let redis = support::RedisServer::start();
    let rig = Rig::start(harness::redis(&redis.url())).await;
    three_descriptors_under_64_clients(&rig).await;
    rig.stop().await;
}

/// A request-time descriptor with `sluice_reservation` holds its reservation in flight (the key
/// view's `budget`) until the stream-done descriptor of the same id commits it; the commit's
/// debit beyond the reservation shows as overshoot. The entry is not part of the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_with_its_id_is_in_flight_until_its_commit() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(
        json!({"action": "tokens", "algorithm": "fixed_window", "capacity": 100,
                        "window": "60s"}),
    )
    .await;
    let budget = || async { rig.key_view("alice").await["actions"][0]["budget"].clone() };
    let mut reserve = descriptor(&[("tokens", "alice"), ("sluice_reservation", "req-9")]);
    reserve.hits_addend = Some(UInt64Value { value: 70 });
    let r = rig.ok(request(vec![reserve])).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    let held = budget().await;
    assert_eq!(
        (
            held["reserved_in_flight"].as_u64(),
            held["reservations_in_flight"].as_u64()
        ),
        (Some(70), Some(1)),
        "{held}"
    );
    let mut commit = descriptor(&[
        ("tokens", "alice"),
        ("sluice_commit", "req-9"),
        ("sluice_reserved", "70"),
    ]);
    commit.hits_addend = Some(UInt64Value { value: 110 });
    rig.ok(request(vec![commit])).await;
    let done = budget().await;
    assert_eq!(
        (
            done["reserved_in_flight"].as_u64(),
            done["debited"].as_u64(),
            done["overshoot"].as_u64()
        ),
        (Some(0), Some(40), Some(10)),
        "{done}"
    );
    rig.stop().await;
}
