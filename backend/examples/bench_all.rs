//! Benchmark (not a test): what deciding three limits all or nothing costs, side by side with
//! three separate decisions in the same run (what a caller without `throttle_all` does, with no
//! atomicity): requests per second on the memory store and on a fresh redis-server, and Redis
//! server time per request (EVALSHA `usec_per_call` × calls per request, from
//! `INFO commandstats`). Two traffic shapes: mostly allowed (the limits are far away), and mostly
//! denied by the third limit (the single-node script then puts the first two keys back).
//! Starts its redis-servers on free loopback ports and stops them (by PID) when done.
//!
//! `cargo run --release -p sluice-backend --example bench_all [requests]`

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::{CheckRequest, Store};
use sluice_core::all::Part;
use sluice_core::Rule;

/// Distinct users the requests are spread over (round robin).
const KEYS: usize = 1_000;
/// Concurrent tasks.
const TASKS: usize = 32;

#[path = "../tests/it/support.rs"]
mod support;
use support::RedisServer;

mod bench_common;
use bench_common::{first_arg_or, patient_redis_store, usec_per_call};

fn rule(json: &str) -> Result<Rule> {
    Ok(Rule::from_json_str(json)?)
}

/// Per user (gcra), per IP (sliding_window), global (fixed_window, capacity `global`).
fn rules(global: u64) -> Result<Arc<[Rule; 3]>> {
    Ok(Arc::new([
        rule(
            r#"{"action":"b_user","algorithm":"gcra","capacity":1000000,"rate":{"count":1000000,"period":"1s"}}"#,
        )?,
        rule(r#"{"action":"b_ip","algorithm":"sliding_window","capacity":1000000,"window":"1s"}"#)?,
        rule(&format!(
            r#"{{"action":"b_all","algorithm":"fixed_window","capacity":{global},"window":"7d"}}"#
        ))?,
    ]))
}

/// Runs `total` requests of three checks; `all`: one throttle_all, else three throttle calls.
/// Returns requests per second.
async fn run(store: Arc<dyn Store>, rules: Arc<[Rule; 3]>, all: bool, total: usize) -> Result<f64> {
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("user-{i}")).collect());
    let start = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, rules, keys) = (store.clone(), rules.clone(), keys.clone());
            tokio::spawn(async move {
                for i in (t..total).step_by(TASKS) {
                    let user = &keys[i % KEYS];
                    let ip = &keys[(i / 7) % KEYS];
                    if all {
                        let checks = [
                            CheckRequest {
                                rule: &rules[0],
                                key: user,
                                quantity: 1,
                                part: Part::AllOrNothing,
                            },
                            CheckRequest {
                                rule: &rules[1],
                                key: ip,
                                quantity: 1,
                                part: Part::AllOrNothing,
                            },
                            CheckRequest {
                                rule: &rules[2],
                                key: "all",
                                quantity: 1,
                                part: Part::AllOrNothing,
                            },
                        ];
                        store.throttle_all(&checks).await?;
                    } else {
                        store.throttle(&rules[0], user, 1).await?;
                        store.throttle(&rules[1], ip, 1).await?;
                        store.throttle(&rules[2], "all", 1).await?;
                    }
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

/// (requests per second, Redis µs per request) on a fresh redis-server.
async fn redis_row(rules: Arc<[Rule; 3]>, all: bool, total: usize) -> Result<(f64, f64)> {
    let server = RedisServer::start();
    let store = patient_redis_store(&server).await?;
    run(store.clone(), rules.clone(), all, 1_000).await?; // load the scripts
    server.cli(&["CONFIG", "RESETSTAT"]);
    let rate = run(store, rules, all, total).await?;
    let calls = if all { 1.0 } else { 3.0 };
    Ok((rate, usec_per_call(&server, "evalsha")? * calls))
}

#[tokio::main]
async fn main() -> Result<()> {
    let total = first_arg_or(100_000)?;
    println!("{total} requests of three limits (gcra per user, sliding_window per IP, fixed_window global), {TASKS} tasks");
    println!(
        "{:<16} {:>16} {:>16} {:>14} {:>14} {:>12} {:>12}",
        "traffic",
        "memory 3 calls/s",
        "memory all/s",
        "redis 3 calls/s",
        "redis all/s",
        "3 calls µs",
        "all µs"
    );
    // The global limit denies none, or (capacity 1) all but the first request.
    for (name, global) in [("mostly allowed", 10_000_000), ("mostly denied", 1)] {
        let r = rules(global)?;
        let memory = || -> Arc<dyn Store> { Arc::new(MemoryStore::new()) };
        let mem_three = run(memory(), r.clone(), false, total).await?;
        let mem_all = run(memory(), r.clone(), true, total).await?;
        let (redis_three, us_three) = redis_row(r.clone(), false, total).await?;
        let (redis_all, us_all) = redis_row(r.clone(), true, total).await?;
        println!(
            "{name:<16} {mem_three:>16.0} {mem_all:>16.0} {redis_three:>14.0} {redis_all:>14.0} {us_three:>12.2} {us_all:>12.2}"
        );
    }
    Ok(())
}
