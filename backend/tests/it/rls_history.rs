//! Decisions through Envoy's rate limit service (gRPC RLS v3) reach the history and top denied
//! exactly as HTTP decisions do: both ways in share `decide` and its activity batch.

use crate::grpc_rig::GrpcRig;
use crate::harness::{eventually, TOKEN};

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use serde_json::{json, Value};
use sluice_backend::StoreChoice;
use tonic::transport::Channel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_decisions_count_in_history_and_top_denied() {
    let rig = GrpcRig::<RateLimitServiceClient<Channel>>::start(StoreChoice::Memory).await;
    rig.put_rule(
        // Not a fixed window: an hour's window aligned to the clock ended between the requests
        // and the key view in a CI run at 08:00, and the view read a fresh window (remaining 2).
        json!({"action": "user", "algorithm": "token_bucket", "capacity": 2, "rate": {"count": 1, "period": "1h"}}),
    )
    .await;
    let mut rls = rig.client.clone();
    let ask = |value: &str| RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let mut codes = Vec::new();
    for _ in 0..4 {
        let r = rls.should_rate_limit(ask("mallory")).await.expect("rls");
        codes.push(r.into_inner().overall_code);
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::OverLimit, Code::OverLimit].map(|c| c as i32)
    );
    let get = |path: &str| {
        let r = rig
            .http
            .get(format!("{}{path}", rig.admin))
            .bearer_auth(TOKEN)
            .send();
        async move { r.await.expect("get").json::<Value>().await.expect("json") }
    };
    eventually(
        Duration::from_secs(3),
        "the history counts RLS decisions",
        || async {
            let h = get("/v1/history?range=5m").await;
            let totals = &h["actions"][0]["totals"];
            (totals["allowed"] == 2 && totals["denied"] == 2).then_some(())
        },
    )
    .await;
    let top = get("/v1/top-denied").await;
    assert_eq!(
        top["actions"],
        json!([{"action": "user", "keys": [{"key": "mallory", "denied": 2}]}])
    );
    let view = get("/v1/keys?key=mallory").await;
    assert_eq!(view["actions"][0]["remaining"], 0);
    rig.stop().await;
}
