//! sluice as Envoy's Rate Limit Quota Service against an in-process sluice on port-0 listeners,
//! with envoy-types' own tonic client standing in for Envoy's quota filter: the default mapping,
//! unmapped and rule-less buckets, shares of one key that add up to the rule, the domain bound
//! to a stream, the per-stream bucket bound, and explicit whole-second TTLs.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::TokenBucket;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use serde_json::json;
use sluice_backend::StoreChoice;
use sluice_core::rlqs::{ABANDON_AFTER_IDLE_REPORTS, DEFAULT_TTL_S};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::grpc_rig::{GrpcClient, GrpcRig};

impl GrpcClient for RateLimitQuotaServiceClient<Channel> {
    const CALL_TIMEOUT: Option<Duration> = None;

    fn over(channel: Channel) -> Self {
        RateLimitQuotaServiceClient::new(channel)
    }
}

pub(crate) type Rig = GrpcRig<RateLimitQuotaServiceClient<Channel>>;

/// One quota stream, as one Envoy's quota filter holds it.
pub(crate) struct Quota {
    pub(crate) tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    pub(crate) rx: Streaming<RateLimitQuotaResponse>,
}

impl Quota {
    pub(crate) async fn open(rig: &Rig) -> Quota {
        let (tx, rx) = mpsc::channel(16);
        let mut client = rig.client.clone();
        let rx = client
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Quota { tx, rx }
    }

    pub(crate) async fn report(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        let reports = RateLimitQuotaUsageReports {
            domain: domain.to_owned(),
            bucket_quota_usages: usages,
        };
        self.tx.send(reports).await.unwrap();
    }

    pub(crate) async fn next(&mut self) -> Result<RateLimitQuotaResponse, tonic::Status> {
        self.next_within(Duration::from_secs(5)).await
    }

    pub(crate) async fn next_within(
        &mut self,
        wait: Duration,
    ) -> Result<RateLimitQuotaResponse, tonic::Status> {
        let next = tokio::time::timeout(wait, self.rx.message());
        match next.await.expect("an answer in time") {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(tonic::Status::ok("ended")),
            Err(status) => Err(status),
        }
    }
}

pub(crate) fn bucket(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

pub(crate) fn usage(id: BucketId, allowed: u64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id),
        time_elapsed: None,
        num_requests_allowed: allowed,
        num_requests_denied: 0,
    }
}

/// Each action of `r`: its bucket, its strategy and its TTL in seconds.
pub(crate) fn actions(r: &RateLimitQuotaResponse) -> Vec<(BucketId, Strategy, i64)> {
    r.bucket_action
        .iter()
        .map(|a| {
            let Some(Action::QuotaAssignmentAction(q)) = &a.bucket_action else {
                panic!("an assignment: {a:?}");
            };
            let ttl = q.assignment_time_to_live.unwrap();
            assert_eq!(ttl.nanos, 0, "whole seconds");
            let strategy = q.rate_limit_strategy.unwrap().strategy.unwrap();
            (a.bucket_id.clone().unwrap(), strategy, ttl.seconds)
        })
        .collect()
}

pub(crate) fn token_bucket(s: &Strategy) -> TokenBucket {
    match s {
        Strategy::TokenBucket(tb) => *tb,
        other => panic!("a token bucket, got {other:?}"),
    }
}

/// (max_tokens, tokens_per_fill, fill_interval seconds)
pub(crate) fn shape(tb: &TokenBucket) -> (u32, u32, i64) {
    (
        tb.max_tokens,
        tb.tokens_per_fill.unwrap().value,
        tb.fill_interval.unwrap().seconds,
    )
}

const ALLOW_ALL: Strategy = Strategy::BlanketRule(BlanketRule::AllowAll as i32);
pub(crate) const DENY_ALL: Strategy = Strategy::BlanketRule(BlanketRule::DenyAll as i32);

pub(crate) async fn rig_with_rule() -> Rig {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(
        json!({"action": "user", "algorithm": "token_bucket", "capacity": 20,
                        "rate": {"count": 10, "period": "1s"}}),
    )
    .await;
    rig
}

