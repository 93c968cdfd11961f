//! Decisions per second over HTTP, memory store vs Redis, side by side in one run.
//!
//! Starts its own redis-server on a free loopback port (stopped by PID at the end), runs sluice
//! in-process on port-0 listeners, and drives `POST /v1/throttle` with concurrent keep-alive
//! clients for a fixed time per cell. The HTTP floor (`GET /healthz`) is measured too, so the
//! store's share of the cost is visible.
//!
//!     cargo run --release -p sluice-backend --example bench_http [-- SECONDS_PER_CELL CLIENTS]
//!
//! Client and server share the machine's cores, so absolute figures are a floor, not a ceiling.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::json;
use sluice_backend::store::redis::{RedisConfig, RedisTarget};
use sluice_backend::{run, Config, Listeners, StoreChoice};
use tokio::net::TcpListener;

const TOKEN: &str = "bench-token-0123456789abcdef";
const KEYS: usize = 1000;

// The tests' redis-server launcher (which may panic, as test code does: see its header).
#[path = "../tests/it/support.rs"]
mod support;
use support::RedisServer;
use support::ALGORITHMS;

struct Server {
    decision: String,
    admin: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<()>,
}

async fn start(store: StoreChoice) -> Result<Server> {
    let d = TcpListener::bind("127.0.0.1:0").await?;
    let a = TcpListener::bind("127.0.0.1:0").await?;
    let decision = format!("http://{}", d.local_addr()?);
    let admin = format!("http://{}", a.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let ran = run(
            Listeners {
                decision: d,
                admin: a,
                grpc: None,
                ratelimit_http: sluice_backend::RatelimitHttp::Off,
            },
            Config::new(store, TOKEN),
            async move {
                let _ = stopped.await;
            },
        )
        .await;
        if let Err(e) = ran {
            eprintln!("bench_http: sluice stopped: {e}");
        }
    });
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{admin}/healthz")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Server {
        decision,
        admin,
        stop: Some(stop),
        handle,
    })
}

impl Server {
    async fn put_rules(&self) -> Result<()> {
        let http = reqwest::Client::new();
        for algorithm in ALGORITHMS {
            let rule = if matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket") {
                json!({"action": algorithm, "algorithm": algorithm, "capacity": 50, "rate": {"count": 100, "period": "1s"}})
            } else {
                json!({"action": algorithm, "algorithm": algorithm, "capacity": 100, "window": "1s"})
            };
            let r = http
                .put(format!("{}/v1/rules/{algorithm}", self.admin))
                .bearer_auth(TOKEN)
                .json(&rule)
                .send()
                .await
                .with_context(|| format!("PUT /v1/rules/{algorithm}"))?;
            ensure!(
                r.status().is_success(),
                "PUT /v1/rules/{algorithm}: {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.handle.await;
    }
}

struct Figures {
    per_s: f64,
    p50_us: u64,
    p99_us: u64,
    errors: u64,
}

/// Drives `clients` keep-alive clients for `secs`; `action` None measures GET /healthz.
async fn drive(base: &str, action: Option<&str>, secs: f64, clients: usize) -> Result<Figures> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let base = Arc::new(base.to_owned());
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let base = base.clone();
        let action = action.map(str::to_owned);
        tasks.spawn(async move {
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()?;
            let mut latencies = Vec::with_capacity(16_384);
            let mut errors = 0u64;
            let mut i = c;
            while Instant::now() < end {
                let t = Instant::now();
                let ok = match &action {
                    Some(a) => {
                        let body = json!({"action": a, "key": format!("user-{}", i % KEYS)});
                        match http
                            .post(format!("{base}/v1/throttle"))
                            .json(&body)
                            .send()
                            .await
                        {
                            Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                            Err(_) => false,
                        }
                    }
                    None => match http.get(format!("{base}/healthz")).send().await {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    },
                };
                latencies.push(t.elapsed().as_micros() as u64);
                if !ok {
                    errors += 1;
                }
                i += clients;
            }
            Ok::<_, reqwest::Error>((latencies, errors))
        });
    }
    let started = Instant::now();
    let mut all = Vec::new();
    let mut errors = 0;
    while let Some(r) = tasks.join_next().await {
        let (l, e) = r??;
        all.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64().max(secs);
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    Ok(Figures {
        per_s: all.len() as f64 / elapsed,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        errors,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let clients: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);

    let redis = RedisServer::start();
    let memory = start(StoreChoice::Memory).await?;
    let mut redis_config = RedisConfig::new(RedisTarget::Single(redis.url()));
    redis_config.timeout = Duration::from_millis(200);
    let on_redis = start(StoreChoice::Redis(redis_config)).await?;
    memory.put_rules().await?;
    on_redis.put_rules().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    println!("sluice HTTP decisions: {clients} keep-alive clients, {secs} s per cell, {KEYS} keys, client and server in one process");
    println!(
        "{:<16} {:>14} {:>16} {:>14} {:>16} {:>8}",
        "workload", "memory/s", "memory p50/p99", "redis/s", "redis p50/p99", "ratio"
    );
    let row = |name: &str, m: &Figures, r: &Figures| {
        println!(
            "{:<16} {:>14.0} {:>16} {:>14.0} {:>16} {:>7.2}x{}",
            name,
            m.per_s,
            format!("{}/{} us", m.p50_us, m.p99_us),
            r.per_s,
            format!("{}/{} us", r.p50_us, r.p99_us),
            m.per_s / r.per_s.max(1.0),
            if m.errors + r.errors > 0 {
                format!("  ({} errors)", m.errors + r.errors)
            } else {
                String::new()
            },
        );
    };
    let m = drive(&memory.decision, None, secs, clients).await?;
    let r = drive(&on_redis.decision, None, secs, clients).await?;
    row("GET /healthz", &m, &r);
    for algorithm in ALGORITHMS {
        let m = drive(&memory.decision, Some(algorithm), secs, clients).await?;
        let r = drive(&on_redis.decision, Some(algorithm), secs, clients).await?;
        row(algorithm, &m, &r);
    }
    memory.stop().await;
    on_redis.stop().await;
    drop(redis);
    Ok(())
}
