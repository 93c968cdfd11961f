//! Cluster readiness on a real 3-master Redis Cluster: `ping` (what `/readyz` asks) answers
//! ready only while every slot range has a master that answers, and otherwise names the range
//! and the master. A plain PING through the cluster client skipped a master it had lost.
use crate::support;

use std::time::Duration;

use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::{HealthStore, StoreError};
use support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_ready_only_while_every_slot_has_a_master_that_answers() {
    let mut cluster = RedisCluster::start();
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = Duration::from_millis(500);
    let store = RedisStore::connect(config).await.expect("connect");
    store.ping().await.expect("every master answers");

    // Slots without a master (unassigned on every node): not ready, the range named.
    for node in &cluster.nodes {
        node.cli(&["CLUSTER", "DELSLOTSRANGE", "0", "99"]);
    }
    let why = match store.ping().await {
        Err(StoreError::Unavailable(why)) => why,
        other => panic!("slots 0-99 have no master, yet {other:?}"),
    };
    assert!(why.contains("slots 0-99 have no master"), "{why}");

    // A master killed (before the cluster marks it failed, it still holds its slots): not ready,
    // its address named.
    let victim = cluster.nodes.len() - 1;
    let port = cluster.nodes[victim].port;
    cluster.nodes[victim].kill();
    let why = match store.ping().await {
        Err(StoreError::Unavailable(why)) => why,
        other => panic!("the master on {port} is dead, yet {other:?}"),
    };
    assert!(
        why.contains(&format!("their master 127.0.0.1:{port} does not answer")),
        "{why}"
    );
}
