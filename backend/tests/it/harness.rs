//! A sluice instance started in-process with `run` on port-0 loopback listeners, and small HTTP
//! helpers over reqwest. Used by the http_*, admin_* and concurrency tests.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_backend::store::redis::{RedisConfig, RedisTarget};
use sluice_backend::{run, Config, Listeners, RunError, StoreChoice};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The admin token every test instance uses.
pub const TOKEN: &str = "test-admin-token-0123456789";

/// A running sluice.
pub struct Sluice {
    /// `http://127.0.0.1:PORT` of the decision listener.
    pub decision: String,
    /// `http://127.0.0.1:PORT` of the admin listener.
    pub admin: String,
    /// A client with a bounded timeout.
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), RunError>>>,
}

/// A Redis store choice for `url` with a test-friendly timeout and a prefix.
pub fn redis(url: &str) -> StoreChoice {
    StoreChoice::Redis(RedisConfig {
        target: RedisTarget::Single(url.to_owned()),
        timeout: Duration::from_millis(500),
        max_in_flight: 1024,
        key_prefix: "sluice".into(),
        security: Default::default(),
    })
}

/// A Redis Cluster store choice over the nodes `urls` (`support::RedisCluster::urls`), with the
/// same timeout and prefix as [`redis`], so a case written for one store runs on the other.
pub fn cluster(urls: Vec<String>) -> StoreChoice {
    StoreChoice::Redis(RedisConfig {
        target: RedisTarget::Cluster(urls),
        timeout: Duration::from_millis(500),
        max_in_flight: 1024,
        key_prefix: "sluice".into(),
        security: Default::default(),
    })
}

/// A client with a 10 s bound on every request.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(128)
        .build()
        .expect("reqwest client")
}

impl Sluice {
    /// Starts sluice over `store` with the test token.
    pub async fn start(store: StoreChoice) -> Sluice {
        Sluice::start_with(Config::new(store, TOKEN)).await
    }

    /// Starts sluice with a full config, and waits until the admin listener answers /healthz.
    pub async fn start_with(config: Config) -> Sluice {
        let decision = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind decision");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let decision_url = format!("http://{}", decision.local_addr().expect("addr"));
        let admin_url = format!("http://{}", admin.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(run(
            Listeners {
                decision,
                admin,
                grpc: None,
                ratelimit_http: sluice_backend::RatelimitHttp::Off,
            },
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        let sluice = Sluice {
            decision: decision_url,
            admin: admin_url,
            http: client(),
            stop: Some(stop),
            handle: Some(handle),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(r) = sluice
                .http
                .get(format!("{}/healthz", sluice.admin))
                .send()
                .await
            {
                if r.status().is_success() {
                    return sluice;
                }
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not answer /healthz within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts and expects `run` to fail (returns its error).
    pub async fn start_err(config: Config) -> RunError {
        let decision = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind decision");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            run(
                Listeners {
                    decision,
                    admin,
                    grpc: None,
                    ratelimit_http: sluice_backend::RatelimitHttp::Off,
                },
                config,
                std::future::pending(),
            ),
        )
        .await
        .expect("run returned within 10 s");
        result.expect_err("run should have failed")
    }

    /// Stops gracefully; asserts that `run` returned Ok within 5 s.
    pub async fn stop(mut self) {
        stop_run(self.stop.take(), self.handle.take(), Duration::from_secs(5)).await;
    }

    /// `POST /v1/throttle`; returns (status, body).
    pub async fn throttle(&self, action: &str, key: &str, quantity: u64) -> (u16, Value) {
        self.post_decision(
            "/v1/throttle",
            json!({"action": action, "key": key, "quantity": quantity}),
        )
        .await
    }

    /// POST a JSON body to the decision listener.
    pub async fn post_decision(&self, path: &str, body: Value) -> (u16, Value) {
        status_and_json(
            self.http
                .post(format!("{}{path}", self.decision))
                .json(&body)
                .send()
                .await
                .expect("decision request"),
        )
        .await
    }

    /// `POST /v1/report` with `report` (a filter's report); asserts the 204 and hands the answer
    /// back.
    pub async fn post_report(&self, report: &Value) -> reqwest::Response {
        let r = self
            .http
            .post(format!("{}/v1/report", self.decision))
            .json(report)
            .send()
            .await
            .expect("report");
        assert_eq!(r.status().as_u16(), 204);
        r
    }

    /// `POST /v1/session` on the admin listener (a dashboard login) with `body`.
    pub async fn post_session(&self, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/session", self.admin))
            .json(&body)
            .send()
            .await
            .expect("login")
    }

    /// POST raw bytes to the decision listener.
    pub async fn post_raw(&self, path: &str, body: &'static [u8]) -> (u16, Value) {
        post_bytes(&self.http, format!("{}{path}", self.decision), body).await
    }

    /// An admin request with the token.
    pub fn admin_req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.admin))
            .bearer_auth(TOKEN)
    }

    /// `PUT /v1/rules/{action}` with the token; returns (status, body).
    pub async fn put_rule(&self, rule: Value) -> (u16, Value) {
        let action = rule["action"]
            .as_str()
            .expect("rule has an action")
            .to_owned();
        status_and_json(
            self.admin_req(reqwest::Method::PUT, &format!("/v1/rules/{action}"))
                .json(&rule)
                .send()
                .await
                .expect("put rule"),
        )
        .await
    }

    /// `GET` an admin path with the token, as JSON.
    pub async fn admin_get(&self, path: &str) -> (u16, Value) {
        status_and_json(
            self.admin_req(reqwest::Method::GET, path)
                .send()
                .await
                .expect("admin get"),
        )
        .await
    }

    /// The text of `/metrics` on the decision listener.
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.decision))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Ends a `run` spawned with a stop signal: sends the signal, then asserts that the task
/// returned Ok within `within`.
pub async fn stop_run(
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), RunError>>>,
    within: Duration,
) {
    if let Some(stop) = stop {
        let _ = stop.send(());
    }
    if let Some(handle) = handle {
        let result = tokio::time::timeout(within, handle)
            .await
            .unwrap_or_else(|_| panic!("run returned within {within:?} after shutdown"));
        result
            .expect("run task did not panic")
            .expect("run returned Ok");
    }
}

