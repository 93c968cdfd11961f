//! One deadline per decision, through the HTTP decision API over a real redis-server behind a
//! proxy that delays every reply (a slow Redis): a request whose `timeout_ms` the store cannot
//! meet is answered 503 `deadline_exceeded`; the one whose step was started and answered late
//! is counted as a late debit (and not as a decision); once the latency estimate has learned, no
//! step is started at all (nothing debited); once Redis is fast again, the probes see it and
//! decisions resume.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{eventually, redis, Sluice};
use crate::support::RedisServer;

/// A TCP proxy in front of redis-server that holds each chunk of Redis's replies for `delay_ms`
/// before passing it on (requests go through at once, so Redis runs each command on time and
/// only its answer is late, as on a slow network or a busy Redis).
struct SlowProxy {
    addr: String,
    delay_ms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    /// A real redis-server with this proxy in front of it (the server stops when dropped).
    async fn before_a_redis_server() -> (RedisServer, SlowProxy) {
        let server = RedisServer::start();
        let upstream = server
            .url()
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        let proxy = SlowProxy::start(upstream).await;
        (server, proxy)
    }

    async fn start(upstream: String) -> SlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                });
                let delay = delay.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let ms = delay.load(Ordering::Relaxed);
                        if ms > 0 {
                            // The simulated slowness itself, not a wait for a condition.
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        SlowProxy {
            addr,
            delay_ms,
            task,
        }
    }

    fn set_delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The value of the metric line starting with `series` (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn peek_remaining(sluice: &Sluice, action: &str, key: &str) -> u64 {
    let (status, body) = sluice.throttle(action, key, 0).await;
    assert_eq!(status, 200, "{body}");
    body["remaining"].as_u64().unwrap()
}

#[tokio::test]
async fn deadline_a_slow_store_is_refused_and_a_late_debit_is_counted() {
    let (_server, proxy) = SlowProxy::before_a_redis_server().await;
    let sluice = Sluice::start(redis(&format!("redis://{}", proxy.addr))).await;
    let (status, body) = sluice
        .put_rule(
            json!({"action": "dl", "algorithm": "fixed_window", "capacity": 10, "window": "1h"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let ask = |timeout_ms: u64| json!({"action": "dl", "key": "k", "timeout_ms": timeout_ms});

    // A fast store: decided within the deadline (and the estimate learns ~1 ms).
    let (status, body) = sluice.post_decision("/v1/throttle", ask(50)).await;
    assert_eq!(
        (status, body["allowed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );

    // Redis answers 200 ms late: the step starts (the estimate says ~1 ms) and its answer is
    // late; the caller gets 503 deadline_exceeded at its deadline, not after 200 ms.
    proxy.set_delay(200);
    let sent = Instant::now();
    let (status, body) = sluice.post_decision("/v1/throttle", ask(50)).await;
    let took = sent.elapsed();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "deadline_exceeded", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("did not answer"),
        "{body}"
    );
    assert!(took < Duration::from_millis(150), "answered after {took:?}");

    // The step finishes on its own and debits: counted as a late debit, not as a decision.
    eventually(
        Duration::from_secs(5),
        "the late debit is counted",
        || async {
            let m = sluice.metrics().await;
            (metric(&m, "sluice_late_debits_total{action=\"dl\"}") == 1.0).then_some(())
        },
    )
    .await;
    let m = sluice.metrics().await;
    assert_eq!(
        metric(&m, "sluice_deadline_exceeded_total{stage=\"late\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "sluice_decisions_total{action=\"dl\",algorithm=\"fixed_window\",outcome=\"allowed\"}"
        ),
        1.0,
        "only the decision the caller acted on is a decision: {m}"
    );

    // The estimate has learned (~100 ms against 48 ms of budget): no step is started at all.
    let sent = Instant::now();
    for _ in 0..3 {
        let (status, body) = sluice.post_decision("/v1/throttle", ask(50)).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"], "deadline_exceeded", "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("no store step was started"),
            "{body}"
        );
    }
    assert!(
        sent.elapsed() < Duration::from_millis(150),
        "refused at once, not after a store step: {:?}",
        sent.elapsed()
    );
    let m = sluice.metrics().await;
    assert_eq!(
        metric(&m, "sluice_deadline_exceeded_total{stage=\"not_started\"}"),
        3.0,
        "{m}"
    );

    // /v1/throttle/all is held to the same deadline.
    let (status, body) = sluice
        .post_decision(
            "/v1/throttle/all",
            json!({"checks": [{"action": "dl", "key": "k"}], "timeout_ms": 50}),
        )
        .await;
    assert_eq!(
        (status, &body["error"]),
        (503, &json!("deadline_exceeded")),
        "{body}"
    );

    // Redis fast again: the probes see it, and decisions with a deadline resume.
    proxy.set_delay(0);
    eventually(Duration::from_secs(5), "decisions resume", || async {
        let (status, body): (u16, Value) = sluice.post_decision("/v1/throttle", ask(50)).await;
        (status == 200).then_some(body)
    })
    .await;
    // Debits: the first decision, the late one, the one that resumed; nothing refused debited.
    assert_eq!(peek_remaining(&sluice, "dl", "k").await, 10 - 3);
    let m = sluice.metrics().await;
    assert_eq!(
        metric(&m, "sluice_late_debits_total{action=\"dl\"}"),
        1.0,
        "{m}"
    );
    sluice.stop().await;
}

#[tokio::test]
async fn deadline_a_request_without_timeout_ms_waits_for_the_store() {
    // Tools and callers that send no deadline: the store deadline applies, as before.
    let (_server, proxy) = SlowProxy::before_a_redis_server().await;
    let sluice = Sluice::start(redis(&format!("redis://{}", proxy.addr))).await;
    let (status, body) = sluice
        .put_rule(json!({"action": "dl", "algorithm": "gcra", "capacity": 5, "rate": {"count": 1, "period": "1h"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    proxy.set_delay(80);
    let (status, body) = sluice.throttle("dl", "k", 1).await;
    assert_eq!(
        (status, body["allowed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    // And a deadline long enough for the slow store is met.
    let (status, body) = sluice
        .post_decision(
            "/v1/throttle",
            json!({"action": "dl", "key": "k", "timeout_ms": 400}),
        )
        .await;
    assert_eq!(
        (status, body["allowed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    proxy.set_delay(0);
    assert_eq!(peek_remaining(&sluice, "dl", "k").await, 3);
    sluice.stop().await;
}

/// RLS: Envoy's ratelimit filter sends `grpc-timeout` when its `timeout` is set; the backend holds
/// it as it holds `timeout_ms`.
#[tokio::test]
async fn deadline_rls_honours_grpc_timeout() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use tonic::transport::Channel;

    use crate::grpc_rig::GrpcRig;

    let (_server, proxy) = SlowProxy::before_a_redis_server().await;
    let rig: GrpcRig<RateLimitServiceClient<Channel>> =
        GrpcRig::start(redis(&format!("redis://{}", proxy.addr))).await;
    rig.put_rule(
        json!({"action": "dl", "algorithm": "fixed_window", "capacity": 10, "window": "1h"}),
    )
    .await;
    let ask = |timeout: Option<Duration>| {
        let mut request = tonic::Request::new(RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "dl".into(),
                    value: "k".into(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        });
        if let Some(t) = timeout {
            request.set_timeout(t); // sent as the grpc-timeout header
        }
        let mut client = rig.client.clone();
        async move { client.should_rate_limit(request).await }
    };
    assert!(ask(Some(Duration::from_millis(100))).await.is_ok());

    proxy.set_delay(400);
    // Started (the estimate is fast), answered late: DEADLINE_EXCEEDED from sluice at ~98 ms (or,
    // on a loaded machine, tonic's own grpc-timeout at 100 ms); the debit is counted as late.
    let status = ask(Some(Duration::from_millis(100))).await.unwrap_err();
    assert!(
        matches!(
            status.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{status:?}"
    );
    eventually(
        Duration::from_secs(5),
        "the late debit is counted",
        || async {
            let m = rig.metrics().await;
            (metric(&m, "sluice_late_debits_total{action=\"dl\"}") == 1.0).then_some(())
        },
    )
    .await;
    // Learned: refused before any store step, with sluice's own status.
    let sent = Instant::now();
    let status = ask(Some(Duration::from_millis(100))).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().starts_with("deadline_exceeded: ")
            && status.message().contains("no store step was started"),
        "{status:?}"
    );
    assert!(
        sent.elapsed() < Duration::from_millis(90),
        "{:?}",
        sent.elapsed()
    );
    // Without grpc-timeout the store deadline applies (no estimate check): decided. The refusal
    // above sent a latency probe (a PING) through the proxy while it still delayed 400 ms, and the
    // store's one connection answers in order, so the first call may queue behind that probe
    // past the Redis command timeout: ask until the queue has drained (a bounded wait, not a
    // sleep), then the answer must be OK.
    proxy.set_delay(0);
    let answer = eventually(
        Duration::from_secs(5),
        "a call without grpc-timeout is decided once the delayed probe has drained",
        || {
            let call = ask(None);
            async move { call.await.ok().map(|a| a.into_inner()) }
        },
    )
    .await;
    assert_eq!(answer.overall_code, 1, "OK: {answer:?}");
    rig.stop().await;
}
