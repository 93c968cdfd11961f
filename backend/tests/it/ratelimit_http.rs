//! envoyproxy/ratelimit's HTTP surface (`--ratelimit-http-listen`, in-process sluice and the
//! binary): `POST /json` answers the peer's README example byte for byte, 200 / 429 as the peer,
//! the same answer as the gRPC rate limit service for the same state, bad bodies refused with
//! 400 naming the field (413 past the size bound), `GET /rlconfig` in the peer's dump format,
//! `GET /healthcheck` following the store (a real redis-server killed), and the listener's
//! placement and refusals through the real binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::{json, Value};
use sluice_backend::http::peer::{decode, encode};
use sluice_backend::{Config, StoreChoice};
use tonic::transport::Channel;

use crate::grpc_rig::GrpcRig;
use crate::harness::{client, eventually, redis, TOKEN};
use crate::support::{self, RedisServer};

type Rig = GrpcRig<RateLimitServiceClient<Channel>>;

/// The README's `/json` example answer needs a 1 and a 2 per minute limit.
const CONFIG: &str = "\
domain: dummy
descriptors:
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: two_per_minute
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: per_day
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 5}
";

fn config_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-it-peer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), CONFIG).unwrap();
    dir
}

async fn start(dir: &Path, store: StoreChoice) -> Rig {
    let mut config = Config::new(store, TOKEN);
    config.ratelimit_config = Some(dir.to_owned());
    Rig::start_with(config).await
}

/// A `POST /json` answer: status, content type, body.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

async fn post(http: &reqwest::Client, url: &str, body: impl Into<reqwest::Body>) -> Answer {
    post_as(http, url, body, Some("application/json"), None).await
}

/// `POST /json` with `content_type` (`None`: no header) and, when given, the admin token.
async fn post_as(
    http: &reqwest::Client,
    url: &str,
    body: impl Into<reqwest::Body>,
    content_type: Option<&str>,
    token: Option<&str>,
) -> Answer {
    let mut r = http.post(format!("{url}/json")).body(body);
    if let Some(t) = content_type {
        r = r.header("content-type", t);
    }
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    Answer {
        status,
        content_type,
        body: r.text().await.unwrap(),
    }
}

fn request(keys: &[&str], id: &str) -> String {
    let descriptors: Vec<Value> = keys
        .iter()
        .map(|k| json!({"entries": [{"key": k, "value": id}]}))
        .collect();
    json!({"domain": "dummy", "descriptors": descriptors}).to_string()
}

/// Whether less than `margin` is left of the current minute (by this clock and the server's,
/// the same machine's).
fn near_minute_end(margin: Duration) -> bool {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    60_000 - ms % 60_000 < margin.as_millis()
}

