//! Hardening of the listeners and of the rules bookkeeping (follow-ups of issue 7):
//!
//! - slow clients: a half-sent request head, a trickled body and an idle keep-alive connection
//!   are all closed within `header_read_timeout` (+ slack), on both listeners, while normal
//!   requests, keep-alive included, keep working;
//! - the rules hash deleted on its own (stray DEL, eviction) is noticed and republished by a
//!   running backend, with a log line;
//! - a rules version that is not a number is reported as unreadable, not as an unreachable store;
//! - the old layout (a separate version key) is read and migrated;
//! - honest errors (issue 10): a Redis setting that can never work stops the start as a
//!   configuration error, and a script failing inside Redis answers 500 `store_script_error`
//!   naming the script (counted as such), not a 503 outage that makes the filter fail open.
#![cfg(test)]

use crate::harness;
use crate::support;

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::Sluice;
use sluice_backend::rules::{poll_once, PollOutcome, RuleCache, RuleSet};
use sluice_backend::store::redis::{RedisConfig, RedisField, RedisStore, RedisTarget};

use sluice_backend::store::RuleStore;
use sluice_backend::{Config, RunError, StoreChoice};
use sluice_core::Rule;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The header read timeout of the slow-client tests: short, so the tests are quick.
const TIMEOUT: Duration = Duration::from_millis(300);
/// Slack on top of it for a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

async fn start_short_timeout() -> Sluice {
    let mut config = Config::new(StoreChoice::Memory, harness::TOKEN);
    config.header_read_timeout = TIMEOUT;
    Sluice::start_with(config).await
}

