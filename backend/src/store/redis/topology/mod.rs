//! The Redis deployments (topologies) behind one connection type: a single node
//! (auto-reconnecting `ConnectionManager`, here), the master a set of sentinels names
//! ([`SentinelConn`], `sentinel.rs`) or a Cluster (`cluster_async`, with its readiness check in
//! `cluster.rs`), so every command is written once. All are cheap to clone and multiplexed: concurrent commands are pipelined on
//! the wire. A Sentinel-managed Redis is a single node to the rest of the store (same scripts,
//! same single-node code paths: only the Cluster is told apart).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

mod cluster;
mod sentinel;

pub use self::sentinel::RETRY_EVERY as SENTINEL_RETRY_EVERY;

use self::cluster::ClusterReady;
use self::sentinel::SentinelConn;
use super::config::RedisTarget;
use crate::store::StoreError;

/// A connection to any deployment.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One node, `redis://host:port/db`.
    Single(ConnectionManager),
    /// A Redis Cluster, and what its readiness check needs (direct connections to its masters:
    /// see `cluster.rs`).
    Cluster(ClusterConnection, ClusterReady),
    /// The master a set of sentinels names now (one node, followed across failovers).
    Sentinel(SentinelConn),
}

impl Conn {
    /// Connects; each network round trip is bounded by `timeout`.
    pub(crate) async fn open(target: &RedisTarget, timeout: Duration) -> RedisResult<Conn> {
        match target {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(2);
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(client, config).await?,
                ))
            }
            RedisTarget::Sentinel(target) => {
                Ok(Conn::Sentinel(SentinelConn::open(target, timeout).await?))
            }
            RedisTarget::Cluster(urls) => {
                let client = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()?;
                Ok(Conn::Cluster(
                    client.get_async_connection().await?,
                    ClusterReady::new(urls),
                ))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c, _) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c, _) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c, _) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// With Sentinel, the master's name and the address of the node in use, for `/readyz` and
    /// logs; `None` for other deployments, whose addresses are configured.
    pub(crate) fn sentinel_master(&self) -> Option<(String, String)> {
        match self {
            Conn::Sentinel(c) => Some(c.master()),
            _ => None,
        }
    }
}

impl Conn {
    /// A short name for logs and `/readyz`: "redis" (one node, with or without Sentinel) or
    /// "redis-cluster".
    pub(crate) fn kind(&self) -> &'static str {
        if self.is_cluster() {
            "redis-cluster"
        } else {
            "redis"
        }
    }

    /// Whether this is a Cluster, whose checks of one request live in different slots (see
    /// `all.rs`); a Sentinel-managed Redis is one node.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(..))
    }

    /// On a Cluster, whether every slot range's master answers (see `cluster.rs`: a plain PING
    /// through the cluster client skips a master it lost); `None` elsewhere, where a PING to the
    /// one node tells.
    pub(crate) async fn cluster_ready(&self, timeout: Duration) -> Option<Result<(), StoreError>> {
        match self {
            Conn::Cluster(cluster, ready) => Some(ready.check(cluster, timeout).await),
            Conn::Single(_) | Conn::Sentinel(_) => None,
        }
    }
}