/// Waits out the end of a minute so a two-request sequence on per-minute limits stays in one
/// window (at most 3 s, and only when the test starts that close to the edge).
async fn clear_of_the_minute_edge() {
    while near_minute_end(Duration::from_secs(3)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The README's example: "one_per_minute" already used once, then asked with "two_per_minute".
async fn readme_example(rig: &Rig, id: &str) {
    clear_of_the_minute_edge().await;
    let first = post(&rig.http, &rig.peer, request(&["one_per_minute"], id)).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let r = post(
        &rig.http,
        &rig.peer,
        request(&["one_per_minute", "two_per_minute"], id),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.content_type, "application/json");
    // The README's answer, with the durationUntilReset the peer adds today (the rest of the
    // minute in whole seconds), compact as protojson writes it; then either the end, or the
    // fields sluice adds to every gRPC answer (its rate-limit headers, its dynamic metadata) left
    // out, as the peer leaves them out by default.
    let reset = r
        .body
        .split("\"durationUntilReset\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no durationUntilReset in {}", r.body));
    let seconds: u64 = reset.strip_suffix('s').unwrap().parse().unwrap();
    assert!((1..=60).contains(&seconds), "{reset}");
    // "two_per_minute" counted the refused request too (the peer's arithmetic, as in its
    // README): 1 left. Nothing follows the statuses: the peer adds headers and metadata only
    // when told to.
    let expected = format!(
        r#"{{"overallCode":"OVER_LIMIT","statuses":[{{"code":"OVER_LIMIT","currentLimit":{{"requestsPerUnit":1,"unit":"MINUTE"}},"durationUntilReset":"{reset}"}},{{"code":"OK","currentLimit":{{"requestsPerUnit":2,"unit":"MINUTE"}},"limitRemaining":1,"durationUntilReset":"{reset}"}}]}}"#
    );
    assert_eq!(r.body, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_json_answers_the_readme_example_byte_for_byte_on_memory_and_redis() {
    let dir = config_dir("readme");
    let rig = start(&dir, StoreChoice::Memory).await;
    readme_example(&rig, "memory").await;
    rig.stop().await;
    let server = RedisServer::start();
    let rig = start(&dir, redis(&server.url())).await;
    readme_example(&rig, "redis").await;
    rig.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_json_is_the_grpc_answer_with_the_peers_statuses() {
    let dir = config_dir("same");
    let rig = start(&dir, StoreChoice::Memory).await;
    // 200 until over, then 429, on a day-long limit in shadow mode (never over) and one that is.
    let per_day = request(&["per_day"], "a");
    for _ in 0..7 {
        let r = post(&rig.http, &rig.peer, per_day.clone()).await;
        assert_eq!(r.status, 200, "shadow_mode is never over: {}", r.body);
    }
    clear_of_the_minute_edge().await;
    let two = request(&["two_per_minute"], "b");
    let codes: Vec<u16> = [
        post(&rig.http, &rig.peer, two.clone()).await.status,
        post(&rig.http, &rig.peer, two.clone()).await.status,
        post(&rig.http, &rig.peer, two.clone()).await.status,
    ]
    .to_vec();
    assert_eq!(codes, [200, 200, 429]);
    // A check that debits nothing, asked over gRPC and over /json on the same state: the same
    // answer, byte for byte (the reset is whole seconds; asked within one, it is the same).
    let check = r#"{"domain":"dummy","hitsAddend":0,"descriptors":[{"entries":[{"key":"two_per_minute","value":"b"}],"hitsAddend":"0"},{"entries":[{"key":"per_day","value":"a"}],"hits_addend":0}]}"#;
    let asked = decode::request(check.as_bytes()).unwrap();
    for _ in 0..5 {
        let mut grpc = rig.client.clone();
        let by_grpc = grpc
            .should_rate_limit(asked.clone())
            .await
            .unwrap()
            .into_inner();
        let by_json = post(&rig.http, &rig.peer, check).await;
        let by_grpc = sluice_backend::http::peer::json::as_the_peer_defaults(by_grpc);
        if without_millis(&encode::response(&by_grpc)) == without_millis(&by_json.body) {
            let over = by_json.body.starts_with(r#"{"overallCode":"OVER_LIMIT""#);
            assert_eq!(by_json.status, if over { 429 } else { 200 });
            rig.stop().await;
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    }
    panic!("five asks in a row differed between gRPC and /json");
}

/// An answer's JSON without the millisecond counts of sluice's own metadata (`reset_after_ms`,
/// `retry_after_ms`: two asks a millisecond apart differ there), as a value to compare.
fn without_millis(body: &str) -> String {
    let mut v: Value = serde_json::from_str(body).unwrap();
    if let Some(list) = v
        .pointer_mut("/dynamicMetadata/sluice")
        .and_then(Value::as_array_mut)
    {
        for item in list.iter_mut().filter_map(Value::as_object_mut) {
            item.retain(|k, _| !k.ends_with("_ms"));
        }
    }
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_refused_naming_the_field_and_nothing_panics() {
    let dir = config_dir("bad");
    let rig = start(&dir, StoreChoice::Memory).await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            b"".to_vec(),
            400,
            "Bad Request: body: is empty; send a RateLimitRequest as JSON",
        ),
        (
            b"{".to_vec(),
            400,
            "Bad Request: body: is not JSON: EOF while parsing an object",
        ),
        (b"\"".to_vec(), 400, "Bad Request: body: is not JSON"),
        (b"\\".to_vec(), 400, "Bad Request: body: is not JSON"),
        (b"\xff\xfe".to_vec(), 400, "Bad Request: body: is not JSON"),
        (
            b"{\"domain\":\"\xc3\"}".to_vec(),
            400,
            "Bad Request: body: is not JSON",
        ),
        (
            br#"{"domain":"dummy","descriptors":[{"entries":[{"key":1}]}]}"#.to_vec(),
            400,
            "Bad Request: descriptors[0].entries[0].key: expected a string, got a number",
        ),
        (
            br#"{"domain":"dummy","descriptor":[]}"#.to_vec(),
            400,
            "Bad Request: descriptor: unknown field; known: domain, descriptors, hitsAddend",
        ),
        (
            br#"{"domain":"dummy","domain":"dummy"}"#.to_vec(),
            400,
            "Bad Request: domain: given twice",
        ),
        (
            br#"{"descriptors":[{"entries":[{"key":"k"}]}]}"#.to_vec(),
            400,
            "Bad Request: domain: must not be empty",
        ),
        (
            br#"{"domain":"dummy"}"#.to_vec(),
            400,
            "Bad Request: descriptors: must not be empty",
        ),
        (
            br#"{"domain":"dummy","hitsAddend":-1,"descriptors":[]}"#.to_vec(),
            400,
            "Bad Request: hits_addend: must not be negative",
        ),
        (
            vec![b' '; 64 * 1024 + 1],
            413,
            "Payload Too Large: the body is larger than 65536 bytes",
        ),
    ];
    for (body, status, starts) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        let r = post(&rig.http, &rig.peer, body).await;
        assert_eq!(r.status, status, "{shown}: {}", r.body);
        assert_eq!(r.content_type, "text/plain; charset=utf-8", "{shown}");
        assert!(
            r.body.starts_with(starts) && r.body.ends_with('\n'),
            "{shown}: {}",
            r.body
        );
    }
    // Quotes, backslashes and other characters in values are values like any other.
    let odd = json!({"domain": "dummy", "descriptors": [{"entries": [{"key": "two_per_minute", "value": "a\"b\\c\u{0}\u{e9}\u{2028}"}]}]});
    let r = post(&rig.http, &rig.peer, odd.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // An unknown domain: every descriptor OK.
    let unknown =
        r#"{"domain":"no_such_domain","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let r = post(&rig.http, &rig.peer, unknown).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["code"], "OK");
    // Another method, another page: the peer's plain text.
    let get = rig
        .http
        .get(format!("{}/json", rig.peer))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 405);
    let page = rig
        .http
        .get(format!("{}/debug/pprof/", rig.peer))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 404);
    assert!(page
        .text()
        .await
        .unwrap()
        .starts_with("Not Found: no such page"));
    // Still serving.
    let r = post(&rig.http, &rig.peer, request(&["per_day"], "after")).await;
    assert_eq!(r.status, 200);
    rig.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlconfig_dumps_the_limits_and_healthcheck_follows_the_store() {
    let dir = config_dir("health");
    let mut server = RedisServer::start();
    let rig = start(&dir, redis(&server.url())).await;
    let page = rig
        .http
        .get(format!("{}/rlconfig", rig.peer))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(
        page.text().await.unwrap(),
        "dummy.one_per_minute: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n\
         dummy.two_per_minute: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n\
         dummy.per_day: unit=DAY requests_per_unit=5, shadow_mode: true, quota_mode: false\n"
    );
    let health = rig
        .http
        .get(format!("{}/healthcheck", rig.peer))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(health.text().await.unwrap(), "OK");
    server.kill();
    let http = client();
    let url = format!("{}/healthcheck", rig.peer);
    let down = eventually(
        Duration::from_secs(10),
        "/healthcheck 500 with Redis down",
        || {
            let r = http.get(&url).send();
            async move { r.await.ok().filter(|r| r.status().as_u16() == 500) }
        },
    )
    .await;
    assert_eq!(down.text().await.unwrap(), "", "the peer's 500 has no body");
    // With the store down, /json answers the peer's 400, saying why.
    let r = post(&rig.http, &rig.peer, request(&["per_day"], "down")).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.starts_with("Bad Request: store_"), "{}", r.body);
    rig.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The binary with `args` (the gRPC listener off), its stderr collected.
fn sluice(
    args: &[&str],
) -> (
    std::process::Child,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    support::spawn_logged(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("SLUICE_GRPC_LISTEN", "off")
            .env_remove("SLUICE_RATELIMIT_HTTP_LISTEN")
            .env_remove("SLUICE_ADMIN_TOKEN"),
    )
}

/// Waits for `/healthcheck` at `base` to answer 200.
async fn healthy(http: &reqwest::Client, base: &str) {
    let url = format!("{base}/healthcheck");
    eventually(Duration::from_secs(10), "/healthcheck answers", || {
        let r = http.get(&url).send();
        async move { r.await.ok().filter(|r| r.status().as_u16() == 200) }
    })
    .await;
}

/// Issue 40: with `--ratelimit-config` and no `--ratelimit-http-listen`, the surface is the
/// decision listener's; the admin listener serves no `/json` or `/rlconfig` (they used to answer
/// there with no token). `/json` refuses a body not declared JSON (a cross-site form or
/// `text/plain` post, or no type) with a 415 naming `application/json`, changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_surface_is_on_the_decision_listener_and_takes_only_json() {
    let dir = config_dir("default_place");
    let (decision, admin) = (support::free_port(), support::free_port());
    let (decision_addr, admin_addr) = (
        format!("127.0.0.1:{decision}"),
        format!("127.0.0.1:{admin}"),
    );
    let args = [
        "--decision-listen",
        decision_addr.as_str(),
        "--admin-listen",
        admin_addr.as_str(),
        "--admin-token",
        "a-token-long-enough-1234",
        "--ratelimit-config",
        dir.to_str().unwrap(),
    ];
    let (mut child, _stderr) = sluice(&args);
    let http = client();
    let (on_decision, on_admin) = (
        format!("http://{decision_addr}"),
        format!("http://{admin_addr}"),
    );
    healthy(&http, &on_decision).await;
    for t in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = post_as(
            &http,
            &on_decision,
            request(&["per_day"], "csrf"),
            Some(t),
            None,
        )
        .await;
        assert_eq!(r.status, 415, "{t}: {}", r.body);
        assert!(
            r.body.contains("Content-Type: application/json") && r.body.contains(t),
            "{t}: {}",
            r.body
        );
    }
    let r = post_as(
        &http,
        &on_decision,
        request(&["per_day"], "csrf"),
        None,
        None,
    )
    .await;
    assert_eq!(r.status, 415, "no type: {}", r.body);
    let r = post(&http, &on_decision, request(&["per_day"], "ok")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("overallCode"), "{}", r.body);
    // Nothing of it on the admin listener, with or without a token.
    let r = post(&http, &on_admin, request(&["per_day"], "admin")).await;
    assert_ne!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("overallCode"), "{}", r.body);
    let dump = http
        .get(format!("{on_admin}/rlconfig"))
        .send()
        .await
        .unwrap();
    let (status, text) = (dump.status().as_u16(), dump.text().await.unwrap());
    assert!(
        status != 200 || !text.contains("per_day"),
        "{status} {text}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 40 (item 7): with `--ratelimit-config` and sluice rules of its own, the start says that
/// domains in no file answer OK and not by those rules; each such domain is then logged once
/// (however often asked) and counted by domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_in_no_file_is_logged_once_and_counted() {
    let dir = config_dir("unknown_domain");
    let rules = dir.join("own-rules.json");
    std::fs::write(
        &rules,
        r#"[{"action": "posts", "algorithm": "fixed_window", "capacity": 1, "window": "1h"}]"#,
    )
    .unwrap();
    let config = dir.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("c.yaml"), CONFIG).unwrap();
    let (decision, admin) = (support::free_port(), support::free_port());
    let (decision_addr, admin_addr) = (
        format!("127.0.0.1:{decision}"),
        format!("127.0.0.1:{admin}"),
    );
    let args = [
        "--decision-listen",
        decision_addr.as_str(),
        "--admin-listen",
        admin_addr.as_str(),
        "--admin-token",
        "a-token-long-enough-1234",
        "--rules",
        rules.to_str().unwrap(),
        "--ratelimit-config",
        config.to_str().unwrap(),
    ];
    let (mut child, stderr) = sluice(&args);
    let http = client();
    let base = format!("http://{decision_addr}");
    healthy(&http, &base).await;
    let elsewhere =
        r#"{"domain":"elsewhere","descriptors":[{"entries":[{"key":"posts","value":"u"}]}]}"#;
    for _ in 0..3 {
        let r = post(&http, &base, elsewhere).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"sluice_rls_unknown_domain_total{domain="elsewhere"} 3"#),
        "{metrics}"
    );
    let log = stderr.lock().unwrap().clone();
    assert!(
        log.contains("not decided by sluice's own rules") && log.contains("own_rules=1"),
        "the start line: {log}"
    );
    let once = log
        .lines()
        .filter(|l| l.contains("RLS domain in no file") && l.contains("elsewhere"))
        .count();
    assert_eq!(once, 1, "{log}");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_shares_the_admin_listener_at_its_address_and_names_the_flag_when_in_use() {
    let dir = config_dir("binary");
    let (decision, admin) = (support::free_port(), support::free_port());
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let (decision_addr, admin_addr) = (addr(decision), addr(admin));
    let base = [
        "--decision-listen",
        decision_addr.as_str(),
        "--admin-listen",
        admin_addr.as_str(),
        "--admin-token",
        "a-token-long-enough-1234",
        "--ratelimit-config",
        dir.to_str().unwrap(),
    ];
    // Given the admin listener's address, the admin listener serves the surface, and there
    // (issue 40) `/json` and `/rlconfig` take the admin token, as everything else on it that
    // decides or reports; `/healthcheck` stays open as the listener's other probes.
    let mut args = base.to_vec();
    args.extend(["--ratelimit-http-listen", admin_addr.as_str()]);
    let (mut child, stderr) = sluice(&args);
    let http = client();
    let on_admin = format!("http://{admin_addr}");
    healthy(&http, &on_admin).await;
    let json = Some("application/json");
    let r = post_as(&http, &on_admin, request(&["per_day"], "bin"), json, None).await;
    assert_eq!(r.status, 401, "no token: {}", r.body);
    let dump = http
        .get(format!("{on_admin}/rlconfig"))
        .send()
        .await
        .unwrap();
    assert_eq!(dump.status().as_u16(), 401, "/rlconfig without a token");
    let token = Some("a-token-long-enough-1234");
    let r = post_as(&http, &on_admin, request(&["per_day"], "bin"), json, token).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let dump = http
        .get(format!("{on_admin}/rlconfig"))
        .bearer_auth("a-token-long-enough-1234")
        .send()
        .await
        .unwrap();
    assert_eq!(dump.status().as_u16(), 200, "/rlconfig with the token");
    let log = stderr.lock().unwrap().clone();
    assert!(
        log.contains("envoyproxy/ratelimit's HTTP surface listening"),
        "{log}"
    );
    let _ = child.kill();
    let _ = child.wait();
    // An address in use: the start stops, naming the flag.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let mut args = base.to_vec();
    args.extend(["--ratelimit-http-listen", taken_addr.as_str()]);
    let (mut child, stderr) = sluice(&args);
    let status = eventually(Duration::from_secs(10), "sluice exits", || {
        let exited = child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert_eq!(status.code(), Some(1));
    let log = stderr.lock().unwrap().clone();
    assert!(
        log.contains(&format!(
            "--ratelimit-http-listen (SLUICE_RATELIMIT_HTTP_LISTEN) {taken_addr}: address in use"
        )),
        "{log}"
    );
    drop(taken);
    let _ = std::fs::remove_dir_all(&dir);
}
