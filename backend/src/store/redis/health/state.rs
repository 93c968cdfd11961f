//! The Redis store's health watcher ([`Health`]): one probe per interval, its latest reading
//! published; apart from the trait that serves it (`../health.rs`), so that `mod.rs` holds it
//! without importing the trait's file.

use std::time::Duration;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisError, RedisResult, Value};
use sluice_core::wire::StoreHealth;
use tokio::sync::{mpsc, oneshot, watch};

use super::super::sizing::{self, NodeReading};
use super::super::topology::Conn;

/// How often the memory settings are read again after connect.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(10);

/// The store's side: the latest snapshot, and a way to ask the task for a reading now. Dropping
/// it (with the store) ends the task.
pub(crate) struct Health {
    latest: watch::Receiver<StoreHealth>,
    requests: mpsc::Sender<oneshot::Sender<StoreHealth>>,
}

impl Health {
    /// Reads the settings once (so the log and `health()` are right from the start), then
    /// spawns the task that reads them again every `every`. `timeout` bounds each reading. Never
    /// fails: a first reading that cannot be made is logged and retried by the task.
    pub(crate) async fn start(
        conn: Conn,
        kind: &'static str,
        timeout: Duration,
        every: Duration,
    ) -> Health {
        let (publish, latest) = watch::channel(StoreHealth {
            kind: kind.to_owned(),
            ..StoreHealth::default()
        });
        let mut probe = Probe {
            conn,
            kind,
            timeout,
            publish,
            last_evictions: None,
            failing: false,
        };
        probe.refresh().await;
        let (requests, asked) = mpsc::channel(4);
        tokio::spawn(probe.run(every, asked));
        Health { latest, requests }
    }

    /// The latest snapshot (a clone under a short read lock; no I/O).
    pub(crate) fn get(&self) -> StoreHealth {
        self.latest.borrow().clone()
    }

    /// Has the task read the settings now and returns the result (the latest snapshot if the
    /// task is gone, which only happens when its runtime is shutting down).
    pub(crate) async fn refresh(&self) -> StoreHealth {
        let (reply, answer) = oneshot::channel();
        if self.requests.send(reply).await.is_err() {
            return self.get();
        }
        answer.await.unwrap_or_else(|_| self.get())
    }
}

/// Reads the settings and publishes the snapshot; owned by the background task.
pub(crate) struct Probe {
    conn: Conn,
    kind: &'static str,
    timeout: Duration,
    publish: watch::Sender<StoreHealth>,
    /// `evicted_keys` at the previous reading (None before the first).
    last_evictions: Option<u64>,
    /// Whether the previous reading failed, so its failure is logged once, not every interval.
    failing: bool,
}

impl Probe {
    /// Reads every node once and publishes the result; logs what changed. Never fails: a reading
    /// that cannot be made keeps the last snapshot.
    pub(crate) async fn refresh(&mut self) -> StoreHealth {
        let readings = match tokio::time::timeout(self.timeout, read_nodes(&self.conn)).await {
            Ok(Ok(readings)) => readings,
            Ok(Err(e)) => return self.failed(&e.to_string()),
            Err(_) => return self.failed(&format!("no answer within {:?}", self.timeout)),
        };
        if self.failing {
            tracing::info!("the Redis memory settings can be read again");
            self.failing = false;
        }
        let evictions = sizing::total_evictions(&readings);
        let evicting = self.last_evictions.is_some_and(|before| evictions > before);
        self.last_evictions = Some(evictions);
        let next = StoreHealth {
            kind: self.kind.to_owned(),
            warnings: sizing::warnings(&readings, evicting),
            keys: None,
            max_keys: None,
            evictions,
        };
        let previous = self.publish.borrow().warnings.clone();
        for warning in next.warnings.iter().filter(|w| !previous.contains(w)) {
            tracing::warn!("{warning}");
        }
        for cleared in previous.iter().filter(|w| !next.warnings.contains(w)) {
            tracing::info!("no longer the case: {cleared}");
        }
        self.publish.send_replace(next.clone());
        next
    }

    pub(crate) fn failed(&mut self, why: &str) -> StoreHealth {
        if !self.failing {
            tracing::warn!(
                "cannot read the Redis memory settings ({why}); keeping the last reading and \
                 trying again later"
            );
            self.failing = true;
        }
        self.publish.borrow().clone()
    }

