//! Benchmark (not a test): what a spray of distinct keys costs in memory, side by side in one
//! run: the memory store's resident set (without a bound, and with `--max-keys`) and Redis
//! `used_memory` (without `maxmemory`, and with `maxmemory` + `volatile-lru`), at a few key
//! counts, then the memory store's bytes per key for each algorithm.
//!
//! Each memory figure comes from a child process (this binary re-run with `--child`), so one
//! spray's freed memory never flatters the next. Starts its own redis-servers on free loopback
//! ports and stops them (by PID) at the end. Bounded: at most `points`' largest count of keys per
//! column, and a Redis column stops at its time budget (the figures it reached are printed).
//!
//! `cargo run --release -p sluice-backend --example bench_spray [-- POINTS [MAX_KEYS [MAXMEMORY_MB]]]`
//! e.g. `-- 100000,250000,500000 100000 32`.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sluice_backend::store::memory::sizing::BYTES_PER_KEY;
use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::DecisionStore;
use sluice_core::Rule;

// The tests' redis-server launcher (which may panic, as test code does: see its header).
#[path = "../tests/it/support.rs"]
mod support;
use support::RedisServer;
use support::ALGORITHMS;

/// The issue's spray: a sliding_window rule with a 1 h window (nothing expires during the run).
const SPRAY_ALGORITHM: &str = "sliding_window";
/// Concurrent callers for the Redis sprays (the memory store is sprayed from one thread).
const REDIS_TASKS: usize = 32;
/// Most time one Redis column may take.
const REDIS_BUDGET: Duration = Duration::from_secs(45);
/// Keys sprayed per algorithm for the bytes-per-key table.
const PER_ALGORITHM_KEYS: u64 = 300_000;

fn rule_for(algorithm: &str) -> Result<Rule> {
    let limit = if algorithm.contains("window") || algorithm == "sliding_log" {
        r#""window":"1h""#
    } else {
        r#""rate":{"count":100,"period":"1h"}"#
    };
    let json = format!(r#"{{"action":"spray","algorithm":"{algorithm}","capacity":100,{limit}}}"#);
    Ok(Rule::from_json_str(&json)?)
}

/// The sprayed key number `i`: what a rotating user id or IP looks like.
fn key(i: u64) -> String {
    format!("user-{i:08}")
}

/// This process's resident set, in bytes (`VmRSS` in /proc/self/status).
fn rss_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("VmRSS in /proc/self/status")?
        .parse()?;
    Ok(kb * 1024)
}

/// One point of a column: keys sprayed, bytes grown, keys held, live evictions.
#[derive(Debug, Clone, Copy)]
struct Point {
    sprayed: u64,
    bytes: u64,
    held: Option<u64>,
    evicted: u64,
}

/// Child: sprays a memory store (bounded by `max_keys`, 0 = unbounded) with `algorithm` and
/// prints one `sprayed bytes held evicted` line per point.
async fn child(algorithm: &str, max_keys: usize, points: &[u64]) -> Result<()> {
    let store = if max_keys == 0 {
        MemoryStore::with_max_keys(usize::MAX)
    } else {
        MemoryStore::with_max_keys(max_keys)
    };
    let rule = rule_for(algorithm)?;
    let base = rss_bytes()?;
    let mut sprayed = 0;
    for &point in points {
        while sprayed < point {
            store.throttle(&rule, &key(sprayed), 1).await?;
            sprayed += 1;
        }
        let grown = rss_bytes()?.saturating_sub(base);
        println!(
            "{sprayed} {grown} {} {}",
            store.state_count(),
            store.evictions()
        );
    }
    Ok(())
}