#[tokio::test]
async fn unmapped_and_ruleless_buckets_are_allowed_with_a_ttl() {
    let rig = rig_with_rule().await;
    let mut q = Quota::open(&rig).await;
    let no_name = bucket(&[("user", "alice")]);
    let no_rule = bucket(&[("name", "nobody"), ("user", "alice")]);
    q.report(
        "edge",
        vec![usage(no_name.clone(), 1), usage(no_rule.clone(), 1)],
    )
    .await;
    // The unmapped bucket is answered at once; the mapped one after its key's lookup (new
    // buckets are worked after the report's other answers are sent, so two responses).
    let mut got = actions(&q.next().await.unwrap());
    if got.len() < 2 {
        got.extend(actions(&q.next().await.unwrap()));
    }
    let ttl = i64::try_from(DEFAULT_TTL_S).unwrap();
    assert_eq!(
        got,
        vec![(no_name, ALLOW_ALL, ttl), (no_rule, ALLOW_ALL, ttl)]
    );
    rig.stop().await;
}

#[tokio::test]
async fn one_stream_gets_the_whole_rule_then_shares_add_up_to_it() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut first = Quota::open(&rig).await;
    first.report("edge", vec![usage(alice.clone(), 0)]).await;
    let got = actions(&first.next().await.unwrap());
    assert_eq!(got.len(), 1);
    let whole = shape(&token_bucket(&got[0].1));
    assert_eq!(
        whole,
        (20, 10, 1),
        "one holder: the rule's whole token bucket"
    );

    // A renewal resends the same bucket (Envoy carries it over and restarts its TTL).
    first.report("edge", vec![usage(alice.clone(), 5)]).await;
    let renewed = actions(&first.next().await.unwrap());
    assert_eq!(shape(&token_bucket(&renewed[0].1)), whole);

    // A second Envoy on the same key: the first is lowered at once, the second gets what the
    // store has left (here: nothing, the first holds the burst) and the sum stays in the rule.
    let mut second = Quota::open(&rig).await;
    second.report("edge", vec![usage(alice.clone(), 0)]).await;
    let lowered = shape(&token_bucket(&actions(&first.next().await.unwrap())[0].1));
    let got = actions(&second.next().await.unwrap());
    let (b2, n2) = match &got[0].1 {
        s if *s == DENY_ALL => (0, 0),
        s => {
            let (b, n, f) = shape(&token_bucket(s));
            assert_eq!(f, 1);
            (b, n)
        }
    };
    // Bursts split equally; rates by demand: the first reported requests, the second none
    // yet (it keeps the idle floor, docs/rlqs.md "Rebalancing").
    assert!(
        lowered.0 <= 10 && lowered.1 > 5 && lowered.1 < 10,
        "lowered: half the burst, most of the rate: {lowered:?}"
    );
    assert!(
        lowered.0 + b2 <= 20 && lowered.1 + n2 <= 10,
        "{lowered:?} + {b2}/{n2}"
    );
    rig.stop().await;
}

#[tokio::test]
async fn a_stream_is_bound_to_its_first_domain() {
    let rig = rig_with_rule().await;
    let mut q = Quota::open(&rig).await;
    q.report("edge", vec![usage(bucket(&[("x", "1")]), 1)])
        .await;
    q.next().await.unwrap();
    q.report("other", vec![usage(bucket(&[("x", "1")]), 1)])
        .await;
    let err = q.next().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("edge"), "{err:?}");
    rig.stop().await;
}

/// A rig whose streams hold at most `max_buckets` buckets, with the `user` rule.
async fn rig_with_bound(max_buckets: usize) -> Rig {
    let mut config = sluice_backend::Config::new(StoreChoice::Memory, crate::harness::TOKEN);
    config.rlqs.max_buckets = max_buckets;
    let rig = Rig::start_with(config).await;
    rig.put_rule(
        json!({"action": "user", "algorithm": "token_bucket", "capacity": 20,
                        "rate": {"count": 10, "period": "1s"}}),
    )
    .await;
    rig
}