    /// Reads again every `every`, and whenever asked, until the [`Health`] that asks is dropped
    /// (with the store); the task also ends with the runtime when the app stops.
    pub(crate) async fn run(
        mut self,
        every: Duration,
        mut asked: mpsc::Receiver<oneshot::Sender<StoreHealth>>,
    ) {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                request = asked.recv() => match request {
                    None => return,
                    Some(reply) => {
                        let _ = reply.send(self.refresh().await);
                    }
                },
                _ = ticks.tick() => {
                    self.refresh().await;
                }
            }
        }
    }
}

/// One reading of every node that holds data.
pub(crate) async fn read_nodes(conn: &Conn) -> RedisResult<Vec<NodeReading>> {
    let configs = on_each_node(conn, redis::cmd("CONFIG").arg("GET").arg("maxmemory*")).await?;
    let infos = on_each_node(conn, redis::cmd("INFO").arg("stats")).await?;
    Ok(configs
        .into_iter()
        .map(|(node, config)| {
            let evicted_keys = infos
                .iter()
                .find(|(n, _)| *n == node)
                .and_then(|(_, info)| info.as_ref().ok())
                .and_then(text)
                .and_then(|info| sizing::parse_evicted_keys(&info));
            let settings = match config {
                Ok(value) => name_value_pairs(&value)
                    .and_then(|pairs| sizing::parse_settings(&pairs))
                    .ok_or_else(|| format!("an unexpected reply {value:?}")),
                Err(e) => Err(refusal(&e)),
            };
            NodeReading {
                node,
                settings,
                evicted_keys,
            }
        })
        .collect())
}

/// Runs `cmd` on the one node (named "") or on every Cluster master (named `host:port`). A
/// node's refusal (NOPERM, an unknown command) is that node's `Err`; failing to reach them at
/// all is the outer `Err`.
pub(crate) async fn on_each_node(
    conn: &Conn,
    cmd: &redis::Cmd,
) -> RedisResult<Vec<(String, RedisResult<Value>)>> {
    match conn.clone() {
        mut single @ (Conn::Single(_) | Conn::Sentinel(_)) => {
            match cmd.query_async::<Value>(&mut single).await {
                Ok(value) => Ok(vec![(String::new(), Ok(value))]),
                Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => Err(e),
                Err(e) => Ok(vec![(String::new(), Err(e))]),
            }
        }
        Conn::Cluster(mut c, _) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let reply = c.route_command(cmd.clone(), routing).await?;
            let Value::Map(per_node) = reply else {
                return Err(RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a per-node reply that is not a map",
                )));
            };
            let mut out: Vec<(String, RedisResult<Value>)> = per_node
                .into_iter()
                .map(|(node, value)| {
                    let node = text(&node).unwrap_or_default();
                    let value = match value {
                        Value::ServerError(e) => Err(RedisError::from(e)),
                        other => Ok(other),
                    };
                    (node, value)
                })
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(out)
        }
    }
}

/// What Redis said when it refused, without the client's quoting of the code.
pub(crate) fn refusal(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// A bulk, simple or verbatim string as text.
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// `CONFIG GET`'s reply as (name, value) pairs: a flat array (RESP2) or a map (RESP3).
pub(crate) fn name_value_pairs(value: &Value) -> Option<Vec<(String, String)>> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| match pair {
                [k, v] => Some((text(k)?, text(v)?)),
                _ => None,
            })
            .collect(),
        Value::Map(items) => items
            .iter()
            .map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn config_get_is_read_in_both_protocols() {
        let resp2 = Value::Array(vec![
            bulk("maxmemory"),
            bulk("0"),
            bulk("maxmemory-policy"),
            bulk("noeviction"),
        ]);
        let resp3 = Value::Map(vec![
            (bulk("maxmemory"), bulk("0")),
            (bulk("maxmemory-policy"), bulk("noeviction")),
        ]);
        for reply in [resp2, resp3] {
            let pairs = name_value_pairs(&reply).expect("pairs");
            assert_eq!(
                sizing::parse_settings(&pairs).map(|s| (s.maxmemory, s.policy)),
                Some((0, "noeviction".to_owned()))
            );
        }
        assert_eq!(name_value_pairs(&Value::Array(vec![bulk("odd")])), None);
        assert_eq!(name_value_pairs(&Value::Int(3)), None);
    }

    #[test]
    fn a_refusal_reads_as_redis_said_it() {
        let e = redis::make_extension_error("NOPERM".to_owned(), Some("no config|get".to_owned()));
        assert_eq!(refusal(&e), "NOPERM no config|get");
    }
}
