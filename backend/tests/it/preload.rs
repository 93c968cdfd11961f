//! The decision scripts are loaded on every node at connect (`store/redis/preload.rs`): Redis
//! counts a `SCRIPT LOAD` per decision script on each node (each Cluster master), and the first
//! decisions after connect run by EVALSHA alone, never the EVAL a NOSCRIPT refusal falls back to.
use crate::store_suite::rule;
use crate::support::{RedisCluster, RedisServer};

use std::time::Duration;

use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::DecisionStore;

/// The decision scripts (`Scripts::decision_scripts`): six algorithms, the all-or-nothing
/// driver, its Cluster refund and the commit.
const DECISION_SCRIPTS: u64 = 9;

/// A command's `calls` in `INFO commandstats` (0 when never called).
fn calls(node: &RedisServer, command: &str) -> u64 {
    node.cli(&["INFO", "commandstats"])
        .lines()
        .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Checks `nodes` right after `store` connected, then decides on every algorithm for keys that
/// land on every node.
pub async fn scripts_are_loaded_before_first_use(store: &RedisStore, nodes: &[&RedisServer]) {
    for node in nodes {
        assert_eq!(
            calls(node, "script|load"),
            DECISION_SCRIPTS,
            "{}",
            node.url()
        );
        assert_eq!(calls(node, "eval"), 0, "{}", node.url());
    }
    for algorithm in crate::store_suite::ALGORITHMS {
        let limit = if matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket") {
            r#""rate":{"count":10,"period":"10s"}"#
        } else {
            r#""window":"10s""#
        };
        let r = rule(&format!(
            r#"{{"action":"pre-{algorithm}","algorithm":"{algorithm}","capacity":10,{limit}}}"#
        ));
        for i in 0..24 {
            let d = store
                .throttle(&r, &format!("k{i}"), 1)
                .await
                .expect("decide");
            assert!(d.allowed, "{algorithm} k{i}");
        }
    }
    for node in nodes {
        assert!(
            calls(node, "evalsha") > 0,
            "{}: some decision ran here",
            node.url()
        );
        assert_eq!(
            calls(node, "eval"),
            0,
            "{}: no NOSCRIPT fallback",
            node.url()
        );
    }
}

#[tokio::test]
async fn single_node_loads_the_decision_scripts_at_connect() {
    let server = RedisServer::start();
    let store = RedisStore::connect(RedisConfig::new(RedisTarget::Single(server.url())))
        .await
        .expect("connect");
    scripts_are_loaded_before_first_use(&store, &[&server]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_master_loads_the_decision_scripts_at_connect() {
    let cluster = RedisCluster::start();
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = Duration::from_secs(5);
    let store = RedisStore::connect(config).await.expect("connect");
    let nodes: Vec<&RedisServer> = cluster.nodes.iter().collect();
    scripts_are_loaded_before_first_use(&store, &nodes).await;
}