/// Past the bound a bucket gets no assignment (was `DENY_ALL`, issue 39: that refused the
/// 4,097th user even on an `ALLOW_ALL` listener): Envoy applies the listener's own
/// no_assignment_behavior, the report is counted, and the buckets within are answered.
#[tokio::test]
async fn buckets_past_the_bound_get_no_assignment() {
    let rig = rig_with_bound(3).await;
    let mut q = Quota::open(&rig).await;
    let names: Vec<String> = (0..5).map(|i| format!("u{i}")).collect();
    let usages = names
        .iter()
        .map(|n| usage(bucket(&[("name", "user"), ("user", n)]), 0))
        .collect();
    q.report("edge", usages).await;
    let got = actions(&q.next().await.unwrap());
    let answered: Vec<BucketId> = got.iter().map(|(b, _, _)| b.clone()).collect();
    assert_eq!(answered.len(), 3, "{got:?}");
    assert!(got.iter().all(|(_, s, _)| *s != DENY_ALL), "{got:?}");
    for n in &names[3..] {
        assert!(!answered.contains(&bucket(&[("name", "user"), ("user", n)])));
    }
    let over = rig.metric("sluice_rlqs_buckets_over_bound_total").await;
    assert_eq!(over.as_deref(), Some("2"));
    // A report naming only buckets past the bound gets no answer at all; one within still does.
    let past = bucket(&[("name", "user"), ("user", "u4")]);
    q.report("edge", vec![usage(past, 1)]).await;
    let first = bucket(&[("name", "user"), ("user", "u0")]);
    q.report("edge", vec![usage(first.clone(), 1)]).await;
    let got = actions(&q.next().await.unwrap());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, first);
    let over = rig.metric("sluice_rlqs_buckets_over_bound_total").await;
    assert_eq!(over.as_deref(), Some("3"));
    rig.stop().await;
}

/// The rate (tokens_per_fill) an answer gives `id`, 0 for `DENY_ALL`; `None` if it has none.
pub(crate) fn rate_for(r: &RateLimitQuotaResponse, id: &BucketId) -> Option<u32> {
    actions(r)
        .into_iter()
        .rev()
        .filter(|(b, _, _)| b == id)
        .map(|(_, s, _)| match s {
            s if s == DENY_ALL => 0,
            s => shape(&token_bucket(&s)).1,
        })
        .next()
}

#[tokio::test]
async fn a_closed_streams_share_is_paid_until_its_ttl_then_goes_to_the_others() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut first = Quota::open(&rig).await;
    first.report("edge", vec![usage(alice.clone(), 0)]).await;
    assert_eq!(rate_for(&first.next().await.unwrap(), &alice), Some(10));
    let closed_at = std::time::Instant::now();
    drop(first);

    // The first Envoy may still enforce its whole share, disconnected, until its TTL: the
    // second gets no rate until then.
    let mut second = Quota::open(&rig).await;
    second.report("edge", vec![usage(alice.clone(), 0)]).await;
    // As Envoy does, the second reports its bucket on a timer (each report renews its share).
    let (tx, renewed) = (second.tx.clone(), alice.clone());
    let reporter = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let reports = RateLimitQuotaUsageReports {
                domain: "edge".to_owned(),
                // Busy (denials), so never abandoned as idle.
                bucket_quota_usages: vec![BucketQuotaUsage {
                    num_requests_denied: 1,
                    ..usage(renewed.clone(), 0)
                }],
            };
            if tx.send(reports).await.is_err() {
                return;
            }
        }
    });
    let ttl = Duration::from_secs(DEFAULT_TTL_S);
    let mut raised_after = None;
    while closed_at.elapsed() < ttl + Duration::from_secs(5) {
        let Ok(answer) = second.next().await else {
            break;
        };
        let Some(rate) = rate_for(&answer, &alice) else {
            continue;
        };
        if closed_at.elapsed() < ttl - Duration::from_secs(1) {
            assert_eq!(rate, 0, "a rate before the closed share's TTL ended");
        }
        if rate == 10 {
            raised_after = Some(closed_at.elapsed());
            break;
        }
    }
    reporter.abort();
    let raised_after = raised_after.expect("the whole rate once the closed share is gone");
    assert!(
        raised_after >= ttl - Duration::from_secs(1),
        "{raised_after:?}"
    );
    rig.stop().await;
}

