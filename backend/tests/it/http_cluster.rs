//! The whole HTTP application on a real 3-master Redis Cluster: rules through one replica in
//! force on another, 64 concurrent clients admitting exactly the bound, levels across replicas,
//! and `cl.throttle`.

use crate::harness;
use crate::support;

use std::time::Duration;

use harness::{eventually, long_rule, Sluice};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_a_redis_cluster_share_rules_state_and_levels() {
    let cluster = support::RedisCluster::start();
    let a = Sluice::start(harness::cluster(cluster.urls())).await;
    let b = Sluice::start(harness::cluster(cluster.urls())).await;
    let ready: serde_json::Value =
        crate::harness::get_json(&a.http, format!("{}/readyz", a.decision)).await;
    assert_eq!(ready["store"], "redis-cluster");

    assert_eq!(
        a.put_rule(long_rule("post", "sliding_window", 40)).await.0,
        200
    );
    eventually(
        Duration::from_secs(1),
        "B uses the rule written through A",
        || async { (b.throttle("post", "x", 0).await.0 == 200).then_some(()) },
    )
    .await;

    // 64 clients split over both replicas, one key: exactly the bound in total.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let base = if i % 2 == 0 {
            a.decision.clone()
        } else {
            b.decision.clone()
        };
        tasks.spawn(async move {
            let http = harness::client();
            let mut allowed = 0u64;
            for _ in 0..2 {
                let r = http
                    .post(format!("{base}/v1/throttle"))
                    .json(&json!({"action": "post", "key": "shared"}))
                    .send()
                    .await
                    .expect("post");
                assert_eq!(r.status().as_u16(), 200);
                let body: serde_json::Value = r.json().await.expect("json");
                allowed += u64::from(body["allowed"] == true);
            }
            allowed
        });
    }
    let mut allowed = 0;
    while let Some(r) = tasks.join_next().await {
        allowed += r.expect("client");
    }
    assert_eq!(
        allowed, 40,
        "two replicas on one cluster admit exactly the bound"
    );

    eventually(
        Duration::from_secs(1),
        "traffic of both replicas in A's levels",
        || async {
            let (_, body) = a.admin_get("/v1/levels?action=post").await;
            let key = body["actions"][0]["keys"]
                .as_array()?
                .iter()
                .find(|k| k["key"] == "shared")?
                .clone();
            (key["remaining"] == 0).then_some(())
        },
    )
    .await;

    let (status, tuple) = b
        .post_decision(
            "/v1/cl.throttle",
            json!({"key": "k", "max_burst": 15, "count": 30, "period": 60}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(tuple, json!([0, 16, 15, -1, 2]));
    a.stop().await;
    b.stop().await;
}
