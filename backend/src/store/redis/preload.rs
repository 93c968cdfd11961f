//! The decision scripts loaded on every node at connect (`SCRIPT LOAD`): without it the first
//! decision of each script on each node (on a Redis Cluster, once per master) pays for an
//! EVALSHA refused with NOSCRIPT and the EVAL that loads it, which a caller with a tight timeout
//! (envoyproxy/ratelimit's example Envoy waits 20 ms) sees as a failure. Never fatal: a node that
//! refuses (an ACL without `SCRIPT`, a failover meanwhile) still gets each script on first use.

use std::time::Duration;

use super::health::state::on_each_node;
use super::scripts::Scripts;
use super::topology::Conn;

/// Loads [`Scripts::decision_scripts`] on every node (the one node, or every Cluster master),
/// within `bound`; logs one WARN naming what was refused, or that the bound passed.
pub(super) async fn preload(conn: &Conn, scripts: &Scripts, bound: Duration) {
    let run = async {
        let mut refused: Vec<String> = Vec::new();
        for lua in scripts.decision_scripts() {
            let cmd = redis::cmd("SCRIPT").arg("LOAD").arg(lua.code()).to_owned();
            match on_each_node(conn, &cmd).await {
                Ok(per_node) => refused.extend(per_node.into_iter().filter_map(|(node, r)| {
                    r.err().map(|e| {
                        let node = if node.is_empty() { "Redis" } else { &node };
                        format!("{node}: {e}")
                    })
                })),
                Err(e) => refused.push(e.to_string()),
            }
        }
        refused
    };
    match tokio::time::timeout(bound, run).await {
        Ok(refused) if refused.is_empty() => {
            tracing::debug!("decision scripts loaded on every node")
        }
        Ok(refused) => tracing::warn!(
            refused = %refused.join("; "),
            "could not load the decision scripts ahead of use; each is loaded on its first use \
             instead (that decision takes a round trip longer)"
        ),
        Err(_) => tracing::warn!(
            bound_ms = bound.as_millis() as u64,
            "loading the decision scripts ahead of use did not finish in time; each is loaded on \
             its first use instead"
        ),
    }
}
