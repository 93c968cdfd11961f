//! The gRPC listener as a user meets it: on by default (`--grpc-listen`, 127.0.0.1:8082), `off`
//! starts none, the old name (`--rls-listen`, `SLUICE_RLS_LISTEN`) still works and warns, a taken
//! port stops the start naming the flag; a request on the wrong listener is answered so the
//! caller can read it (gRPC on the decision listener: UNIMPLEMENTED naming the gRPC listener;
//! HTTP on the gRPC listener: 421 wrong_listener naming the decision listener) and logged at most
//! once per 10 s; every 5xx cause is logged once per code (a Redis outage under many requests).

use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as RlsCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::{json, Value};
use sluice_backend::grpc::exchange::ExchangeCodec;
use sluice_backend::StoreChoice;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest, CALL_PATH};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Code;

use crate::grpc_rig::GrpcRig;
use crate::harness::{client, eventually};
use crate::support;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const TOKEN: &str = "grpc-listener-token-0123456789";
const RULES: &str =
    "rules:\n- {action: user, algorithm: fixed_window, capacity: 100, window: 60s}\n";

/// One exchange `Call` (`POST /v1/throttle` for action `user`) to `url` over HTTP/2, as the
/// filter's fallback sends it.
async fn exchange_call(url: &str) -> Result<ExchangeReply, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let body = serde_json::to_vec(&json!({"action": "user", "key": "k"})).unwrap();
    let request = ExchangeRequest {
        id: 7,
        path: "/v1/throttle".into(),
        body,
    };
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static(CALL_PATH),
        ExchangeCodec::<ExchangeRequest, ExchangeReply>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// One RLS `ShouldRateLimit` for action `user` to `url`.
async fn rls_call(url: &str) -> RlsCode {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let entry = |key: &str, value: &str| Entry {
        key: key.into(),
        value: value.into(),
    };
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![entry("action", "user"), entry("key", "k")],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let answer = RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    RlsCode::try_from(answer.overall_code).unwrap()
}