#[tokio::test]
async fn a_rule_change_is_pushed_within_a_tick_without_a_report() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q = Quota::open(&rig).await;
    q.report("edge", vec![usage(alice.clone(), 0)]).await;
    let got = actions(&q.next().await.unwrap());
    assert_eq!(shape(&token_bucket(&got[0].1)), (20, 10, 1));

    // Capacity and rate halved: pushed on the ledger's next tick, no report needed.
    let changed = std::time::Instant::now();
    rig.put_rule(
        json!({"action": "user", "algorithm": "token_bucket", "capacity": 10,
                        "rate": {"count": 5, "period": "1s"}}),
    )
    .await;
    let pushed = actions(&q.next().await.unwrap());
    let took = changed.elapsed();
    assert_eq!(pushed[0].0, alice);
    assert_eq!(shape(&token_bucket(&pushed[0].1)), (10, 5, 1));
    assert!(took < Duration::from_millis(2_500), "pushed after {took:?}");
    rig.stop().await;
}

#[tokio::test]
async fn an_idle_bucket_is_abandoned_after_three_empty_reports() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q = Quota::open(&rig).await;
    q.report("edge", vec![usage(alice.clone(), 1)]).await;
    assert_eq!(rate_for(&q.next().await.unwrap(), &alice), Some(10));
    for _ in 1..ABANDON_AFTER_IDLE_REPORTS {
        q.report("edge", vec![usage(alice.clone(), 0)]).await;
        assert_eq!(
            rate_for(&q.next().await.unwrap(), &alice),
            Some(10),
            "renewed"
        );
    }
    q.report("edge", vec![usage(alice.clone(), 0)]).await;
    let answer = q.next().await.unwrap();
    assert_eq!(answer.bucket_action.len(), 1);
    assert_eq!(answer.bucket_action[0].bucket_id.as_ref(), Some(&alice));
    assert!(
        matches!(
            answer.bucket_action[0].bucket_action,
            Some(Action::AbandonAction(_))
        ),
        "{answer:?}"
    );
    // Envoy's next request of the bucket starts over: a fresh share.
    q.report("edge", vec![usage(alice.clone(), 1)]).await;
    assert!(rate_for(&q.next().await.unwrap(), &alice).is_some());
    rig.stop().await;
}

/// An admin request with the token; asserts a 2xx.
async fn admin(rig: &Rig, method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let mut r = rig
        .http
        .request(method, format!("{}{path}", rig.admin))
        .bearer_auth(crate::harness::TOKEN);
    if let Some(body) = body {
        r = r.json(&body);
    }
    let r = r.send().await.unwrap();
    assert!(r.status().is_success(), "{path}: {:?}", r.text().await);
}

/// Answers on `q` until one carries `id`; its actions for `id`, in order.
async fn next_for(q: &mut Quota, id: &BucketId) -> Vec<Strategy> {
    loop {
        let got = actions(&q.next().await.unwrap());
        let mine: Vec<Strategy> = got
            .into_iter()
            .filter(|(b, _, _)| b == id)
            .map(|(_, s, _)| s)
            .collect();
        if !mine.is_empty() {
            return mine;
        }
    }
}

#[tokio::test]
async fn a_reset_refills_every_holders_bucket_at_once() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut one = Quota::open(&rig).await;
    one.report("edge", vec![usage(alice.clone(), 0)]).await;
    assert_eq!(
        shape(&token_bucket(&next_for(&mut one, &alice).await[0])),
        (20, 10, 1)
    );
    let mut two = Quota::open(&rig).await;
    two.report("edge", vec![usage(alice.clone(), 0)]).await;
    // The second holder's burst comes from what is left (nothing: the first holds all 20), so
    // it is denied until the refill; the first is lowered to its half at once.
    let _ = next_for(&mut two, &alice).await;
    let _ = next_for(&mut one, &alice).await;

    let reset_at = std::time::Instant::now();
    admin(
        &rig,
        reqwest::Method::DELETE,
        "/v1/keys?action=user&key=alice",
        None,
    )
    .await;
    // Each open stream is sent, in one response, DENY_ALL then a token bucket: Envoy builds the
    // token bucket afresh (full) instead of keeping the drained one's fill fraction.
    for q in [&mut one, &mut two] {
        let pushed = next_for(q, &alice).await;
        let at = pushed
            .iter()
            .position(|s| *s == DENY_ALL)
            .unwrap_or_else(|| panic!("a DENY_ALL first: {pushed:?}"));
        let fresh = token_bucket(pushed.get(at + 1).expect("then the token bucket"));
        // Half the burst each; the rate as held (the second holder's is raised to its half
        // once the first one's lowering has landed: lower before raise).
        let (burst, rate, fill) = shape(&fresh);
        assert!(burst == 10 && rate <= 5 && fill == 1, "{pushed:?}");
    }
    let took = reset_at.elapsed();
    assert!(took < Duration::from_millis(1_500), "pushed after {took:?}");
    rig.stop().await;
}