fn host_port(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// Reads until the server closes the connection (or `within` passes); returns what was read and
/// whether the connection was closed.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (got, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one HTTP/1.1 response with a Content-Length body; returns its head and body.
async fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().expect("length"))
                })
                .expect("a content-length");
            if got.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + length]).into_owned();
                return (head, body);
            }
        }
        let n = tokio::time::timeout_at(deadline, stream.read(&mut buf))
            .await
            .expect("a response within 5 s")
            .expect("read");
        assert!(
            n > 0,
            "connection closed before a whole response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_is_cut_off_on_both_listeners_and_requests_keep_working() {
    let s = start_short_timeout().await;
    for base in [&s.decision, &s.admin] {
        let started = Instant::now();
        let mut slow = TcpStream::connect(host_port(base)).await.expect("connect");
        slow.write_all(b"GET /healthz HT").await.expect("write");
        // Meanwhile a normal request is answered at once.
        crate::harness::get_with_status(&s.http, format!("{base}/healthz"), 200).await;
        let (_, closed) = read_until_closed(&mut slow, TIMEOUT + SLACK).await;
        let took = started.elapsed();
        assert!(
            closed,
            "{base}: a half-sent request line still open after {took:?}"
        );
        assert!(
            took >= TIMEOUT,
            "{base}: closed after {took:?}, before the timeout: something else closed it"
        );
    }
    // A request head trickled byte by byte is cut off at the same deadline (it does not move).
    let started = Instant::now();
    let mut trickle = TcpStream::connect(host_port(&s.decision))
        .await
        .expect("connect");
    let mut closed_at = None;
    for byte in
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    {
        if trickle.write_all(&[*byte]).await.is_err() {
            closed_at = Some(started.elapsed());
            break;
        }
        let mut probe = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(50), trickle.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed_at = Some(started.elapsed());
                break;
            }
            _ => {}
        }
        assert!(
            started.elapsed() < TIMEOUT + SLACK,
            "a trickled head is still open after {:?}",
            started.elapsed()
        );
    }
    let closed_at = closed_at.expect("the trickled head was cut off");
    assert!(
        closed_at >= TIMEOUT && closed_at < TIMEOUT + SLACK,
        "closed after {closed_at:?}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_slow_clients_do_not_stop_the_listeners_and_all_are_closed() {
    let s = start_short_timeout().await;
    let started = Instant::now();
    let mut slow = Vec::new();
    for i in 0..64 {
        let base = if i % 2 == 0 { &s.decision } else { &s.admin };
        let mut c = TcpStream::connect(host_port(base)).await.expect("connect");
        c.write_all(b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        slow.push(c);
    }
    let (status, body) = s.throttle("nothing", "u", 1).await;
    assert_eq!(
        status, 404,
        "decisions still answered while 64 slow clients hang: {body}"
    );
    for (i, c) in slow.iter_mut().enumerate() {
        let left = (TIMEOUT + SLACK).saturating_sub(started.elapsed());
        let (_, closed) = read_until_closed(c, left).await;
        assert!(
            closed,
            "slow client #{i} still open after {:?}",
            started.elapsed()
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_off() {
    let s = start_short_timeout().await;
    let started = Instant::now();
    let mut c = TcpStream::connect(host_port(&s.decision))
        .await
        .expect("connect");
    c.write_all(b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"act")
        .await
        .expect("write");
    let (answer, closed) = read_until_closed(&mut c, TIMEOUT + SLACK).await;
    let took = started.elapsed();
    assert!(
        closed,
        "a body that never arrives still holds the connection after {took:?}"
    );
    assert!(took >= TIMEOUT, "closed after {took:?}, before the timeout");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.starts_with("HTTP/1.1 5"),
        "no server error for a slow body: {answer}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_works_and_an_idle_connection_is_closed_after_the_timeout() {
    let s = start_short_timeout().await;
    let mut c = TcpStream::connect(host_port(&s.decision))
        .await
        .expect("connect");
    let body = br#"{"action":"nothing","key":"u"}"#;
    let request = format!(
        "POST /v1/throttle HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        String::from_utf8_lossy(body)
    );
    // Three requests on one connection: keep-alive holds.
    for _ in 0..3 {
        c.write_all(request.as_bytes()).await.expect("write");
        let (head, body) = read_response(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 404"), "{head}\n{body}");
    }
    let idle_from = Instant::now();
    let (rest, closed) = read_until_closed(&mut c, TIMEOUT + SLACK).await;
    let idle = idle_from.elapsed();
    assert!(
        closed,
        "an idle keep-alive connection still open after {idle:?}"
    );
    assert!(
        rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_is_not_held_by_a_slow_client() {
    let mut config = Config::new(StoreChoice::Memory, harness::TOKEN);
    config.header_read_timeout = Duration::from_secs(60);
    let s = Sluice::start_with(config).await;
    let mut idle = TcpStream::connect(host_port(&s.decision))
        .await
        .expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (head, _) = read_response(&mut idle).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // An idle keep-alive connection does not hold the shutdown (Sluice::stop bounds it to 5 s).
    let started = Instant::now();
    s.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_its_answer_is_cut_off() {
    const SIZE: usize = 32 << 20;
    let dir = std::env::temp_dir().join(format!("sluice-hardening-{}-dash", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("index.html"), "<!doctype html><title>t</title>").expect("index");
    std::fs::write(dir.join("big.bin"), vec![b'x'; SIZE]).expect("big file");
    let mut config = Config::new(StoreChoice::Memory, harness::TOKEN);
    config.header_read_timeout = TIMEOUT;
    config.dashboard_dir = Some(dir.clone());
    let s = Sluice::start_with(config).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("small receive buffer");
    let mut c = socket
        .connect(host_port(&s.admin).parse().expect("addr"))
        .await
        .expect("connect");
    c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    // The stimulus: a client that reads nothing for well past the bound.
    tokio::time::sleep(TIMEOUT + SLACK).await;
    let (got, closed) = read_until_closed(&mut c, Duration::from_secs(10)).await;
    assert!(closed, "the connection is still open");
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );
    assert!(
        got.len() < SIZE,
        "the whole {} bytes were sent: the stalled writer was never cut off",
        got.len()
    );
    // Other clients were served all along, and shutdown is not held.
    assert_eq!(
        s.http
            .get(format!("{}/healthz", s.admin))
            .send()
            .await
            .expect("healthz")
            .status()
            .as_u16(),
        200
    );
    s.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_past_the_descriptor_limit_are_shed_and_the_listener_recovers() {
    // The binary under `ulimit -n 48`: 80 half-sent requests run it out of descriptors.
    let (dport, aport) = (support::free_port(), support::free_port());
    let script = format!(
        "ulimit -n 48 && exec {BIN} --decision-listen 127.0.0.1:{dport} --admin-listen 127.0.0.1:{aport} \
         --grpc-listen off --admin-token {} --header-read-timeout-ms 500",
        harness::TOKEN
    );
    let (mut child, log) = support::spawn_logged(Command::new("sh").args(["-c", &script]));
    let http = harness::client();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !matches!(http.get(format!("http://127.0.0.1:{dport}/healthz")).send().await, Ok(r) if r.status().is_success())
    {
        assert!(
            Instant::now() < deadline,
            "sluice not up:\n{}",
            log.lock().expect("lock")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut slow = Vec::new();
    for _ in 0..80 {
        let mut c = TcpStream::connect(format!("127.0.0.1:{dport}"))
            .await
            .expect("connect (kernel backlog)");
        c.write_all(b"GET /healthz HT").await.expect("write");
        slow.push(c);
    }
    // A real request now waits in the backlog until slow clients are cut off, then is answered.
    let started = Instant::now();
    let fresh = harness::client();
    let answer = fresh
        .get(format!("http://127.0.0.1:{dport}/healthz"))
        .send()
        .await;
    let took = started.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    let log = log.lock().expect("lock").clone();
    let status = answer.map(|r| r.status().as_u16());
    assert_eq!(
        status.ok(),
        Some(200),
        "answered after {took:?}; log:\n{log}"
    );
    assert!(
        took < Duration::from_secs(5),
        "answered only after {took:?}"
    );
    assert!(
        log.contains("cannot accept connections"),
        "the descriptor shortage is logged:\n{log}"
    );
}

// ---- The rules bookkeeping ----

/// The `sluice` binary, its stderr collected (the tests read its log lines).
struct Running {
    child: Child,
    stderr: Arc<Mutex<String>>,
    decision: String,
    admin: String,
}

impl Running {
    /// Starts the binary on free ports with `args` and waits until `/readyz` answers 200.
    async fn start(args: &[&str]) -> Running {
        let decision = format!("127.0.0.1:{}", support::free_port());
        let admin = format!("127.0.0.1:{}", support::free_port());
        let (child, stderr) = support::spawn_logged(
            Command::new(BIN)
                .args([
                    "--decision-listen",
                    &decision,
                    "--admin-listen",
                    &admin,
                    "--grpc-listen",
                    "off",
                    "--admin-token",
                    harness::TOKEN,
                ])
                .args(args),
        );
        let running = Running {
            child,
            stderr,
            decision,
            admin,
        };
        let http = harness::client();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(r) = http
                .get(format!("http://{}/readyz", running.admin))
                .send()
                .await
            {
                if r.status().is_success() {
                    return running;
                }
            }
            assert!(
                Instant::now() < deadline,
                "sluice not ready; stderr:\n{}",
                running.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// The binary on `redis` with the two rules of `rules_file(name)`; returns it and the file.
    async fn on_redis_with_rules_file(
        redis: &support::RedisServer,
        name: &str,
    ) -> (Running, std::path::PathBuf) {
        let rules = rules_file(name);
        let running = Running::start(&[
            "--redis-url",
            &redis.url(),
            "--rules",
            rules.to_str().expect("utf-8"),
        ])
        .await;
        (running, rules)
    }

    /// Waits until the binary's log holds `line` (see `time_until`).
    async fn until_logged(&self, within: Duration, line: &str) {
        time_until(within, &format!("the log line {line:?}"), || {
            self.stderr().contains(line)
        })
        .await;
    }

    async fn throttle(&self, action: &str, key: &str) -> (u16, serde_json::Value) {
        harness::status_and_json(
            harness::client()
                .post(format!("http://{}/v1/throttle", self.decision))
                .json(&serde_json::json!({"action": action, "key": key}))
                .send()
                .await
                .expect("throttle"),
        )
        .await
    }

    async fn put_rule(&self, rule: serde_json::Value) -> (u16, serde_json::Value) {
        let action = rule["action"].as_str().expect("action").to_owned();
        harness::status_and_json(
            harness::client()
                .put(format!("http://{}/v1/rules/{action}", self.admin))
                .bearer_auth(harness::TOKEN)
                .json(&rule)
                .send()
                .await
                .expect("put rule"),
        )
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rules_file(name: &str) -> std::path::PathBuf {
    let (_, path) = support::write_temp_file(
        "sluice-hardening",
        &format!("-{name}"),
        "rules.yaml",
        "rules:\n  - action: post\n    algorithm: gcra\n    capacity: 5\n    rate: { count: 1, period: 1h }\n  - action: login\n    algorithm: sliding_log\n    capacity: 3\n    window: 1h\n",
    );
    path
}

/// Polls `check` every 10 ms until it holds; returns how long that took, or panics after `within`.
async fn time_until(within: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if check() {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_key_deleted_alone_is_republished_within_a_second() {
    let redis = support::RedisServer::start();
    let (sluice, rules) = Running::on_redis_with_rules_file(&redis, "deleted").await;
    let hkeys = || {
        let mut keys: Vec<String> = redis
            .cli(&["HKEYS", "{sluice:rules}"])
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    };
    let both_rules = || {
        let keys = hkeys();
        keys.iter().any(|k| k == "post") && keys.iter().any(|k| k == "login")
    };
    assert!(both_rules());

    // A stray DEL (or an eviction) of the rules hash alone.
    assert_eq!(redis.cli(&["DEL", "{sluice:rules}"]).trim(), "1");
    let took = time_until(Duration::from_secs(5), "rules back in Redis", both_rules).await;
    eprintln!("rules republished {took:?} after the DEL");
    assert!(
        took < Duration::from_millis(1500),
        "republished after {took:?} (poll every 250 ms; bound ~1 s)"
    );
    sluice
        .until_logged(
            Duration::from_secs(2),
            "publishing this replica's 2 cached rules again",
        )
        .await;
    // Decisions never lost their rules, and a replica started now finds them in the store.
    assert_eq!(sluice.throttle("post", "u").await.0, 200);
    let other = Sluice::start(harness::redis(&redis.url())).await;
    let (_, listed) = other.admin_get("/v1/rules").await;
    let actions: Vec<&str> = listed["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert_eq!(actions, ["login", "post"], "{listed}");
    other.stop().await;
    // The version lives inside the rules hash, so the two cannot be lost apart.
    assert_eq!(hkeys(), ["#version", "login", "post"]);
    assert_eq!(
        redis.cli(&["EXISTS", "{sluice:rules}:version"]).trim(),
        "0",
        "no separate version key"
    );
    let _ = std::fs::remove_dir_all(rules.parent().expect("dir"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_version_that_is_not_a_number_is_reported_as_unreadable() {
    let redis = support::RedisServer::start();
    let (sluice, rules) = Running::on_redis_with_rules_file(&redis, "corrupt").await;
    let new_rule = serde_json::json!({"action": "new", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1h"}});
    redis.cli(&["HSET", "{sluice:rules}", "#version", "not-a-number"]);
    sluice
        .until_logged(
            Duration::from_secs(3),
            "the rules in the store cannot be read",
        )
        .await;
    let log = sluice.stderr();
    assert!(
        log.contains("not-a-number"),
        "the log names the bad value:\n{log}"
    );
    assert!(
        !log.contains("cannot reach the store"),
        "Redis is reachable; the log must not say otherwise:\n{log}"
    );
    // Decisions keep the cached rules; a rule write is refused clearly, naming the key.
    assert_eq!(sluice.throttle("post", "u").await.0, 200);
    let (status, body) = sluice.put_rule(new_rule.clone()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (500, Some("store_wrong_type")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("{sluice:rules}"),
        "{body}"
    );
    // Repaired: the log says so and writes work again.
    redis.cli(&["HSET", "{sluice:rules}", "#version", "41"]);
    sluice
        .until_logged(
            Duration::from_secs(3),
            "the rules in the store are readable again",
        )
        .await;
    let (status, body) = sluice.put_rule(new_rule.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        redis.cli(&["HGET", "{sluice:rules}", "#version"]).trim(),
        "42"
    );
    let _ = std::fs::remove_dir_all(rules.parent().expect("dir"));
}

async fn redis_store(redis: &support::RedisServer) -> RedisStore {
    let mut config = RedisConfig::new(RedisTarget::Single(redis.url()));
    config.timeout = Duration::from_secs(5);
    RedisStore::connect(config).await.expect("connect")
}

fn rule(json: &str) -> Rule {
    Rule::from_json_str(json).expect("valid rule")
}

#[tokio::test]
async fn the_old_layout_with_a_separate_version_key_is_read_and_migrated() {
    let redis = support::RedisServer::start();
    let json =
        r#"{"action":"post","algorithm":"gcra","capacity":5,"rate":{"count":10,"period":"1m"}}"#;
    redis.cli(&["HSET", "{sluice:rules}", "post", json]);
    redis.cli(&["SET", "{sluice:rules}:version", "7"]);
    let store = redis_store(&redis).await;
    let snapshot = store.load_rules().await.expect("load");
    assert_eq!(snapshot.version, Some(7));
    assert_eq!(snapshot.rules, vec![rule(json)]);
    assert_eq!(
        redis.cli(&["HGET", "{sluice:rules}", "#version"]).trim(),
        "7",
        "moved into the hash"
    );
    assert_eq!(
        redis.cli(&["EXISTS", "{sluice:rules}:version"]).trim(),
        "0",
        "the old key is gone"
    );
    assert_eq!(store.rules_version().await.expect("version"), Some(7));
    assert_eq!(store.put_rule(&rule(json)).await.expect("put"), 8);

    // The old layout with the hash already lost: the version goes too, so replicas republish.
    let other = support::RedisServer::start();
    other.cli(&["SET", "{sluice:rules}:version", "3"]);
    let store = redis_store(&other).await;
    let snapshot = store.load_rules().await.expect("load");
    assert_eq!((snapshot.version, snapshot.rules.len()), (None, 0));
    assert_eq!(other.cli(&["EXISTS", "{sluice:rules}:version"]).trim(), "0");
}

#[tokio::test]
async fn deleting_every_rule_keeps_the_version_so_nothing_is_republished() {
    let redis = support::RedisServer::start();
    let store = redis_store(&redis).await;
    let a =
        rule(r#"{"action":"a","algorithm":"gcra","capacity":1,"rate":{"count":1,"period":"1s"}}"#);
    store.put_rule(&a).await.expect("put");
    // Another replica caches {a} at version 1.
    let replica = RuleCache::new(RuleSet::from_snapshot(
        store.load_rules().await.expect("load"),
    ));
    assert_eq!(
        store.delete_rule(a.action()).await.expect("delete"),
        Some(2)
    );
    assert_eq!(
        store.rules_version().await.expect("version"),
        Some(2),
        "an empty set keeps its version"
    );
    assert_eq!(
        poll_once(&replica, &store).await,
        PollOutcome::Reloaded,
        "the deletion reaches the replica"
    );
    assert!(replica.current().rules.is_empty());
    assert_eq!(poll_once(&replica, &store).await, PollOutcome::Unchanged);
    assert_eq!(
        redis.cli(&["HKEYS", "{sluice:rules}"]).trim(),
        "#version",
        "the deleted rule was not republished"
    );

    // Whereas the hash lost outright is noticed and the cached rules come back.
    store.put_rule(&a).await.expect("put");
    assert_eq!(poll_once(&replica, &store).await, PollOutcome::Reloaded);
    redis.cli(&["DEL", "{sluice:rules}"]);
    assert_eq!(store.rules_version().await.expect("version"), None);
    assert_eq!(poll_once(&replica, &store).await, PollOutcome::Republished);
    assert_eq!(store.load_rules().await.expect("load").rules, vec![a]);
    // A corrupt version is "unreadable", not "store down".
    redis.cli(&["HSET", "{sluice:rules}", "#version", "x"]);
    assert!(
        matches!(poll_once(&replica, &store).await, PollOutcome::Unreadable(e) if e.contains("#version"))
    );
}

#[tokio::test]
async fn a_bad_redis_setting_stops_the_start_as_a_configuration_error() {
    // Nothing listens there: were the setting not refused first, this would be an outage.
    let closed = format!("redis://127.0.0.1:{}/", support::free_port());
    let mut redis = RedisConfig::new(RedisTarget::Single(closed));
    redis.key_prefix = "a{b}".into();
    let e = Sluice::start_err(Config::new(StoreChoice::Redis(redis), harness::TOKEN)).await;
    assert!(
        matches!(&e, RunError::RedisConfig(c) if c.field() == RedisField::KeyPrefix),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("invalid Redis configuration: key prefix \"a{b}\""),
        "{e}"
    );
}

#[tokio::test]
async fn a_failing_script_answers_500_store_script_error_naming_it() {
    // A Redis without TIME: rules are written (no TIME needed), every decision's script fails.
    let redis = support::RedisServer::start_with(&["--rename-command", "TIME", ""]);
    let sluice = Sluice::start(harness::redis(&redis.url())).await;
    let (status, body) = sluice
        .put_rule(serde_json::json!({"action": "post", "algorithm": "gcra", "capacity": 5, "rate": {"count": 1, "period": "1h"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = sluice.throttle("post", "u", 1).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (500, Some("store_script_error")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("script gcra") && message.contains("Unknown Redis command"),
        "{body}"
    );
    let metrics = sluice.metrics().await;
    assert!(
        metrics.contains(r#"sluice_store_errors_total{kind="script"} 1"#)
            && metrics.contains(r#"sluice_store_errors_total{kind="unavailable"} 0"#),
        "{metrics}"
    );
}