/// POSTs `body` to `url` as JSON (the bytes as they are, valid or not); returns the status and
/// the answer as JSON (Null if it is none).
pub async fn post_bytes(
    http: &reqwest::Client,
    url: String,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    status_and_json(
        http.post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("decision request"),
    )
    .await
}

/// Polls `check` every 25 ms until it returns Some, or panics after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One rule per algorithm whose bound, for a fresh key during a test that lasts minutes at most,
/// is exactly `capacity` (long windows; rates that leak one unit per hour).
pub fn long_rule(action: &str, algorithm: &str, capacity: u64) -> Value {
    match algorithm {
        "gcra" | "leaky_bucket" | "token_bucket" => {
            json!({"action": action, "algorithm": algorithm, "capacity": capacity, "rate": {"count": 1, "period": "1h"}})
        }
        _ => {
            json!({"action": action, "algorithm": algorithm, "capacity": capacity, "window": "7d"})
        }
    }
}

/// An answer's status and its body as JSON (`null` when it has none).
pub async fn status_and_json(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `GET url` without a token (either listener): the body as JSON. For the health, readiness and
/// OpenAPI documents most tests read.
pub async fn get_json(http: &reqwest::Client, url: String) -> Value {
    json_of(http.get(url)).await
}

/// `GET url` with the admin token: the body as JSON.
pub async fn admin_get_json(http: &reqwest::Client, url: String) -> Value {
    json_of(http.get(url).bearer_auth(TOKEN)).await
}

async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("json")
}

/// `GET url` without a token; asserts the answer's status and hands the response back for its
/// headers and body.
pub async fn get_with_status(
    http: &reqwest::Client,
    url: String,
    status: u16,
) -> reqwest::Response {
    let r = http.get(url).send().await.expect("GET");
    assert_eq!(r.status().as_u16(), status);
    r
}

/// The six algorithm names (one list for the tests and the benchmarks).
pub use crate::support::ALGORITHMS;
