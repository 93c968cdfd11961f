//! Rates by demand, fairly: a stream's report counts are its client's word, so one stream
//! reporting absurd demand gets no more than an equal share of a key while the others use
//! theirs, and a client reconnecting (each closed stream's holder lives until its TTL) counts as
//! one peer, not one holder per stream (`core/src/rlqs/rebalance.rs`, `ledger/peer.rs`).

use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;

use crate::rlqs::{bucket, rate_for, rig_with_rule, usage, Quota};

/// A report of `allowed` admitted and `denied` refused requests of `id`.
fn seen(id: &BucketId, allowed: u64, denied: u64) -> Vec<BucketQuotaUsage> {
    vec![BucketQuotaUsage {
        num_requests_denied: denied,
        ..usage(id.clone(), allowed)
    }]
}

/// The last rate `q` was told for `id` among the answers waiting, or `last`.
async fn drain(q: &mut Quota, id: &BucketId, mut last: Option<u32>) -> Option<u32> {
    while let Ok(Ok(r)) = tokio::time::timeout(
        Duration::from_millis(50),
        q.next_within(Duration::from_secs(1)),
    )
    .await
    {
        last = rate_for(&r, id).or(last);
    }
    last
}

#[tokio::test]
async fn a_stream_reporting_absurd_demand_gets_no_more_than_its_fair_share() {
    // 10/s; the two streams are two peers (one domain each).
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let (mut honest, mut greedy) = (Quota::open(&rig).await, Quota::open(&rig).await);
    honest.report("edge-a", seen(&alice, 0, 0)).await;
    greedy.report("edge-b", seen(&alice, 0, 0)).await;
    let mut last = (None, None);
    for _ in 0..6 {
        // The honest Envoy wants 30 a report (6/s, above its fair 5/s); the greedy one claims
        // denials without end (capped at what the whole rule serves in a report: 70).
        honest.report("edge-a", seen(&alice, 5, 25)).await;
        greedy.report("edge-b", seen(&alice, 5, u64::MAX)).await;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        last.0 = drain(&mut honest, &alice, last.0).await;
        last.1 = drain(&mut greedy, &alice, last.1).await;
    }
    let (honest_rate, greedy_rate) = (last.0.unwrap(), last.1.unwrap());
    // Weighed as sent (75 against 30) the greedy one took 7 of the 10.
    assert!(greedy_rate <= 5, "{greedy_rate} (honest {honest_rate})");
    assert!(honest_rate >= 5, "{honest_rate} (greedy {greedy_rate})");
    rig.stop().await;
}

#[tokio::test]
async fn a_client_holding_a_key_through_many_streams_counts_as_one_peer() {
    // Four open streams of one address and domain, against one honest one: what a client that
    // reconnects holds until its old streams' TTLs end, but open, so that their shares can be
    // lowered at once (a closed stream's stays counted until its TTL, and each reconnect's
    // burst is paid from the key: that churn is not what this test is about; the core test
    // `a_peers_many_holders_count_as_one` covers closed holders, which weigh the same). Every
    // stream reports demand only (denials): claimed admissions would be post-debited and starve
    // the key.
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut honest = Quota::open(&rig).await;
    honest.report("edge-a", seen(&alice, 0, 30)).await;
    let mut last = drain(&mut honest, &alice, None).await;
    let mut spray = Vec::new();
    for _ in 0..4 {
        spray.push(Quota::open(&rig).await);
    }
    for _ in 0..7 {
        for q in &spray {
            q.report("edge-b", seen(&alice, 0, 30)).await;
        }
        honest.report("edge-a", seen(&alice, 0, 30)).await;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        last = drain(&mut honest, &alice, last).await;
        for q in &mut spray {
            let _ = drain(q, &alice, None).await;
        }
    }
    let rate = last.unwrap();
    // Counted per stream, five holders with equal demand: 2 of the 10.
    assert!(rate >= 5, "{rate}");
    rig.stop().await;
}
