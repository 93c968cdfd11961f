//! A sluice started in-process with `run` on port-0 loopback listeners (decision, admin
//! and the gRPC listener), with a client connected to the gRPC listener. Used by the rls,
//! rls_history and exchange tests, which add their own calls in an `impl GrpcRig<TheirClient>`.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::Value;
use sluice_backend::{run, Config, Listeners, RatelimitHttp, RunError, StoreChoice};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::harness::{client, eventually, post_bytes, stop_run, TOKEN};

/// What a test talks to the gRPC listener with, made from the connected channel.
pub trait GrpcClient {
    /// The channel's bound on each call: the RLS client's calls are short; the exchange's
    /// streams live as long as a test wants them to, so its channel has none.
    const CALL_TIMEOUT: Option<Duration>;

    /// The client over `channel`.
    fn over(channel: Channel) -> Self;
}

/// The bare channel, for the exchange's hand-built streaming and unary calls.
impl GrpcClient for Channel {
    const CALL_TIMEOUT: Option<Duration> = None;

    fn over(channel: Channel) -> Self {
        channel
    }
}

/// Envoy's rate limit service client, from envoy-types.
impl GrpcClient for RateLimitServiceClient<Channel> {
    const CALL_TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));

    fn over(channel: Channel) -> Self {
        RateLimitServiceClient::new(channel)
    }
}

/// A running sluice with its gRPC listener, and a `C` connected to that listener.
pub struct GrpcRig<C> {
    /// `http://127.0.0.1:PORT` of the admin listener.
    pub admin: String,
    /// `http://127.0.0.1:PORT` of the decision listener.
    pub decision: String,
    /// `http://127.0.0.1:PORT` of the gRPC listener.
    pub grpc: String,
    /// `http://127.0.0.1:PORT` of envoyproxy/ratelimit's HTTP surface (`POST /json`, ...), on a
    /// listener of its own.
    pub peer: String,
    /// A client with a bounded timeout (harness::client).
    pub http: reqwest::Client,
    /// The client to the gRPC listener.
    pub client: C,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), RunError>>>,
}

impl<C: GrpcClient> GrpcRig<C> {
    /// Starts sluice over `store` with the test token.
    pub async fn start(store: StoreChoice) -> Self {
        Self::start_with(Config::new(store, TOKEN)).await
    }

    /// Starts sluice with a full config, waits until the admin listener answers /healthz, and
    /// connects to the gRPC listener.
    pub async fn start_with(config: Config) -> Self {
        let bind = || TcpListener::bind("127.0.0.1:0");
        let (decision, admin, grpc, peer) = (
            bind().await.unwrap(),
            bind().await.unwrap(),
            bind().await.unwrap(),
            bind().await.unwrap(),
        );
        let peer_url = format!("http://{}", peer.local_addr().unwrap());
        let admin_url = format!("http://{}", admin.local_addr().unwrap());
        let decision_url = format!("http://{}", decision.local_addr().unwrap());
        let grpc_url = format!("http://{}", grpc.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(run(
            Listeners {
                decision,
                admin,
                grpc: Some(grpc),
                ratelimit_http: RatelimitHttp::Own(peer),
            },
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        let http = client();
        eventually(Duration::from_secs(10), "sluice answers /healthz", || {
            let r = http.get(format!("{admin_url}/healthz")).send();
            async move { r.await.ok().filter(|r| r.status().is_success()) }
        })
        .await;
        let mut endpoint = tonic::transport::Endpoint::from_shared(grpc_url.clone()).unwrap();
        if let Some(timeout) = C::CALL_TIMEOUT {
            endpoint = endpoint.timeout(timeout);
        }
        let channel = endpoint.connect().await.unwrap();
        GrpcRig {
            admin: admin_url,
            decision: decision_url,
            grpc: grpc_url,
            peer: peer_url,
            http,
            client: C::over(channel),
            stop: Some(stop),
            handle: Some(handle),
        }
    }
}

impl<C> GrpcRig<C> {
    /// `PUT /v1/rules/{action}` with the token; asserts 200.
    pub async fn put_rule(&self, rule: Value) {
        let action = rule["action"].as_str().unwrap().to_owned();
        let r = self
            .http
            .put(format!("{}/v1/rules/{action}", self.admin))
            .bearer_auth(TOKEN)
            .json(&rule)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    }

    /// `GET /v1/keys?key={key}` with the token: every action's view of the key.
    pub async fn key_view(&self, key: &str) -> Value {
        let r = self
            .http
            .get(format!("{}/v1/keys?key={key}", self.admin))
            .bearer_auth(TOKEN)
            .send();
        r.await.unwrap().json().await.unwrap()
    }

    /// The decision listener's answer to `POST {path}` with `body`.
    pub async fn http_post(&self, path: &str, body: Vec<u8>) -> (u32, Value) {
        let url = format!("{}{path}", self.decision);
        let (status, answer) = post_bytes(&self.http, url, body).await;
        (u32::from(status), answer)
    }

    /// The text of `/metrics` on the decision listener.
    pub async fn metrics(&self) -> String {
        let r = self.http.get(format!("{}/metrics", self.decision)).send();
        r.await.unwrap().text().await.unwrap()
    }

    /// The value of the unlabelled metric `name`, if `/metrics` has it.
    pub async fn metric(&self, name: &str) -> Option<String> {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_owned))
    }

    /// Stops gracefully; asserts that `run` returned Ok within 6 s.
    pub async fn stop(self) {
        stop_run(self.stop, self.handle, Duration::from_secs(6)).await;
    }
}
