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

pub(crate) use self::sentinel::sentinel_client;
pub use self::sentinel::RETRY_EVERY as SENTINEL_RETRY_EVERY;

use self::cluster::ClusterReady;
use self::sentinel::SentinelConn;
use super::security::{Credentials, HostnameCheck, RedisSecurity};
use super::target::RedisTarget;
use crate::store::StoreError;

/// The first pause between two attempts to connect to a single node.
const RETRY_MIN_DELAY: Duration = Duration::from_millis(25);

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
    /// Connects, with `security`'s TLS and credentials; each network round trip is bounded by
    /// `timeout`.
    pub(crate) async fn open(
        target: &RedisTarget,
        security: &RedisSecurity,
        timeout: Duration,
    ) -> RedisResult<Conn> {
        super::security::install_crypto_provider();
        match target {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(security.node(url, Credentials::Ours)?)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(2)
                    // 25 then 50 ms between attempts (redis-rs's default starts at 100 ms): a
                    // refused certificate or a plaintext port is reported within a second.
                    .set_min_delay(RETRY_MIN_DELAY);
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(client, config).await?,
                ))
            }
            RedisTarget::Sentinel(target) => Ok(Conn::Sentinel(
                SentinelConn::open(target, security, timeout).await?,
            )),
            RedisTarget::Cluster(urls) => {
                let client = cluster_builder(urls, security)?
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()?;
                let template = match urls.first() {
                    Some(url) => Some(security.node(url, Credentials::Ours)?),
                    None => None,
                };
                Ok(Conn::Cluster(
                    client.get_async_connection().await?,
                    ClusterReady::new(template),
                ))
            }
        }
    }
}

/// A Cluster client builder over the seed `urls` with `security` applied: TLS (redis-rs applies
/// the certificates and hostname check to every node it discovers, not only the seeds) and the
/// credentials.
pub(crate) fn cluster_builder(
    urls: &[String],
    security: &RedisSecurity,
) -> RedisResult<ClusterClientBuilder> {
    let nodes = urls
        .iter()
        .map(|url| security.node(url, Credentials::Ours))
        .collect::<RedisResult<Vec<_>>>()?;
    let mut builder = ClusterClientBuilder::new(nodes);
    if let Some(certs) = security.certificates() {
        builder = builder.certs(certs);
    }
    if security.hostname() == HostnameCheck::Skip {
        builder = builder.danger_accept_invalid_hostnames(true);
    }
    Ok(builder)
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