/// Runs a child for one memory column.
fn memory_column(algorithm: &str, max_keys: usize, points: &[u64]) -> Result<Vec<Point>> {
    let list: Vec<String> = points.iter().map(u64::to_string).collect();
    let out = Command::new(std::env::current_exe()?)
        .args(["--child", algorithm, &max_keys.to_string(), &list.join(",")])
        .output()?;
    if !out.status.success() {
        bail!(
            "child for {algorithm} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout)?
        .lines()
        .map(|line| {
            let f: Vec<u64> = line
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()?;
            match f[..] {
                [sprayed, bytes, held, evicted] => Ok(Point {
                    sprayed,
                    bytes,
                    held: Some(held),
                    evicted,
                }),
                _ => bail!("child line {line:?}"),
            }
        })
        .collect()
}

/// `field` of `INFO section` as a number.
fn info_field(server: &RedisServer, section: &str, field: &str) -> Result<u64> {
    let info = server.cli(&["INFO", section]);
    let value = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .with_context(|| format!("{field} in INFO {section}"))?;
    Ok(value.trim().parse()?)
}

/// Sprays a fresh redis-server started with `extra` arguments; stops early at the time budget.
async fn redis_column(extra: &[&str], points: &[u64]) -> Result<Vec<Point>> {
    let server = RedisServer::start_with(extra);
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    // A shared 2-core machine may stall a command past the production 50 ms; this measures
    // memory, not latency.
    config.timeout = Duration::from_secs(2);
    let store = Arc::new(RedisStore::connect(config).await?);
    let rule = Arc::new(rule_for(SPRAY_ALGORITHM)?);
    let base = info_field(&server, "memory", "used_memory")?;
    let started = Instant::now();
    let mut column = Vec::new();
    let mut sprayed = 0;
    for &point in points {
        let from = sprayed;
        let tasks: Vec<_> = (0..REDIS_TASKS as u64)
            .map(|t| {
                let (store, rule) = (store.clone(), rule.clone());
                tokio::spawn(async move {
                    for i in (from + t..point).step_by(REDIS_TASKS) {
                        if started.elapsed() > REDIS_BUDGET {
                            return Ok(i);
                        }
                        store.throttle(&rule, &key(i), 1).await?;
                    }
                    Ok::<_, sluice_backend::store::StoreError>(point)
                })
            })
            .collect();
        let mut reached = point;
        for task in tasks {
            reached = reached.min(task.await??);
        }
        sprayed = reached;
        column.push(Point {
            sprayed,
            bytes: info_field(&server, "memory", "used_memory")?.saturating_sub(base),
            held: server.cli(&["DBSIZE"]).trim().parse().ok(),
            evicted: info_field(&server, "stats", "evicted_keys")?,
        });
        if reached < point {
            break;
        }
    }
    Ok(column)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn cell(point: Option<&Point>) -> String {
    match point {
        None => "-".to_owned(),
        Some(p) => {
            let held = p.held.map_or(String::new(), |h| format!(" {h} held"));
            format!("{}{held}, {} evicted", mb(p.bytes), p.evicted)
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse_points = |text: &str| -> Result<Vec<u64>> {
        text.split(',').map(|p| Ok(p.trim().parse()?)).collect()
    };
    if args.first().map(String::as_str) == Some("--child") {
        let [_, algorithm, max_keys, points] = &args[..] else {
            bail!("--child ALGORITHM MAX_KEYS POINTS");
        };
        return child(algorithm, max_keys.parse()?, &parse_points(points)?).await;
    }
    let points = parse_points(args.first().map_or("100000,250000,500000", String::as_str))?;
    let max_keys: usize = args.get(1).map_or(Ok(100_000), |a| a.parse())?;
    let maxmemory_mb: u64 = args.get(2).map_or(Ok(32), |a| a.parse())?;
    let maxmemory = format!("{maxmemory_mb}mb");

    println!(
        "key spray: {SPRAY_ALGORITHM} rule, 1 h window, one request per new key; memory = RSS growth \
         of a child process, Redis = used_memory growth"
    );
    let unbounded = memory_column(SPRAY_ALGORITHM, 0, &points)?;
    let bounded = memory_column(SPRAY_ALGORITHM, max_keys, &points)?;
    let redis_plain = redis_column(&[], &points).await?;
    let redis_lru = redis_column(
        &[
            "--maxmemory",
            &maxmemory,
            "--maxmemory-policy",
            "volatile-lru",
        ],
        &points,
    )
    .await?;
    println!(
        "{:>10} | {:<36} | {:<36} | {:<36} | {:<36}",
        "keys",
        "memory, unbounded",
        format!("memory, --max-keys {max_keys}"),
        "Redis, no maxmemory",
        format!("Redis, maxmemory {maxmemory} volatile-lru"),
    );
    for (i, &point) in points.iter().enumerate() {
        let at = |column: &[Point]| cell(column.get(i).filter(|p| p.sprayed == point));
        println!(
            "{point:>10} | {:<36} | {:<36} | {:<36} | {:<36}",
            at(&unbounded),
            at(&bounded),
            at(&redis_plain),
            at(&redis_lru),
        );
    }
    for (name, column) in [
        ("Redis, no maxmemory", &redis_plain),
        ("Redis, LRU", &redis_lru),
    ] {
        if let Some(last) = column.last().filter(|p| Some(&p.sprayed) != points.last()) {
            println!(
                "{name}: stopped at {} keys (time budget {REDIS_BUDGET:?})",
                last.sprayed
            );
        }
    }
    if let (Some(m), Some(r)) = (unbounded.last(), redis_plain.last()) {
        println!(
            "bytes per key, unbounded: memory store {:.0}, Redis {:.0}",
            m.bytes as f64 / m.sprayed as f64,
            r.bytes as f64 / r.sprayed.max(1) as f64
        );
    }

    let per_bound = PER_ALGORITHM_KEYS / 3;
    println!(
        "\nmemory store by algorithm, one request per key: RSS per key sprayed without a bound \
         ({PER_ALGORITHM_KEYS} keys), and per key of the bound with --max-keys {per_bound} \
         ({PER_ALGORITHM_KEYS} keys sprayed); --max-keys counts {BYTES_PER_KEY} bytes per key:"
    );
    for algorithm in ALGORITHMS {
        let column = memory_column(algorithm, 0, &[PER_ALGORITHM_KEYS])?;
        let unbounded = column.last().context("one point")?;
        let column = memory_column(algorithm, per_bound as usize, &[PER_ALGORITHM_KEYS])?;
        let bounded = column.last().context("one point")?;
        println!(
            "{algorithm:>16}: {:>4.0} bytes/key unbounded, {:>4.0} bytes per key of the bound ({} held)",
            unbounded.bytes as f64 / unbounded.sprayed as f64,
            bounded.bytes as f64 / per_bound as f64,
            bounded.held.unwrap_or(0),
        );
    }
    Ok(())
}
