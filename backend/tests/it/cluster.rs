//! The storage conformance suite on a real 3-master Redis Cluster (redis-server processes on
//! loopback ports joined by `redis-cli --cluster create`). One cluster for the whole file: the
//! cases run in sequence on it, each under its own actions.
use crate::store_suite;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::DecisionStore;
use sluice_backend::store::RuleStore;
use sluice_backend::store::{HealthStore, ManualClock, StoreError};
use store_suite::*;
use support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_passes_the_conformance_suite() {
    let cluster = RedisCluster::start();
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = Duration::from_secs(5);
    let clock = ManualClock::new(B);
    let store = Arc::new(
        RedisStore::connect(config)
            .await
            .expect("connect to the test cluster")
            .with_clock(clock.clone()),
    );
    assert_eq!(store.kind(), "redis-cluster");
    store.ping().await.expect("ping");

    assert_eq!(
        store.rules_version().await.expect("version"),
        None,
        "an empty cluster has no version"
    );
    whole_suite(store.clone(), &clock, 0xc1).await;

    // Keys really are spread over the masters (hash tags per (action, subject), not one slot).
    let holding = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["DBSIZE"]).trim() != "0")
        .count();
    assert_eq!(holding, 3, "every master holds some keys");

    // A wrong type on a cluster node is the same clear error.
    let r =
        rule(r#"{"action":"w","algorithm":"gcra","capacity":2,"rate":{"count":1,"period":"1s"}}"#);
    for node in &cluster.nodes {
        node.cli(&["-c", "LPUSH", "sluice:{w:bad}:gcra", "x"]);
    }
    assert!(matches!(
        err(store.throttle(&r, "bad", 1).await),
        StoreError::WrongType { .. }
    ));
    assert!(
        store
            .throttle(&r, "good", 1)
            .await
            .expect("a good key works")
            .allowed
    );
}
