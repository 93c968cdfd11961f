//! Hardening of the listeners and of the rules bookkeeping (follow-ups of issue 7):
//!
//! - slow clients: a half-sent request head, a trickled body and an idle keep-alive connection
//!   are all closed within `header_read_timeout` (+ slack), on both listeners, while normal
//!   requests, keep-alive included, keep working;
//! - the rules hash deleted on its own (stray DEL, eviction) is noticed and republished by a
//!   running backend, with a log line;
//! - a rules version that is not a number is reported as unreadable, not as an unreachable store;
//! - the old layout (a separate version key) is read and migrated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "http_support/mod.rs"]
mod harness;
#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use harness::Sluice;
use sluice_backend::{Config, StoreChoice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The header read timeout of the slow-client tests: short, so the tests are quick.
const TIMEOUT: Duration = Duration::from_millis(300);
/// Slack on top of it for a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

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
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().expect("length")))
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
        assert!(n > 0, "connection closed before a whole response: {:?}", String::from_utf8_lossy(&got));
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
        let r = s.http.get(format!("{base}/healthz")).send().await.expect("healthz");
        assert_eq!(r.status().as_u16(), 200);
        let (_, closed) = read_until_closed(&mut slow, TIMEOUT + SLACK).await;
        let took = started.elapsed();
        assert!(closed, "{base}: a half-sent request line still open after {took:?}");
        assert!(took >= TIMEOUT, "{base}: closed after {took:?}, before the timeout: something else closed it");
    }
    // A request head trickled byte by byte is cut off at the same deadline (it does not move).
    let started = Instant::now();
    let mut trickle = TcpStream::connect(host_port(&s.decision)).await.expect("connect");
    let mut closed_at = None;
    for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
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
        assert!(started.elapsed() < TIMEOUT + SLACK, "a trickled head is still open after {:?}", started.elapsed());
    }
    let closed_at = closed_at.expect("the trickled head was cut off");
    assert!(closed_at >= TIMEOUT && closed_at < TIMEOUT + SLACK, "closed after {closed_at:?}");
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
        c.write_all(b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\n").await.expect("write");
        slow.push(c);
    }
    let (status, body) = s.throttle("nothing", "u", 1).await;
    assert_eq!(status, 404, "decisions still answered while 64 slow clients hang: {body}");
    for (i, c) in slow.iter_mut().enumerate() {
        let left = (TIMEOUT + SLACK).saturating_sub(started.elapsed());
        let (_, closed) = read_until_closed(c, left).await;
        assert!(closed, "slow client #{i} still open after {:?}", started.elapsed());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_off() {
    let s = start_short_timeout().await;
    let started = Instant::now();
    let mut c = TcpStream::connect(host_port(&s.decision)).await.expect("connect");
    c.write_all(b"POST /v1/throttle HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"act")
        .await
        .expect("write");
    let (answer, closed) = read_until_closed(&mut c, TIMEOUT + SLACK).await;
    let took = started.elapsed();
    assert!(closed, "a body that never arrives still holds the connection after {took:?}");
    assert!(took >= TIMEOUT, "closed after {took:?}, before the timeout");
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.starts_with("HTTP/1.1 5"), "no server error for a slow body: {answer}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_works_and_an_idle_connection_is_closed_after_the_timeout() {
    let s = start_short_timeout().await;
    let mut c = TcpStream::connect(host_port(&s.decision)).await.expect("connect");
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
    assert!(closed, "an idle keep-alive connection still open after {idle:?}");
    assert!(rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&rest));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_is_not_held_by_a_slow_client() {
    let mut config = Config::new(StoreChoice::Memory, harness::TOKEN);
    config.header_read_timeout = Duration::from_secs(60);
    let s = Sluice::start_with(config).await;
    let mut idle = TcpStream::connect(host_port(&s.decision)).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
    let (head, _) = read_response(&mut idle).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // An idle keep-alive connection does not hold the shutdown (Sluice::stop bounds it to 5 s).
    let started = Instant::now();
    s.stop().await;
    assert!(started.elapsed() < Duration::from_secs(2), "shutdown took {:?}", started.elapsed());
}