#[tokio::test]
async fn an_override_is_pushed_within_a_tick_and_its_removal_raises_the_share_back() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q = Quota::open(&rig).await;
    q.report("edge", vec![usage(alice.clone(), 0)]).await;
    assert_eq!(
        shape(&token_bucket(&next_for(&mut q, &alice).await[0])),
        (20, 10, 1)
    );
    let put_at = std::time::Instant::now();
    admin(
        &rig,
        reqwest::Method::PUT,
        "/v1/rules/user/overrides/alice",
        Some(
            json!({"action": "user", "algorithm": "token_bucket", "capacity": 4,
                    "rate": {"count": 2, "period": "1s"}}),
        ),
    )
    .await;
    let pushed = next_for(&mut q, &alice).await;
    let took = put_at.elapsed();
    assert_eq!(
        shape(&token_bucket(pushed.last().unwrap())),
        (4, 2, 1),
        "{pushed:?}"
    );
    assert!(took < Duration::from_millis(2_500), "pushed after {took:?}");

    // The override goes: the rate is raised back to the rule's within a tick. The burst is
    // raised only as the store pays for the difference (Envoy keeps a replaced bucket's fill
    // fraction, so the difference is the most it adds): here the share's refill takes all the
    // key earns, so it stays as it was.
    admin(
        &rig,
        reqwest::Method::DELETE,
        "/v1/rules/user/overrides/alice",
        None,
    )
    .await;
    let deleted_at = std::time::Instant::now();
    let (burst, rate, _) = loop {
        let pushed = next_for(&mut q, &alice).await;
        let last = shape(&token_bucket(pushed.last().unwrap()));
        if last.1 == 10 {
            break last;
        }
    };
    let took = deleted_at.elapsed();
    assert!(took < Duration::from_millis(2_500), "raised after {took:?}");
    assert!((4..=20).contains(&burst) && rate == 10, "{burst} {rate}");
    rig.stop().await;
}

#[tokio::test]
async fn rates_follow_demand_a_busy_holder_gets_more_and_an_idle_one_gives_it_back() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let (mut busy, mut idle) = (Quota::open(&rig).await, Quota::open(&rig).await);
    busy.report("edge", vec![usage(alice.clone(), 0)]).await;
    let _ = next_for(&mut busy, &alice).await;
    idle.report("edge", vec![usage(alice.clone(), 0)]).await;
    let _ = next_for(&mut idle, &alice).await;
    // Reports as Envoy sends them: the busy one 60 requests a report (what its share admits,
    // the rest denied), the idle one 1 (a denial: not abandoned as idle in this short test).
    let rate_of = |r: &RateLimitQuotaResponse| rate_for(r, &alice);
    let mut last = (None, None);
    for _ in 0..6 {
        busy.report(
            "edge",
            vec![BucketQuotaUsage {
                num_requests_denied: 55,
                ..usage(alice.clone(), 5)
            }],
        )
        .await;
        idle.report(
            "edge",
            vec![BucketQuotaUsage {
                num_requests_denied: 1,
                ..usage(alice.clone(), 0)
            }],
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        while let Ok(Ok(r)) = tokio::time::timeout(
            Duration::from_millis(50),
            busy.next_within(Duration::from_secs(1)),
        )
        .await
        {
            last.0 = rate_of(&r).or(last.0);
        }
        while let Ok(Ok(r)) = tokio::time::timeout(
            Duration::from_millis(50),
            idle.next_within(Duration::from_secs(1)),
        )
        .await
        {
            last.1 = rate_of(&r).or(last.1);
        }
    }
    let (busy_rate, idle_rate) = (last.0.unwrap(), last.1.unwrap());
    // Demands 60 and 1, water-filled to 49 and 1 (the rule's rates serve 50 a report): weights
    // 49·8 + 50 and 8 + 50 of the rule's 10 per second.
    assert!(busy_rate >= 8 && idle_rate >= 1, "{busy_rate} {idle_rate}");
    assert!(busy_rate + idle_rate <= 10, "{busy_rate} + {idle_rate}");
    rig.stop().await;
}

