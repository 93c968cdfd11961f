//! The decision exchange (`sluice.v1.DecisionExchange` on the gRPC listener, `--grpc-listen`)
//! against an in-process sluice on port-0 listeners, with a real tonic client over loopback and
//! the backend's own codec: on one stream, requests of every kind answered with their ids and
//! the decision listener's bodies; exactly capacity admitted with 64 (and 2048) in flight, on
//! the memory store and a redis-server; the unary `Call`; a stream outliving the old per-call
//! deadline; a malformed message ends its stream with INVALID_ARGUMENT and nothing else;
//! shutdown ends open streams with UNAVAILABLE; the open-streams gauge.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{json, Value};
use sluice_backend::grpc::exchange::ExchangeCodec;
use sluice_backend::grpc::rls::Rls;
use sluice_backend::{Config, StoreChoice};
use sluice_core::exchange::{ExchangeReply, ExchangeRequest, CALL_PATH, STREAM_PATH};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use crate::grpc_rig::GrpcRig;
use crate::harness::{self, eventually, long_rule, TOKEN};
use crate::support;

/// The client's side of the codec: encodes requests, decodes replies.
type ClientCodec = ExchangeCodec<ExchangeRequest, ExchangeReply>;

/// sluice with its gRPC listener, and a channel to it.
type Rig = GrpcRig<Channel>;

impl Rig {
    fn grpc(&self) -> tonic::client::Grpc<Channel> {
        tonic::client::Grpc::new(self.client.clone())
    }

    /// Opens an exchange stream.
    async fn open(&self) -> Exchange {
        let (tx, rx) = mpsc::channel(4096);
        let mut grpc = self.grpc();
        grpc.ready().await.unwrap();
        let replies = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                PathAndQuery::from_static(STREAM_PATH),
                ClientCodec::default(),
            )
            .await
            .unwrap()
            .into_inner();
        Exchange { tx, replies }
    }

    /// One unary `Call`.
    async fn call(
        &self,
        path: &str,
        request: ExchangeRequest,
    ) -> Result<ExchangeReply, tonic::Status> {
        let mut grpc = self.grpc();
        grpc.ready().await.unwrap();
        grpc.unary(
            tonic::Request::new(request),
            path.parse::<PathAndQuery>().unwrap(),
            ClientCodec::default(),
        )
        .await
        .map(tonic::Response::into_inner)
    }
}

/// One open stream: requests go in on `tx`, replies come out of `replies`.
struct Exchange {
    tx: mpsc::Sender<ExchangeRequest>,
    replies: Streaming<ExchangeReply>,
}

impl Exchange {
    async fn send(&self, id: u64, path: &str, body: Vec<u8>) {
        let request = ExchangeRequest {
            id,
            path: path.to_owned(),
            body,
        };
        self.tx.send(request).await.unwrap();
    }

    async fn next(&mut self) -> ExchangeReply {
        self.replies
            .message()
            .await
            .unwrap()
            .expect("a reply, not the end of the stream")
    }

    /// One unit of `action` for the key "k" through `ask`; returns the status.
    async fn throttle_k(&mut self, id: u64, action: &str) -> u32 {
        self.ask(id, "/v1/throttle", throttle(action, "k")).await.0
    }

    /// Sends one request and waits for its reply (nothing else in flight).
    async fn ask(&mut self, id: u64, path: &str, body: Vec<u8>) -> (u32, Value) {
        self.send(id, path, body).await;
        let reply = self.next().await;
        assert_eq!(reply.id, id);
        (reply.status, json_of(&reply.body))
    }
}

/// A request body for a key (each transport gets its own key).
type BodyFor<'a> = Box<dyn Fn(&str) -> Vec<u8> + 'a>;

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

fn throttle(action: &str, key: &str) -> Vec<u8> {
    json!({"action": action, "key": key, "quantity": 1})
        .to_string()
        .into_bytes()
}

/// A case of `/v1/throttle` for `action`, one unit, answered `want`.
fn throttle_case(id: u64, action: &str, want: u32) -> (u64, &'static str, BodyFor<'_>, u32) {
    (
        id,
        "/v1/throttle",
        Box::new(move |k| throttle(action, k)),
        want,
    )
}

/// A decision without what differs between two keys or two instants.
fn comparable(mut decision: Value) -> Value {
    if let Some(o) = decision.as_object_mut() {
        for field in ["key", "reset_after_ms", "retry_after_ms"] {
            o.remove(field);
        }
    }
    decision
}

