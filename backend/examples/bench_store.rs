//! Benchmark (not a test): decisions per second of the memory store vs the Redis store for each
//! algorithm, and Redis server time per call (EVALSHA, from `INFO commandstats`) next to a plain
//! `INCR` measured in the same run. Starts its own redis-server on a free loopback port and stops
//! it (by PID) at the end.
//!
//! `cargo run --release -p sluice-backend --example bench_store [decisions] [tasks]`

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::Store;
use sluice_core::Rule;

/// Distinct keys the decisions are spread over (round robin).
const KEYS: usize = 1_000;

// The tests' redis-server launcher (which may panic, as test code does: see its header).
#[path = "../tests/it/support.rs"]
mod support;
use support::RedisServer;

mod bench_common;
use bench_common::{rule_for, usec_per_call};

/// Runs `total` decisions over `tasks` concurrent tasks; returns decisions per second.
async fn run(store: Arc<dyn Store>, rule: Arc<Rule>, total: usize, tasks: usize) -> Result<f64> {
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("user-{i}")).collect());
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, rule, keys) = (store.clone(), rule.clone(), keys.clone());
            tokio::spawn(async move {
                for i in (t..total).step_by(tasks) {
                    store.throttle(&rule, &keys[i % KEYS], 1).await?;
                }
                Ok::<_, sluice_backend::store::StoreError>(())
            })
        })
        .collect();
    for handle in handles {
        handle.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Plain INCRs over the same kind of connection: the floor of any Redis round trip.
async fn run_incr(url: &str, total: usize, tasks: usize) -> Result<f64> {
    let client = redis::Client::open(url)?;
    let conn = redis::aio::ConnectionManager::new(client).await?;
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                for i in (t..total).step_by(tasks) {
                    let _: i64 = redis::cmd("INCR")
                        .arg(format!("bench:incr:{}", i % KEYS))
                        .query_async(&mut conn)
                        .await?;
                }
                Ok::<_, redis::RedisError>(())
            })
        })
        .collect();
    for handle in handles {
        handle.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let total: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let tasks: usize = args.next().map_or(Ok(16), |a| a.parse())?;
    let server = RedisServer::start();
    let url = server.url();
    let redis: Arc<dyn Store> =
        Arc::new(RedisStore::connect(RedisConfig::new(RedisTarget::Single(url.clone()))).await?);
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());

    server.cli(&["CONFIG", "RESETSTAT"]);
    let incr_rate = run_incr(&url, total, tasks).await?;
    let incr_usec = usec_per_call(&server, "incr")?;

    println!("{total} decisions per case, {tasks} concurrent tasks, {KEYS} keys, capacity 100");
    println!(
        "{:<16} {:>14} {:>14} {:>10} {:>16} {:>12}",
        "algorithm", "memory dec/s", "redis dec/s", "mem/redis", "redis usec/call", "x INCR"
    );
    println!(
        "{:<16} {:>14} {:>14.0} {:>10} {:>16.2} {:>12.2}",
        "INCR (baseline)", "-", incr_rate, "-", incr_usec, 1.0
    );
    for algorithm in [
        "gcra",
        "leaky_bucket",
        "token_bucket",
        "fixed_window",
        "sliding_log",
        "sliding_window",
    ] {
        let rule = Arc::new(rule_for(algorithm, 100)?);
        let memory_rate = run(memory.clone(), rule.clone(), total, tasks).await?;
        server.cli(&["CONFIG", "RESETSTAT"]);
        let redis_rate = run(redis.clone(), rule, total, tasks).await?;
        let usec = usec_per_call(&server, "evalsha")?;
        println!(
            "{:<16} {:>14.0} {:>14.0} {:>10.1} {:>16.2} {:>12.2}",
            algorithm,
            memory_rate,
            redis_rate,
            memory_rate / redis_rate,
            usec,
            usec / incr_usec
        );
    }
    Ok(())
}
