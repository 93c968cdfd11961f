//! Benchmark (not a test): what a lease costs the store, per algorithm, side by side with the
//! plain decision in the same run: memory-store decisions per second, and Redis server time per
//! script call (EVALSHA `usec_per_call` from `INFO commandstats`, each variant on its own fresh
//! redis-server), with the units each call debited on average. Starts its redis-servers on free
//! loopback ports and stops them (by PID) when done.
//!
//! `cargo run --release -p sluice-backend --example bench_lease [decisions]`

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::Store;
use sluice_core::{Algorithm, Lease, Rule, Span};

/// Distinct keys the decisions are spread over (round robin).
const KEYS: usize = 1_000;
/// Concurrent tasks.
const TASKS: usize = 32;

// The tests' redis-server launcher (which may panic, as test code does: see its header).
#[path = "../tests/it/support.rs"]
mod support;
use support::RedisServer;

mod bench_common;
use bench_common::{first_arg_or, patient_redis_store, rule_for, usec_per_call};

/// Runs `total` decisions; returns (decisions per second, units debited per allowed call).
async fn run(
    store: Arc<dyn Store>,
    rule: Arc<Rule>,
    lease: Option<Lease>,
    total: usize,
) -> Result<(f64, f64)> {
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("user-{i}")).collect());
    let start = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, rule, keys) = (store.clone(), rule.clone(), keys.clone());
            tokio::spawn(async move {
                let (mut allowed, mut units) = (0u64, 0u64);
                for i in (t..total).step_by(TASKS) {
                    let got = store
                        .throttle_leased(&rule, &keys[i % KEYS], 1, lease)
                        .await?;
                    if got.decision.allowed {
                        allowed += 1;
                        units += 1 + got.grant.map_or(0, |g| g.units);
                    }
                }
                Ok::<_, sluice_backend::store::StoreError>((allowed, units))
            })
        })
        .collect();
    let (mut allowed, mut units) = (0u64, 0u64);
    for handle in handles {
        let (a, u) = handle.await??;
        allowed += a;
        units += u;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    Ok((rate, units as f64 / allowed.max(1) as f64))
}

async fn redis_row(rule: Arc<Rule>, lease: Option<Lease>, total: usize) -> Result<(f64, f64)> {
    let server = RedisServer::start();
    let store = patient_redis_store(&server).await?;
    run(store.clone(), rule.clone(), lease, total / 10).await?; // warm up, load the script
    server.cli(&["CONFIG", "RESETSTAT"]);
    let (_, units) = run(store, rule, lease, total).await?;
    Ok((usec_per_call(&server, "evalsha")?, units))
}

#[tokio::main]
async fn main() -> Result<()> {
    let total = first_arg_or(200_000)?;
    let lease = Lease {
        max: 64,
        ttl: Span::parse("1s")?,
    };
    println!(
        "{total} decisions over {KEYS} keys, {TASKS} tasks; capacity 10000 per second; lease max 64"
    );
    println!(
        "{:<16} {:>14} {:>14} {:>10} {:>14} {:>14} {:>10}",
        "algorithm",
        "memory plain/s",
        "memory lease/s",
        "units/call",
        "redis plain µs",
        "redis lease µs",
        "units/call"
    );
    for algorithm in Algorithm::ALL.map(Algorithm::name) {
        let rule = Arc::new(rule_for(algorithm, 10_000)?);
        let memory = || -> Arc<dyn Store> { Arc::new(MemoryStore::new()) };
        let (plain, _) = run(memory(), rule.clone(), None, total).await?;
        let (leased, units) = run(memory(), rule.clone(), Some(lease), total).await?;
        let (redis_plain, _) = redis_row(rule.clone(), None, total).await?;
        let (redis_leased, redis_units) = redis_row(rule.clone(), Some(lease), total).await?;
        println!(
            "{algorithm:<16} {plain:>14.0} {leased:>14.0} {units:>10.1} {redis_plain:>14.2} {redis_leased:>14.2} {redis_units:>10.1}"
        );
    }
    Ok(())
}