fn all_comparable(answer: Value) -> Value {
    let mut answer = answer;
    if let Some(results) = answer.get_mut("results").and_then(Value::as_array_mut) {
        for r in results.iter_mut() {
            *r = comparable(r.take());
        }
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_answers_every_kind_of_request_with_its_id_as_the_http_listener_does() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(
        json!({"action": "ex_reply", "algorithm": "fixed_window", "capacity": 2, "window": "7d"}),
    )
    .await;
    rig.put_rule(long_rule("ex_other", "gcra", 5)).await;
    let mut stream = rig.open().await;
    let big = vec![b' '; 64 * 1024 + 1];

    // Serially first, so each answer can be set beside the HTTP listener's for the same input
    // (a twin key there, so the two transports count alike).
    let cases: Vec<(u64, &str, BodyFor, u32)> = vec![
        throttle_case(10, "ex_reply", 200),
        throttle_case(11, "ex_none", 404),
        throttle_case(12, "ex_reply", 200),
        (
            13,
            "/v1/throttle",
            Box::new(|k| {
                json!({"action": "ex_reply", "key": k, "quantity": "many"})
                    .to_string()
                    .into_bytes()
            }),
            400,
        ),
        throttle_case(14, "ex_reply", 200),
        (
            15,
            "/v1/throttle/all",
            Box::new(|k| {
                json!({"checks": [{"action": "ex_other", "key": k}, {"action": "ex_reply", "key": format!("{k}-2")}]})
                    .to_string()
                    .into_bytes()
            }),
            200,
        ),
        (16, "/v1/nope", Box::new(|k| throttle("ex_reply", k)), 404),
        (17, "/v1/throttle", Box::new(|_| big.clone()), 413),
        (18, "/v1/healthz", Box::new(|_| Vec::new()), 404),
        (19, "/healthz", Box::new(|_| Vec::new()), 405),
    ];
    for (id, path, body, want) in &cases {
        let (status, answer) = stream.ask(*id, path, body("grpc")).await;
        assert_eq!(status, *want, "id {id} {path}: {answer}");
        let (http_status, http_answer) = rig.http_post(path, body("http")).await;
        assert_eq!(status, http_status, "id {id} {path}");
        match (*id, status) {
            (15, _) => assert_eq!(all_comparable(answer.clone()), all_comparable(http_answer)),
            (_, 200) => assert_eq!(comparable(answer.clone()), comparable(http_answer)),
            _ => assert_eq!(answer, http_answer, "id {id} {path}"),
        }
        match id {
            10 | 12 => assert_eq!(answer["allowed"], true, "{answer}"),
            14 => {
                assert_eq!(answer["allowed"], false, "{answer}");
                assert!(answer["retry_after_ms"].is_u64(), "{answer}");
            }
            11 => assert_eq!(
                (answer["error"].as_str(), answer["field"].as_str()),
                (Some("unknown_action"), Some("action"))
            ),
            13 => assert_eq!(
                (answer["error"].as_str(), answer["field"].as_str()),
                (Some("invalid_request"), Some("quantity"))
            ),
            15 => assert_eq!(answer["allowed"], true, "{answer}"),
            16 => assert_eq!(answer["error"], "not_found"),
            17 => assert_eq!(
                (answer["error"].as_str(), answer["field"].as_str()),
                (Some("invalid_request"), Some("body"))
            ),
            _ => {}
        }
    }

    // A path that is no path at all: the exchange's own refusal, naming the field.
    let (status, answer) = stream
        .ask(20, "v1/throttle", throttle("ex_reply", "x"))
        .await;
    assert_eq!(status, 400);
    assert_eq!(answer["field"], "path", "{answer}");

    // Then all at once, interleaved on the wire: every reply carries its request's id.
    rig.put_rule(long_rule("ex_burst", "fixed_window", 1)).await;
    let sent: Vec<(u64, &str, Vec<u8>, u32)> = vec![
        (u64::MAX, "/v1/throttle", throttle("ex_none", "k"), 404),
        (
            0,
            "/v1/throttle",
            b"{\"action\": \"ex_burst\", \"key\": ".to_vec(),
            400,
        ),
        (
            1 << 40,
            "/v1/throttle/all",
            json!({"checks": [{"action": "ex_other", "key": "all"}]})
                .to_string()
                .into_bytes(),
            200,
        ),
        (7, "/v1/nope", Vec::new(), 404),
        (8, "/v1/throttle", big.clone(), 413),
        (9, "/v1/throttle", throttle("ex_burst", "one"), 200),
        (
            1,
            "/v1/report",
            json!({"actions": []}).to_string().into_bytes(),
            204,
        ),
    ];
    for (id, path, body, _) in &sent {
        stream.send(*id, path, body.clone()).await;
    }
    let mut got = HashMap::new();
    for _ in 0..sent.len() {
        let reply = stream.next().await;
        assert!(
            got.insert(reply.id, reply.status).is_none(),
            "id {} twice",
            reply.id
        );
    }
    let want: HashMap<u64, u32> = sent.iter().map(|(id, _, _, s)| (*id, *s)).collect();
    assert_eq!(got, want);

    // The client ends its side: the stream ends OK.
    drop(stream.tx);
    assert!(stream.replies.message().await.unwrap().is_none());
    rig.stop().await;
}

/// `n` requests for one key sent before any reply is read; returns how many were allowed.
async fn all_at_once(rig: &Rig, action: &str, n: u64) -> u64 {
    let mut stream = rig.open().await;
    for id in 0..n {
        stream
            .send(id, "/v1/throttle", throttle(action, "burst"))
            .await;
    }
    let mut ids = BTreeSet::new();
    let mut allowed = 0;
    for _ in 0..n {
        let reply = stream.next().await;
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        assert!(ids.insert(reply.id), "id {} twice", reply.id);
        if json_of(&reply.body)["allowed"] == true {
            allowed += 1;
        }
    }
    assert_eq!(ids, (0..n).collect::<BTreeSet<_>>());
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_in_flight_on_one_stream_admit_exactly_capacity_on_memory() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(long_rule("ex_cap", "gcra", 30)).await;
    assert_eq!(all_at_once(&rig, "ex_cap", 64).await, 30);
    // More than a stream's bound on exchanges in flight: the rest wait unread, none is lost.
    rig.put_rule(long_rule("ex_many", "fixed_window", 1000))
        .await;
    assert_eq!(all_at_once(&rig, "ex_many", 2048).await, 1000);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_in_flight_on_one_stream_admit_exactly_capacity_on_redis() {
    let redis = support::RedisServer::start();
    let rig = Rig::start(harness::redis(&redis.url())).await;
    for algorithm in ["gcra", "sliding_log"] {
        let action = format!("ex_{algorithm}");
        rig.put_rule(long_rule(&action, algorithm, 30)).await;
        assert_eq!(all_at_once(&rig, &action, 64).await, 30, "{algorithm}");
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_exchange_does_not_hold_up_the_next_on_its_stream() {
    let redis = support::RedisServer::start();
    let rig = Rig::start(harness::redis(&redis.url())).await;
    rig.put_rule(long_rule("ex_slow", "gcra", 10)).await;
    let mut stream = rig.open().await;
    assert_eq!(stream.throttle_k(1, "ex_slow").await, 200);
    // Redis answers nothing for 3 s (redis-cli cannot unpause it: it is paused too); the
    // harness's Redis timeout (500 ms) fails the decision first.
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "3000", "ALL"]).trim(), "OK");
    stream
        .send(2, "/v1/throttle", throttle("ex_slow", "k"))
        .await;
    stream.send(3, "/v1/nope", Vec::new()).await;
    // Served one after the other, 3 would wait for 2's store call; concurrently it goes first.
    let first = stream.next().await;
    assert_eq!((first.id, first.status), (3, 404));
    let second = stream.next().await;
    assert_eq!(
        (second.id, second.status),
        (2, 503),
        "{}",
        String::from_utf8_lossy(&second.body)
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unary_call_answers_one_exchange_and_unknown_methods_are_unimplemented() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(long_rule("ex_call", "token_bucket", 1)).await;
    let ask = |id| ExchangeRequest {
        id,
        path: "/v1/throttle".into(),
        body: throttle("ex_call", "k"),
    };
    let first = rig.call(CALL_PATH, ask(41)).await.unwrap();
    assert_eq!((first.id, first.status), (41, 200));
    assert_eq!(json_of(&first.body)["allowed"], true);
    let second = rig.call(CALL_PATH, ask(42)).await.unwrap();
    assert_eq!((second.id, second.status), (42, 200));
    assert_eq!(json_of(&second.body)["allowed"], false);
    let unknown = rig
        .call(
            CALL_PATH,
            ExchangeRequest {
                id: 43,
                path: "/v1/throttle".into(),
                body: throttle("ex_none", "k"),
            },
        )
        .await
        .unwrap();
    assert_eq!((unknown.id, unknown.status), (43, 404));
    assert_eq!(json_of(&unknown.body)["error"], "unknown_action");

    let status = rig
        .call("/sluice.v1.DecisionExchange/Nope", ask(44))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_old_per_call_deadline() {
    // The memory store answers on its first poll, so a tiny store deadline never fires; it only
    // makes the RateLimitService call deadline (once set server-wide on this listener) tiny.
    // tonic's server-wide timeout bounds a call only until its response head, so this passed
    // with it too; it guards that no deadline, tonic's or one added later, ends a stream.
    let mut config = Config::new(StoreChoice::Memory, TOKEN);
    config.store_deadline = Duration::from_millis(2);
    let pause = Duration::from_millis(600);
    assert!(Rls::call_deadline(config.store_deadline) < pause);
    let rig = Rig::start_with(config).await;
    rig.put_rule(long_rule("ex_long", "leaky_bucket", 10)).await;
    let mut stream = rig.open().await;
    let (status, answer) = stream
        .ask(1, "/v1/throttle", throttle("ex_long", "k"))
        .await;
    assert_eq!((status, answer["allowed"].clone()), (200, json!(true)));
    tokio::time::sleep(pause).await;
    let (status, answer) = stream
        .ask(2, "/v1/throttle", throttle("ex_long", "k"))
        .await;
    assert_eq!(
        (status, answer["remaining"].clone()),
        (200, json!(8)),
        "{answer}"
    );
    rig.stop().await;
}

/// A message whose `path` (field 2) is not UTF-8: no `ExchangeRequest` decodes from it.
#[derive(Clone, PartialEq, prost::Message)]
struct NotARequest {
    #[prost(bytes = "vec", tag = "2")]
    path: Vec<u8>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_message_ends_its_stream_with_invalid_argument_and_only_that_stream() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(long_rule("ex_bad", "gcra", 100)).await;
    let mut healthy = rig.open().await;
    assert_eq!(healthy.throttle_k(1, "ex_bad").await, 200);

    let (tx, rx) = mpsc::channel(4);
    let mut grpc = rig.grpc();
    grpc.ready().await.unwrap();
    let mut replies = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            PathAndQuery::from_static(STREAM_PATH),
            ExchangeCodec::<NotARequest, ExchangeReply>::default(),
        )
        .await
        .unwrap()
        .into_inner();
    tx.send(NotARequest { path: vec![0xff] }).await.unwrap();
    let status = replies.message().await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    // The other stream and new ones carry on.
    assert_eq!(healthy.throttle_k(2, "ex_bad").await, 200);
    let mut fresh = rig.open().await;
    assert_eq!(fresh.throttle_k(3, "ex_bad").await, 200);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_are_counted_and_shutdown_ends_them_unavailable() {
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(long_rule("ex_gauge", "gcra", 100)).await;
    assert_eq!(
        rig.metric("sluice_exchange_streams").await.as_deref(),
        Some("0")
    );
    let mut a = rig.open().await;
    let mut b = rig.open().await;
    assert_eq!(a.throttle_k(1, "ex_gauge").await, 200);
    assert_eq!(b.throttle_k(1, "ex_gauge").await, 200);
    assert_eq!(
        rig.metric("sluice_exchange_streams").await.as_deref(),
        Some("2")
    );

    drop(a.tx);
    assert!(a.replies.message().await.unwrap().is_none());
    eventually(
        Duration::from_secs(10),
        "the ended stream is no longer counted",
        || async {
            (rig.metric("sluice_exchange_streams").await.as_deref() == Some("1")).then_some(())
        },
    )
    .await;

    // Stopping the server ends the open stream with UNAVAILABLE (the client reconnects).
    let stopping = tokio::spawn(rig.stop());
    // Bounded so that a stream the server forgot to end fails the test rather than hangs it.
    let status = tokio::time::timeout(Duration::from_secs(10), b.replies.message())
        .await
        .expect("the server ended the stream")
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    stopping.await.unwrap();
}
