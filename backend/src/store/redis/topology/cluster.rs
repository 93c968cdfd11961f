//! Cluster readiness: whether every slot has a master that answers now.
//!
//! A plain `PING` through the cluster client is not enough: redis-rs fans a keyless command out
//! to the masters it *has a connection to*, and silently skips one it lost, so `/readyz` said
//! ready during the seconds a killed master's slots had no master at all. Routing a `PING` by
//! slot is no better: the client's retry sends a keyless command to some other node. So the
//! slot map is read (`CLUSTER SLOTS`, from any node that answers, through the cluster
//! connection) and each master it names is pinged over a direct single-node connection of its
//! own, in parallel, each bounded by the store's timeout. The direct connections are cached per
//! address (a probe every few seconds should not cost a handshake per master) and dropped on any
//! failure, so a master that comes back is connected afresh.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use crate::store::StoreError;

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;
/// How many nodes are asked for the slot map before giving up (a random node may be the dead one).
const SLOT_MAP_TRIES: usize = 3;

/// What a readiness check needs besides the cluster connection: how to open a direct connection
/// to one node with the cluster URL's settings (auth, protocol, TLS), and the open ones. Cheap to
/// clone (shared).
#[derive(Clone)]
pub(crate) struct ClusterReady {
    /// The first seed URL's settings; only the address is replaced per node.
    template: Option<Arc<ConnectionInfo>>,
    cached: Arc<Mutex<HashMap<String, MultiplexedConnection>>>,
}

/// One range of slots and the master the slot map names for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    first: u16,
    last: u16,
    master: String,
}

impl ClusterReady {
    /// From the first seed node's settings, TLS and credentials applied (`None`: plain TCP,
    /// no credentials).
    pub(crate) fn new(template: Option<ConnectionInfo>) -> ClusterReady {
        ClusterReady {
            template: template.map(Arc::new),
            cached: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Ok when every slot has a master and every master answers `PING` within `timeout`;
    /// otherwise [`StoreError::Unavailable`] naming the unserved slot ranges and their master.
    pub(crate) async fn check(
        &self,
        cluster: &ClusterConnection,
        timeout: Duration,
    ) -> Result<(), StoreError> {
        let ranges = read_slot_map(cluster, timeout).await?;
        let mut problems: Vec<String> = gaps(&ranges)
            .into_iter()
            .map(|(a, b)| format!("slots {} have no master", span(a, b)))
            .collect();
        let mut masters: Vec<&str> = ranges.iter().map(|r| r.master.as_str()).collect();
        masters.sort_unstable();
        masters.dedup();
        let answers =
            futures::future::join_all(masters.iter().map(|m| self.ping(m, timeout))).await;
        for (master, answer) in masters.iter().zip(answers) {
            if let Err(why) = answer {
                let served: Vec<String> = ranges
                    .iter()
                    .filter(|r| r.master == *master)
                    .map(|r| span(r.first, r.last))
                    .collect();
                problems.push(format!(
                    "slots {}: their master {master} does not answer ({why})",
                    served.join(",")
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "Redis Cluster not serving every slot: {}",
                problems.join("; ")
            )))
        }
    }

    /// PINGs one node over its own connection (opened if needed); a failure drops the cached
    /// connection so the next check connects afresh.
    async fn ping(&self, address: &str, timeout: Duration) -> Result<(), String> {
        let cached = self
            .cached
            .lock()
            .ok()
            .and_then(|m| m.get(address).cloned());
        let work = async {
            let mut conn = match cached {
                Some(conn) => conn,
                None => {
                    let client =
                        redis::Client::open(self.info_for(address)?).map_err(|e| e.to_string())?;
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout));
                    let conn = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map_err(|e| e.to_string())?;
                    if let Ok(mut m) = self.cached.lock() {
                        m.insert(address.to_owned(), conn.clone());
                    }
                    conn
                }
            };
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let result = match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
        };
        if result.is_err() {
            if let Ok(mut m) = self.cached.lock() {
                m.remove(address);
            }
        }
        result
    }

