//! The Redis store (under construction): single node or Cluster.

use std::time::Duration;

/// Which Redis deployment to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One node: `redis://host:port/db`.
    Single(String),
    /// A Redis Cluster, by one or more seed node URLs.
    Cluster(Vec<String>),
}

/// How to reach and use Redis.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// The deployment.
    pub target: RedisTarget,
    /// Bound on each command, after which the request fails fast with a timeout.
    pub timeout: Duration,
    /// Bound on commands in flight; beyond it requests fail fast as overloaded instead of queueing.
    pub max_in_flight: usize,
    /// Prefix of every key sluice writes (default "sluice").
    pub key_prefix: String,
}