#[tokio::test]
async fn a_mapping_file_the_ttl_and_the_bucket_bound_are_the_ledgers() {
    let mapping = sluice_core::rlqs::mapping_rules::Mapping::from_value(&json!({
        "mappings": [{"when": {"route": "api"}, "action": "user", "key": ["tenant"]}],
        "unmatched": "deny_all"
    }))
    .unwrap();
    let mut config = sluice_backend::Config::new(StoreChoice::Memory, crate::harness::TOKEN);
    config.rlqs = sluice_backend::rlqs::Settings {
        ttl_s: 7,
        max_buckets: 2,
        mapping,
    };
    let rig = Rig::start_with(config).await;
    rig.put_rule(
        json!({"action": "user", "algorithm": "token_bucket", "capacity": 20,
                        "rate": {"count": 10, "period": "1s"}}),
    )
    .await;
    let mut q = Quota::open(&rig).await;
    let api = bucket(&[("route", "api"), ("tenant", "t1"), ("user", "ignored")]);
    q.report("edge", vec![usage(api.clone(), 0)]).await;
    let got = actions(&q.next().await.unwrap());
    assert_eq!(shape(&token_bucket(&got[0].1)), (20, 10, 1));
    assert_eq!(got[0].2, 7, "--rlqs-ttl");
    // The file's rule metered key t1 of action user: the same state RLS or the filter would.
    let view = rig.key_view("t1").await;
    assert!(view.to_string().contains("\"user\""), "{view}");
    // The default mapping would meter this one; the file says unmatched: deny_all.
    let other = bucket(&[("name", "user"), ("user", "bob")]);
    q.report("edge", vec![usage(other.clone(), 0)]).await;
    assert_eq!(next_for(&mut q, &other).await, vec![DENY_ALL]);
    // Past --rlqs-max-buckets (2): no assignment (the listener's no_assignment_behavior);
    // the bucket within the bound reported beside it is still answered.
    let third = bucket(&[("route", "api"), ("tenant", "t3")]);
    q.report("edge", vec![usage(third.clone(), 0), usage(api.clone(), 0)])
        .await;
    let got = actions(&q.next().await.unwrap());
    assert!(got.iter().all(|(b, _, _)| *b != third), "{got:?}");
    assert!(got.iter().any(|(b, _, _)| *b == api), "{got:?}");
    rig.stop().await;
}

#[tokio::test]
async fn paying_a_share_records_no_denial_when_the_key_is_a_little_short() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q = Quota::open(&rig).await;
    q.report("edge", vec![usage(alice.clone(), 0)]).await;
    let _ = next_for(&mut q, &alice).await;
    // The share holds the rule's whole rate: every tick's refill is about what the key earned
    // since the last (a few ms apart, so often a little more than it has). Three ticks.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let text = rig.metrics().await;
    let count = |outcome: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("sluice_decisions_total{"))
            .filter(|l| {
                l.contains("action=\"user\"") && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert!(count("allowed") >= 3.0, "a burst and refills: {text}");
    assert_eq!(count("denied"), 0.0, "{text}");
    rig.stop().await;
}

/// Issue 39: "10 per minute" (burst max(1, C / 10) = 1) on two Envoys. The burst used to be
/// split 1 and 0, and a bucket with `max_tokens` 0 was answered `DENY_ALL` tick after tick:
/// every request on the second Envoy denied while the key had capacity. Now each holder gets a
/// unit of a burst grown to the holders, within the window's capacity.
#[tokio::test]
async fn every_holder_of_a_small_window_rule_gets_a_usable_share() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(
        json!({"action": "user", "algorithm": "fixed_window", "capacity": 10,
                        "window": "60s"}),
    )
    .await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q1 = Quota::open(&rig).await;
    q1.report("edge", vec![usage(alice.clone(), 1)]).await;
    let first = next_for(&mut q1, &alice).await;
    assert_eq!(shape(&token_bucket(first.last().unwrap())), (1, 3, 20));
    let mut q2 = Quota::open(&rig).await;
    q2.report("edge", vec![usage(alice.clone(), 1)]).await;
    let second = next_for(&mut q2, &alice).await;
    let (b2, n2, f2) = shape(&token_bucket(second.last().unwrap()));
    assert!(b2 >= 1, "the second holder can admit: {second:?}");
    assert_eq!(f2, 20, "the fill interval stays the rule's");
    // The first holder's rate is lowered to make room: 2 + 8 per minute at most.
    let lowered = next_for(&mut q1, &alice).await;
    let (b1, n1, _) = shape(&token_bucket(lowered.last().unwrap()));
    assert_eq!(b1, 1);
    assert!(
        b1 + b2 + (n1 + n2) * 3 <= 10,
        "{b1}+{b2}, {n1}+{n2} per 20 s"
    );
    // Still usable a few ticks later: no DENY_ALL pushed to either.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    q2.report("edge", vec![usage(alice.clone(), 1)]).await;
    let renewed = next_for(&mut q2, &alice).await;
    assert!(!renewed.contains(&DENY_ALL), "{renewed:?}");
    assert!(shape(&token_bucket(renewed.last().unwrap())).0 >= 1);
    rig.stop().await;
}