/// A gRPC request sent over HTTP/1.1, as Envoy's gRPC client sends it on a cluster without
/// HTTP/2 options: (status, content-type, grpc-status, grpc-message percent-decoded).
async fn grpc_over_http1(url: &str) -> (u16, String, String, String) {
    let r = client()
        .post(format!("{url}{CALL_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let message = percent_decode(&header("grpc-message"));
    (
        r.status().as_u16(),
        header("content-type"),
        header("grpc-status"),
        message,
    )
}

/// gRPC's percent-encoding of `grpc-message`, undone.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn metric_line(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_on_the_decision_listener_is_unimplemented_naming_the_grpc_listener() {
    let rig = GrpcRig::<tonic::transport::Channel>::start(StoreChoice::Memory).await;
    let grpc_addr = rig.grpc.trim_start_matches("http://").to_owned();
    let expected = format!(
        "sluice: this is the HTTP decision listener; gRPC (the filter's default grpc_stream protocol, and Envoy's RLS) is served on the gRPC listener, {grpc_addr} (--grpc-listen)"
    );

    // HTTP/2, as an Envoy cluster with HTTP/2 options (the filter's documented setup) sends it.
    let status = exchange_call(&rig.decision)
        .await
        .expect_err("the decision listener does not serve the exchange");
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert_eq!(status.message(), expected);

    // HTTP/1.1, as Envoy's gRPC client sends on a cluster without HTTP/2 options.
    let (code, content_type, grpc_status, message) = grpc_over_http1(&rig.decision).await;
    assert_eq!(code, 200);
    assert_eq!(content_type, "application/grpc");
    assert_eq!(grpc_status, "12");
    assert_eq!(message, expected);

    // Plain HTTP on the same listener is untouched.
    let (status, _) = rig
        .http_post(
            "/v1/throttle",
            br#"{"action": "nope", "key": "k"}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 404);

    let metrics = rig.metrics().await;
    assert_eq!(
        metric_line(
            &metrics,
            "sluice_wrong_listener_total{listener=\"decision\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_on_the_grpc_listener_is_421_wrong_listener_naming_the_decision_listener() {
    let rig = GrpcRig::<tonic::transport::Channel>::start(StoreChoice::Memory).await;
    let decision_addr = rig.decision.trim_start_matches("http://").to_owned();
    let r = rig
        .http
        .post(format!("{}/v1/throttle", rig.grpc))
        .json(&json!({"action": "user", "key": "k"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 421);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "wrong_listener", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "use the decision listener {decision_addr} (--decision-listen) or protocol grpc_stream"
        )),
        "{message}"
    );
    // gRPC on the same listener still works.
    rig.put_rule(
        json!({"action": "user", "algorithm": "fixed_window", "capacity": 5, "window": "60s"}),
    )
    .await;
    let reply = exchange_call(&rig.grpc)
        .await
        .expect("the exchange answers");
    assert_eq!((reply.id, reply.status), (7, 200));
    let metrics = rig.metrics().await;
    assert_eq!(
        metric_line(&metrics, "sluice_wrong_listener_total{listener=\"grpc\"}"),
        Some(1.0),
        "{metrics}"
    );
    rig.stop().await;
}

/// The `sluice` binary, its stderr captured.
struct Bin {
    child: Child,
    stderr: Arc<Mutex<String>>,
    decision: SocketAddr,
    admin: SocketAddr,
}

impl Bin {
    /// Starts the binary with the rules file, on free decision and admin ports, plus `args`
    /// and `env`.
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Bin {
        let dir = std::env::temp_dir().join(format!("sluice-grpc-listener-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = dir.join("rules.yaml");
        std::fs::write(&rules, RULES).unwrap();
        let free = || SocketAddr::from(([127, 0, 0, 1], support::free_port()));
        let (decision, admin) = (free(), free());
        let mut child = Command::new(BIN)
            .args(["--decision-listen", &decision.to_string()])
            .args(["--admin-listen", &admin.to_string()])
            .args(["--admin-token", TOKEN, "--rules", rules.to_str().unwrap()])
            .args(args)
            .env_remove("SLUICE_GRPC_LISTEN")
            .env_remove("SLUICE_RLS_LISTEN")
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = support::capture_stderr(&mut child);
        Bin {
            child,
            stderr,
            decision,
            admin,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Its stderr lines holding `needle`, once there are at least `least` of them (or a failed
    /// test after 5 s).
    async fn lines_with(&self, needle: &str, least: usize) -> Vec<String> {
        eventually(Duration::from_secs(5), needle, || {
            let stderr = self.stderr();
            async move {
                let lines: Vec<String> = stderr
                    .lines()
                    .filter(|l| l.contains(needle))
                    .map(str::to_owned)
                    .collect();
                (lines.len() >= least).then_some(lines)
            }
        })
        .await
    }

    /// Waits until the admin listener answers /readyz (`true`) or the process exits (`false`).
    async fn ready_or_exited(&mut self) -> bool {
        let http = client();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            if let Ok(r) = http
                .get(format!("http://{}/readyz", self.admin))
                .send()
                .await
            {
                if r.status().is_success() {
                    return true;
                }
            }
            assert!(
                Instant::now() < deadline,
                "neither ready nor exited:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    async fn ready(&mut self) {
        let ready = self.ready_or_exited().await;
        assert!(ready, "sluice exited:\n{}", self.stderr());
    }

    /// Waits for the process to exit with a failure; returns its stderr.
    fn failed(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(1), "{}", self.stderr());
                // The reader thread may still be draining the pipe.
                std::thread::sleep(Duration::from_millis(50));
                return self.stderr();
            }
            assert!(
                Instant::now() < deadline,
                "still running:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Set in the run of this test binary that [`with_no_flag_the_grpc_listener_serves_both_services_on_8082`]
/// starts inside a fresh network namespace.
const IN_FRESH_NETNS: &str = "SLUICE_TEST_IN_FRESH_NETNS";

/// Whether this machine lets a test make a fresh network namespace with its loopback up
/// (`unshare --net --map-root-user`: root, or unprivileged user namespaces; iproute2's `ip`).
fn fresh_netns_available() -> bool {
    Command::new("unshare")
        .args([
            "--net",
            "--map-root-user",
            "--",
            "ip",
            "link",
            "set",
            "lo",
            "up",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// With no flag, the gRPC listener is on at 127.0.0.1:8082 and serves both the exchange and RLS.
/// Tested for real, never passed by way of "8082 was taken" (the taken-port answer has its own
/// test below, on a port of its own): where a fresh network namespace can be made, this test
/// binary runs this one test again inside one, where nothing else holds 8082 whatever runs on this
/// machine; elsewhere it takes 8082 on the machine and fails, saying why, if something holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_flag_the_grpc_listener_serves_both_services_on_8082() {
    let inside = std::env::var_os(IN_FRESH_NETNS).is_some();
    if !inside && fresh_netns_available() {
        let name = "grpc_listener::with_no_flag_the_grpc_listener_serves_both_services_on_8082";
        let out = Command::new("unshare")
            .args(["--net", "--map-root-user", "--", "sh", "-c"])
            .arg("ip link set lo up && exec \"$@\"")
            .arg("sh")
            .arg(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads", "1"])
            .env(IN_FRESH_NETNS, "1")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        eprintln!("in a fresh network namespace:\n{stdout}{stderr}");
        assert!(out.status.success(), "{stdout}{stderr}");
        // Exactly this test ran in there (a filter matching nothing passes with 0 tests).
        assert!(
            stdout.contains("test result: ok. 1 passed"),
            "{stdout}{stderr}"
        );
        return;
    }
    if !inside {
        // No namespace: this machine's 8082 must be free, or nothing can be said about the default.
        if let Err(e) = StdListener::bind("127.0.0.1:8082") {
            panic!(
                "127.0.0.1:8082 is taken on this machine ({e}) and no network namespace can be made \
                 here (unshare --net --map-root-user): the default listener cannot be tested; free 8082"
            );
        }
    }
    let mut bin = Bin::spawn(&[], &[]);
    bin.ready().await;
    let url = "http://127.0.0.1:8082";
    let reply = exchange_call(url).await.expect("the exchange on 8082");
    assert_eq!((reply.id, reply.status), (7, 200));
    assert_eq!(rls_call(url).await, RlsCode::Ok);
    let stderr = bin.stderr();
    assert!(stderr.contains("gRPC listener listening: the sluice filter's decision exchange (sluice.v1.DecisionExchange, its default grpc_stream protocol) and Envoy's rate limit service"), "{stderr}");
    assert!(stderr.contains("127.0.0.1:8082"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_grpc_port_stops_the_start_naming_the_flag() {
    let taken = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut bin = Bin::spawn(&["--grpc-listen", &addr], &[]);
    let stderr = bin.failed();
    assert!(
        stderr.contains(&format!(
            "sluice: --grpc-listen {addr}: address in use; pass another address or off"
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_starts_no_grpc_listener_and_the_decision_listener_says_so() {
    let mut bin = Bin::spawn(&["--grpc-listen", "off"], &[]);
    bin.ready().await;
    let stderr = bin.stderr();
    assert!(
        stderr.contains("gRPC listener off (--grpc-listen off)"),
        "{stderr}"
    );
    assert!(!stderr.contains("gRPC listener listening"), "{stderr}");
    let status = exchange_call(&format!("http://{}", bin.decision))
        .await
        .expect_err("not served");
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(
        status
            .message()
            .contains("which is off on this backend (--grpc-listen off)"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_flag_and_variable_still_work_and_warn() {
    const OLD: &str = "--rls-listen (SLUICE_RLS_LISTEN) is the old name of --grpc-listen (SLUICE_GRPC_LISTEN); it still works, but use the new name";
    let port = support::free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let mut by_flag = Bin::spawn(&["--rls-listen", &addr], &[]);
    by_flag.ready().await;
    let reply = exchange_call(&format!("http://{addr}")).await.unwrap();
    assert_eq!(reply.status, 200);
    assert!(by_flag.stderr().contains(OLD), "{}", by_flag.stderr());
    drop(by_flag);

    let port = support::free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let mut by_env = Bin::spawn(&[], &[("SLUICE_RLS_LISTEN", &addr)]);
    by_env.ready().await;
    assert_eq!(rls_call(&format!("http://{addr}")).await, RlsCode::Ok);
    assert!(by_env.stderr().contains(OLD), "{}", by_env.stderr());
    drop(by_env);

    let mut both = Bin::spawn(
        &["--grpc-listen", "off"],
        &[("SLUICE_RLS_LISTEN", "127.0.0.1:9")],
    );
    let stderr = both.failed();
    assert!(stderr.contains("sluice: --grpc-listen (SLUICE_GRPC_LISTEN) is off but its old name --rls-listen (SLUICE_RLS_LISTEN) is 127.0.0.1:9; give only --grpc-listen"), "{stderr}");
}

/// Many requests on the wrong listener, both ways: one WARN line each way (the first), naming
/// the peer, the path and the listener to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_listener_lines_are_rate_limited() {
    let grpc = format!("127.0.0.1:{}", support::free_port());
    let mut bin = Bin::spawn(&["--grpc-listen", &grpc], &[]);
    bin.ready().await;
    let decision_url = format!("http://{}", bin.decision);
    for _ in 0..20 {
        let status = exchange_call(&decision_url).await.unwrap_err();
        assert_eq!(status.code(), Code::Unimplemented);
    }
    let http = client();
    for _ in 0..20 {
        let r = http
            .post(format!("http://{grpc}/v1/throttle"))
            .json(&json!({"action": "user", "key": "k"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 421);
    }
    let lines = bin.lines_with("wrong listener", 2).await;
    assert_eq!(lines.len(), 2, "one line each way:\n{}", lines.join("\n"));
    let on_decision = lines
        .iter()
        .find(|l| l.contains("reached the HTTP decision listener"))
        .expect("the decision listener's line");
    assert!(on_decision.contains("WARN"), "{on_decision}");
    assert!(
        on_decision.contains(&format!("the gRPC listener, {grpc} (--grpc-listen)")),
        "{on_decision}"
    );
    assert!(on_decision.contains(CALL_PATH), "{on_decision}");
    assert!(on_decision.contains("from 127.0.0.1:"), "{on_decision}");
    let on_grpc = lines
        .iter()
        .find(|l| l.contains("reached the gRPC listener"))
        .expect("the gRPC listener's line");
    assert!(on_grpc.contains("POST /v1/throttle"), "{on_grpc}");
    assert!(
        on_grpc.contains(&format!(
            "decision listener {} (--decision-listen)",
            bin.decision
        )),
        "{on_grpc}"
    );
}

/// Redis gone under many decisions: every one answers 503, and the log has one line per error
/// code for them all, with its cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_logged_once_per_code_for_many_failures() {
    let mut redis = support::RedisServer::start();
    let url = redis.url();
    let mut bin = Bin::spawn(
        &[
            "--grpc-listen",
            "off",
            "--redis-url",
            &url,
            "--redis-timeout-ms",
            "200",
        ],
        &[],
    );
    bin.ready().await;
    redis.kill();
    let http = client();
    for _ in 0..30 {
        let r = http
            .post(format!("http://{}/v1/throttle", bin.decision))
            .json(&json!({"action": "user", "key": "k"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 503);
    }
    let lines = bin.lines_with("answered 503 ", 1).await;
    let mut codes: Vec<&str> = lines
        .iter()
        .map(|l| {
            l.split("answered 503 ")
                .nth(1)
                .and_then(|rest| rest.split(':').next())
                .unwrap()
        })
        .collect();
    let all = codes.len();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(all, codes.len(), "one line per code:\n{}", lines.join("\n"));
    for line in &lines {
        assert!(line.contains("WARN"), "{line}");
        assert!(
            line.contains("such answers since the last line; at most one line per 10 s"),
            "{line}"
        );
    }
}
