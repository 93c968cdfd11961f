//! One connection type over a single node (auto-reconnecting `ConnectionManager`) or a Cluster
//! (`cluster_async`), so every command is written once. Both are cheap to clone and multiplexed:
//! concurrent commands are pipelined on the wire.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::RedisTarget;

/// A connection to either deployment.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One node.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
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
            RedisTarget::Cluster(urls) => {
                let client = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
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
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