/// Issue 40 item 3: `num_requests_allowed` is the client's word, post-debited beyond what the
/// share was paid. A report claiming 10^18 allowed used to put the key in debt for as long as
/// the carry bound allows (about 100 days); now each report's counts are capped at the bucket's
/// credit plus one period of the rule (10 units of 10 per second), the rest refused and
/// counted, so the key is in debt by at most one period and admits again within seconds.
#[tokio::test]
async fn a_report_claiming_ten_to_the_eighteen_leaves_at_most_one_period_of_debt() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q = Quota::open(&rig).await;
    let claim: u64 = 1_000_000_000_000_000_000;
    // The bucket twice in one message: one period per key per report, not per entry.
    q.report(
        "edge",
        vec![usage(alice.clone(), claim), usage(alice.clone(), claim)],
    )
    .await;
    let _ = next_for(&mut q, &alice).await;
    let metric = |name: &'static str| {
        let rig = &rig;
        async move {
            rig.metric(name)
                .await
                .unwrap_or_default()
                .parse::<f64>()
                .unwrap_or(0.0)
        }
    };
    let post = metric("sluice_rlqs_post_debited_units_total").await;
    assert!(post <= 10.0, "one period at most: {post}");
    let refused = metric("sluice_rlqs_report_units_refused_total").await;
    assert!(refused >= (2 * claim - 10) as f64, "{refused}");
    // A second claim as large: again no more than one period beyond what was paid.
    q.report("edge", vec![usage(alice.clone(), claim)]).await;
    let _ = next_for(&mut q, &alice).await;
    let post = metric("sluice_rlqs_post_debited_units_total").await;
    assert!(post <= 20.0, "{post}");
    rig.stop().await;
}