    /// The seed URL's settings with `address` (`host:port`) as the address.
    fn info_for(&self, address: &str) -> Result<ConnectionInfo, String> {
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("not a host:port address: {address:?}"))?;
        let Some(template) = &self.template else {
            return ConnectionAddr::Tcp(host, port)
                .into_connection_info()
                .map_err(|e| e.to_string());
        };
        let mut addr = template.addr().clone();
        match &mut addr {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                *h = host;
                *p = port;
            }
            _ => addr = ConnectionAddr::Tcp(host, port),
        }
        Ok(ConnectionInfo::clone(template).set_addr(addr))
    }
}

/// Reads `CLUSTER SLOTS` from a random node, trying another when one does not answer.
async fn read_slot_map(
    cluster: &ClusterConnection,
    timeout: Duration,
) -> Result<Vec<Range>, StoreError> {
    let mut last = String::new();
    for _ in 0..SLOT_MAP_TRIES {
        let mut c = cluster.clone();
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
        match tokio::time::timeout(timeout, c.route_command(cmd, routing)).await {
            Ok(Ok(value)) => {
                return parse_slots(&value).ok_or_else(|| {
                    StoreError::Unavailable(format!("an unexpected CLUSTER SLOTS reply {value:?}"))
                })
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {} ms", timeout.as_millis()),
        }
    }
    Err(StoreError::Unavailable(format!(
        "cannot read the Redis Cluster slot map: {last}"
    )))
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, ...], replicas...], ...]`.
fn parse_slots(value: &Value) -> Option<Vec<Range>> {
    let Value::Array(entries) = value else {
        return None;
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(parts) = entry else {
                return None;
            };
            let (Value::Int(first), Value::Int(last), Value::Array(master)) =
                (parts.first()?, parts.get(1)?, parts.get(2)?)
            else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let Value::Int(port) = master.get(1)? else {
                return None;
            };
            Some(Range {
                first: u16::try_from(*first).ok()?,
                last: u16::try_from(*last).ok()?,
                master: format!("{host}:{port}"),
            })
        })
        .collect()
}

/// The slot ranges no entry covers.
fn gaps(ranges: &[Range]) -> Vec<(u16, u16)> {
    let mut sorted: Vec<(u16, u16)> = ranges.iter().map(|r| (r.first, r.last)).collect();
    sorted.sort_unstable();
    let mut out = Vec::new();
    let mut next: u32 = 0;
    for (first, last) in sorted {
        if u32::from(first) > next {
            out.push((next as u16, first - 1));
        }
        next = next.max(u32::from(last) + 1);
    }
    if next < u32::from(SLOTS) {
        out.push((next as u16, SLOTS - 1));
    }
    out
}

fn span(first: u16, last: u16) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: i64, last: i64, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
        ])
    }

    #[test]
    fn the_slot_map_is_read_and_its_holes_found() {
        let map = parse_slots(&Value::Array(vec![
            entry(5461, 10922, 7001),
            entry(0, 5460, 7000),
        ]))
        .expect("parsed");
        assert_eq!(map[1].master, "127.0.0.1:7000");
        assert_eq!(gaps(&map), vec![(10923, 16383)]);
        let full = parse_slots(&Value::Array(vec![
            entry(0, 5460, 7000),
            entry(5461, 16383, 7001),
        ]))
        .expect("parsed");
        assert!(gaps(&full).is_empty());
        assert_eq!(gaps(&[]), vec![(0, 16383)]);
        assert_eq!(parse_slots(&Value::Int(1)), None);
    }

    #[test]
    fn a_node_address_keeps_the_seed_settings() {
        let ready = ClusterReady::new("redis://:secret@127.0.0.1:7000".into_connection_info().ok());
        let info = ready.info_for("10.0.0.2:7005").expect("info");
        assert_eq!(
            info.addr(),
            &ConnectionAddr::Tcp("10.0.0.2".to_owned(), 7005)
        );
        assert_eq!(info.redis_settings().password(), Some("secret"));
        assert!(ready.info_for("nonsense").is_err());
    }
}
