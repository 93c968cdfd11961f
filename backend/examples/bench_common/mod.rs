//! What the store benchmarks share: the command line's first figure, a fresh redis-server's
//! store, a rule per algorithm, and Redis server time per call from `INFO commandstats`.
//! A folder module (not `examples/*.rs`) so Cargo does not take it for an example of its own;
//! each benchmark uses only some of it.
#![allow(dead_code)]

use std::sync::Arc;

use anyhow::{Context, Result};
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::Store;
use sluice_core::Rule;

use crate::support::RedisServer;

/// The command line's first argument as a number, or `default` when there is none.
pub fn first_arg_or(default: usize) -> Result<usize> {
    Ok(std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(default))
}

/// `usec_per_call` of one command (`evalsha`, `incr`) from the server's `INFO commandstats`.
pub fn usec_per_call(server: &RedisServer, command: &str) -> Result<f64> {
    let info = server.cli(&["INFO", "commandstats"]);
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .with_context(|| format!("no cmdstat_{command} in INFO commandstats"))?;
    let field = line
        .split([':', ','])
        .find_map(|f| f.strip_prefix("usec_per_call="))
        .context("usec_per_call")?;
    Ok(field.parse()?)
}

/// A Redis store on `server` whose calls may take 2 s: a loaded machine must not turn a slow
/// answer into a failed run.
pub async fn patient_redis_store(server: &RedisServer) -> Result<Arc<dyn Store>> {
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.timeout = std::time::Duration::from_secs(2);
    Ok(Arc::new(RedisStore::connect(config).await?))
}

/// The rule `bench-<algorithm>` of `capacity` per second (a 1 s window, or a rate of
/// `capacity` per 1 s).
pub fn rule_for(algorithm: &str, capacity: u64) -> Result<Rule> {
    let limit = if algorithm.contains("window") || algorithm == "sliding_log" {
        r#""window":"1s""#.to_owned()
    } else {
        format!(r#""rate":{{"count":{capacity},"period":"1s"}}"#)
    };
    let json = format!(
        r#"{{"action":"bench-{algorithm}","algorithm":"{algorithm}","capacity":{capacity},{limit}}}"#
    );
    Ok(Rule::from_json_str(&json)?)
}