/// Issue 39: more holders than burst units (a meter of capacity 1 on two Envoys). The holder
/// without a unit used to stay `DENY_ALL` for as long as it held the key; now the unit rotates
/// among the holders reporting demand every `ROTATE_EVERY_TICKS` ticks, paid afresh from the
/// key when it moves, so the second Envoy gets a token bucket within a rotation and a refill.
#[tokio::test]
async fn a_burst_unit_rotates_to_a_holder_without_one() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(json!({"action": "user", "algorithm": "gcra", "capacity": 1,
                        "rate": {"count": 1, "period": "2s"}}))
        .await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q1 = Quota::open(&rig).await;
    q1.report("edge", vec![usage(alice.clone(), 0)]).await;
    let first = next_for(&mut q1, &alice).await;
    assert_eq!(shape(&token_bucket(first.last().unwrap())), (1, 1, 2));
    // q1 reports demand; q2 joins with demand: one unit, q1's turn first (holders in order).
    // q1's demand as one allowed (its paid token) and one denied: reporting 2 allowed of a
    // capacity of 1 put the key in debt (post-debited), its rate was halved, and whether the
    // rotated unit could be paid within the deadline became the machine's (issue 38).
    q1.report(
        "edge",
        vec![BucketQuotaUsage {
            num_requests_denied: 1,
            ..usage(alice.clone(), 1)
        }],
    )
    .await;
    let _ = next_for(&mut q1, &alice).await;
    let mut q2 = Quota::open(&rig).await;
    q2.report(
        "edge",
        vec![BucketQuotaUsage {
            num_requests_denied: 3,
            ..usage(alice.clone(), 0)
        }],
    )
    .await;
    assert_eq!(next_for(&mut q2, &alice).await, vec![DENY_ALL]);
    let started = std::time::Instant::now();
    // Within a rotation (5 ticks) and the refill of the moved unit (2 s): a token bucket. Both
    // keep reporting their demand every second, as Envoys do every report interval: a holder
    // that reported once and then went quiet has its demand forgotten, and whether the rotation
    // came before that was the machine's (issue 38).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let demand = |allowed, denied| BucketQuotaUsage {
        num_requests_denied: denied,
        ..usage(alice.clone(), allowed)
    };
    let got = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "q2 got no share within 20 s"
        );
        let r = match tokio::time::timeout(Duration::from_secs(1), q2.rx.message()).await {
            Err(_) => {
                q1.report("edge", vec![demand(0, 1)]).await;
                q2.report("edge", vec![demand(0, 3)]).await;
                continue;
            }
            Ok(r) => r.unwrap().unwrap(),
        };
        let mine: Vec<Strategy> = actions(&r)
            .into_iter()
            .filter(|(b, _, _)| *b == alice)
            .map(|(_, s, _)| s)
            .collect();
        if let Some(s) = mine.into_iter().find(|s| *s != DENY_ALL) {
            break s;
        }
    };
    assert_eq!(shape(&token_bucket(&got)).0, 1, "{got:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "by rotation, not at once: {:?}",
        started.elapsed()
    );
    // And q1, its turn over, was told DENY_ALL (its unit moved, not copied).
    let mut seen = Vec::new();
    while let Ok(Ok(r)) = tokio::time::timeout(Duration::from_millis(200), q1.rx.message()).await {
        let Some(r) = r else { break };
        seen.extend(actions(&r).into_iter().map(|(_, s, _)| s));
    }
    assert!(seen.contains(&DENY_ALL), "{seen:?}");
    rig.stop().await;
}

/// Issue 39: renewals never wait behind new buckets. A report naming an existing bucket and
/// 3,000 new ones used to be answered in one response after every new bucket's store steps;
/// now the renewal goes out first, alone, and the new buckets follow in batches of
/// `ARRIVALS_PER_STEP`. The ledger's tick duration and its oldest assignment's age against the
/// TTL are shown.
#[tokio::test]
async fn a_report_of_thousands_of_new_buckets_answers_the_renewals_first() {
    let rig = rig_with_rule().await;
    let alice = bucket(&[("name", "user"), ("user", "alice")]);
    let mut q = Quota::open(&rig).await;
    q.report("edge", vec![usage(alice.clone(), 0)]).await;
    let _ = next_for(&mut q, &alice).await;
    let mut usages = vec![usage(alice.clone(), 1)];
    usages.extend(
        (0..3_000).map(|i| usage(bucket(&[("name", "user"), ("user", &format!("u{i}"))]), 0)),
    );
    q.report("edge", usages).await;
    let first = actions(&q.next().await.unwrap());
    assert_eq!(first.len(), 1, "the renewal alone, first");
    assert_eq!(first[0].0, alice);
    assert!(matches!(first[0].1, Strategy::TokenBucket(_)), "{first:?}");
    let mut answered = 0;
    while answered < 3_000 {
        let got = actions(&q.next().await.unwrap());
        assert!(got.len() <= 256 + 1, "a bounded batch: {}", got.len());
        answered += got.iter().filter(|(b, _, _)| *b != alice).count();
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let text = rig.metrics().await;
    assert!(text.contains("sluice_rlqs_tick_seconds_count"), "{text}");
    assert!(
        text.contains("sluice_rlqs_assignment_ttl_seconds 12"),
        "{text}"
    );
    let age: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("sluice_rlqs_oldest_assignment_age_seconds "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(age > 0.0 && age < 12.0, "{age}");
    rig.stop().await;
}
