//! Assembly, the top of the crate: open the store, load and import rules, build the shared state
//! ([`App`], which lives at the ground in [`crate::state`]), start the background tasks, serve
//! the listeners (decision, admin, gRPC) until shutdown, then stop the tasks and flush what is
//! pending. Nothing imports this file but the binary's edge ([`crate::cli`], [`crate::run`]).

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::activity::{self, ActivityBook};
use crate::auth::{Auth, AuthError};
use crate::config::{Config, StoreChoice};
use crate::http;
use crate::levels::LevelsHub;
use crate::metrics::Metrics;
use crate::rules::{self, RuleCache, RuleSet};
use crate::state::App;
use crate::store::memory::sizing::BYTES_PER_KEY;
use crate::store::memory::MemoryStore;
use crate::store::redis::{ConnectError, RedisConfigError, RedisStore};
use crate::store::{HealthStore, Store, StoreError};
use crate::wrong_listener::WrongListener;

/// The listeners, bound by the caller (port 0 in tests).
pub struct Listeners {
    /// The decision API over HTTP (the filter's `protocol: http`, tools; keep it off the public
    /// network).
    pub decision: TcpListener,
    /// The admin API and the dashboard (token protected).
    pub admin: TcpListener,
    /// The gRPC listener (see [`crate::grpc`]): the filter's default transport (the decision
    /// exchange) and Envoy's rate limit service. `None`: not served (`--grpc-listen off`).
    pub grpc: Option<TcpListener>,
    /// Where envoyproxy/ratelimit's HTTP surface (`POST /json`, `/healthcheck`, `/rlconfig`,
    /// [`http::peer`]) is served.
    pub ratelimit_http: RatelimitHttp,
}

/// Where envoyproxy/ratelimit's HTTP surface is served (`--ratelimit-http-listen`).
pub enum RatelimitHttp {
    /// Not served.
    Off,
    /// Beside the admin API, on the admin listener (only when given the admin listener's address,
    /// never by default): `POST /json` and `GET /rlconfig` then take the admin token there, as
    /// every other endpoint of that listener that decides or reports.
    OnAdmin,
    /// Beside the decision API, on the decision listener (given its address; the default with
    /// `--ratelimit-config`).
    OnDecision,
    /// On a listener of its own.
    Own(TcpListener),
}

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A Redis setting can never work; nothing was started. Caught before any connection, so it
    /// is never reported as an unreachable store.
    #[error("invalid Redis configuration: {0}")]
    RedisConfig(#[from] RedisConfigError),
    /// The admin token cannot key the session MAC.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The store could not be opened.
    #[error("cannot open the {kind} store: {source}")]
    Store {
        /// Which store.
        kind: &'static str,
        /// Why.
        source: StoreError,
    },
    /// The ratelimit configuration (`--ratelimit-config`) was refused or could not be published.
    #[error(transparent)]
    RatelimitConfig(#[from] crate::ratelimit::watch::StartError),
    /// Rules could not be loaded or imported at start.
    #[error("cannot {what} at start: {source}")]
    Rules {
        /// "load the rules from the store" or "import the rules file".
        what: &'static str,
        /// Why.
        source: StoreError,
    },
    /// A listener's TLS files cannot be served (the error names the flag and file).
    #[error(transparent)]
    Tls(#[from] crate::tls::LoadError),
    /// A listener failed.
    #[error("listener failed: {0}")]
    Io(#[from] std::io::Error),
}

async fn open_store(
    choice: StoreChoice,
    max_keys: Option<NonZeroUsize>,
) -> Result<Arc<dyn Store>, RunError> {
    match choice {
        StoreChoice::Memory => {
            tracing::warn!("memory store: state is per process; use --redis-url for many replicas");
            let store = match max_keys {
                Some(n) => MemoryStore::with_max_keys(n.get()),
                None => MemoryStore::new(),
            };
            tracing::info!(
                max_keys = store.max_keys(),
                approx_mb = store.max_keys() as u64 * BYTES_PER_KEY / 1_000_000,
                sized_from_memory = max_keys.is_none(),
                "memory store: at most this many throttle keys (--max-keys); when full it evicts the keys with the least state at stake"
            );
            Ok(Arc::new(store))
        }
        StoreChoice::Redis(config) => {
            let target = format!("{:?}", config.target);
            let store = RedisStore::connect(config).await.map_err(|e| match e {
                ConnectError::Config(e) => RunError::RedisConfig(e),
                ConnectError::Store(source) => RunError::Store {
                    kind: "redis",
                    source,
                },
            })?;
            tracing::info!(store = store.kind(), target = %target, "redis store: state and rules shared by every replica");
            Ok(Arc::new(store))
        }
        StoreChoice::Custom(store) => {
            tracing::info!(store = store.kind(), "custom store");
            Ok(store)
        }
    }
}

/// Runs the service on `listeners` until `shutdown` completes, then shuts down gracefully:
/// in-flight requests finish, SSE streams end, the pending activity batch is flushed. The gRPC
/// listener, if given, is served by the same app and stops with it.
pub async fn run(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let auth = Auth::for_config(&config.admin_token, &config.admin_identities)?;
    let refused = crate::tls::refusal::RefusedCounter::default();
    let tls = crate::tls::Served::start(&config.listener_tls, &refused)?;
    let store = open_store(config.store, config.max_keys).await?;

    let snapshot = store.load_rules().await.map_err(|source| RunError::Rules {
        what: "load the rules from the store",
        source,
    })?;
    let cache = Arc::new(RuleCache::new(RuleSet::from_snapshot(snapshot)));
    if !config.import_rules.is_empty() {
        for rule in &config.import_rules {
            store
                .put_rule(rule)
                .await
                .map_err(|source| RunError::Rules {
                    what: "import the rules file",
                    source,
                })?;
        }
        cache
            .reload(store.as_ref())
            .await
            .map_err(|source| RunError::Rules {
                what: "load the rules from the store",
                source,
            })?;
        tracing::info!(imported = config.import_rules.len(), "rules file imported");
    }
    let ratelimit = match &config.ratelimit_config {
        Some(path) => {
            let merge = crate::ratelimit::load::MergeDomains(config.ratelimit_merge_domains);
            Some(crate::ratelimit::watch::start(path, merge, store.as_ref(), &cache).await?)
        }
        None => None,
    };
    let current = cache.current();
    tracing::info!(
        rules = current.rules.len(),
        version = current.version.unwrap_or(0),
        // The first few only: a ratelimit config may imply 10,000 (GET /v1/rules lists them).
        actions = ?current.rules.keys().take(20).collect::<Vec<_>>(),
        "rules loaded"
    );

    if ratelimit.is_some() {
        say_unknown_domains_answer_ok(&current, config.ratelimit_semantics);
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut metrics = Metrics::with_store(store.clone());
    metrics.register(
        crate::tls::refusal::RefusedCounter::NAME,
        crate::tls::refusal::RefusedCounter::HELP,
        refused.family(),
    );
    let rlqs_metrics = crate::rlqs::metrics::RlqsMetrics::registered(&mut metrics);
    let metrics = Arc::new(metrics);
    metrics.set_rules(current.rules.len());
    let app = Arc::new(App {
        store: store.clone(),
        rules: cache.clone(),
        activity: Arc::new(ActivityBook::new()),
        metrics: metrics.clone(),
        auth,
        sign_ins: crate::sign_ins::SignIns::new(
            config.admin_sign_in_burst,
            crate::sign_ins::REFILL_EVERY,
            crate::sign_ins::MAX_ADDRESSES,
        ),
        secure_cookie: config.listener_tls.admin.is_some(),
        levels: Arc::new(LevelsHub::new()),
        store_deadline: config.store_deadline,
        latency: Arc::new(crate::deadline::latency::LatencyEstimate::new(
            std::time::Instant::now(),
        )),
        stopping: stop_rx.clone(),
        ratelimit: ratelimit.clone(),
        ratelimit_semantics: config.ratelimit_semantics,
        resets: crate::resets::Resets::new(),
        rlqs: std::sync::OnceLock::new(),
    });

    let intervals = config.intervals;
    let mut tasks = tokio::task::JoinSet::new();
    {
        let metrics = metrics.clone();
        tasks.spawn(rules::refresh_loop(
            cache.clone(),
            store.clone(),
            intervals.rules_poll,
            stop_rx.clone(),
            move |n| metrics.set_rules(n),
        ));
    }
    if let Some(live) = ratelimit {
        tasks.spawn(crate::ratelimit::watch::watch_loop(
            live,
            store.clone(),
            cache.clone(),
            stop_rx.clone(),
        ));
    }
    for listener in tls.each() {
        tasks.spawn(
            listener
                .clone()
                .watch_loop(crate::tls::live::ROTATION_POLL, stop_rx.clone()),
        );
    }
    tasks.spawn(activity::flush_loop(
        app.activity.clone(),
        store.clone(),
        metrics.clone(),
        cache.clone(),
        intervals.activity_flush,
        stop_rx.clone(),
    ));
    {
        let hub = app.levels.clone();
        let (store, book, cache, stop) = (
            store.clone(),
            app.activity.clone(),
            cache.clone(),
            stop_rx.clone(),
        );
        tasks.spawn(async move {
            hub.run(store, book, cache, intervals.levels_push, stop)
                .await
        });
    }

    let decision_addr = listeners.decision.local_addr()?;
    let admin_addr = listeners.admin.local_addr()?;
    let grpc_addr = match &listeners.grpc {
        Some(listener) => Some(listener.local_addr()?),
        None => None,
    };
    let (ratelimit_http, peer_on_admin, peer_on_decision) = match listeners.ratelimit_http {
        RatelimitHttp::Own(listener) => (Some(listener), false, false),
        RatelimitHttp::OnAdmin => (None, true, false),
        RatelimitHttp::OnDecision => (None, false, true),
        RatelimitHttp::Off => (None, false, false),
    };
    // The surface's routes, merged into a shared listener's router (an empty router elsewhere);
    // on the admin listener behind its token.
    let peer_routes = |on: bool| {
        if on {
            http::peer::routes(app.clone())
        } else {
            axum::Router::new()
        }
    };
    let peer_admin_routes = |on: bool| {
        if on {
            http::peer::routes_behind_token(app.clone())
        } else {
            axum::Router::new()
        }
    };
    let peer_where = match (&ratelimit_http, peer_on_admin, peer_on_decision) {
        (Some(listener), _, _) => Some(listener.local_addr()?),
        (None, true, _) => Some(admin_addr),
        (None, _, true) => Some(decision_addr),
        _ => None,
    };
    let wrong = WrongListener::new(decision_addr, grpc_addr, metrics.clone());
    let dashboard = http::dashboard::Dashboard::new(config.dashboard_dir.as_deref());
    tracing::info!(addr = %decision_addr, "decision API listening over HTTP (POST /v1/throttle, /v1/cl.throttle; the filter's protocol: http)");
    tracing::info!(addr = %admin_addr, dashboard = %dashboard.describe(), "admin API and dashboard listening");
    match grpc_addr {
        Some(addr) => tracing::info!(addr = %addr, "gRPC listener listening: the sluice filter's decision exchange (sluice.v1.DecisionExchange, its default grpc_stream protocol) and Envoy's rate limit service (envoy.service.ratelimit.v3)"),
        None => tracing::info!("gRPC listener off (--grpc-listen off): filters using the default grpc_stream protocol and Envoy's rate limit service get no answer from this backend"),
    }
    if let Some(addr) = peer_where {
        tracing::info!(addr = %addr, shared = peer_on_admin || peer_on_decision, "envoyproxy/ratelimit's HTTP surface listening (POST /json, GET /healthcheck, GET /rlconfig; --ratelimit-http-listen)");
    }

    tls.warn_plaintext(decision_addr, admin_addr, grpc_addr);

    // One shutdown signal fans out to both servers and every task.
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down: finishing in-flight requests");
            let _ = stop_tx.send(true);
        });
    }
    // If either server fails, the other stops too.
    let header_read_timeout = config.header_read_timeout;
    let decision_server = async {
        let r = serve(
            listeners.decision,
            http::decision_router(app.clone())
                .merge(peer_routes(peer_on_decision))
                .layer(axum::middleware::from_fn_with_state(
                    wrong.clone(),
                    crate::wrong_listener::refuse_grpc,
                )),
            header_read_timeout,
            tls.decision.clone(),
            stop_rx.clone(),
        )
        .await;
        let _ = stop_tx.send(true);
        r
    };
    let admin_server = async {
        let r = serve(
            listeners.admin,
            http::admin_router(app.clone(), dashboard).merge(peer_admin_routes(peer_on_admin)),
            header_read_timeout,
            tls.admin.clone(),
            stop_rx.clone(),
        )
        .await;
        let _ = stop_tx.send(true);
        r
    };
    let grpc_server = async {
        let Some(listener) = listeners.grpc else {
            return Ok(());
        };
        let r = crate::grpc::serve(
            listener,
            app.clone(),
            wrong.clone(),
            tls.grpc.clone(),
            rlqs_metrics.clone(),
            config.rlqs.clone(),
            stop_rx.clone(),
        )
        .await;
        let _ = stop_tx.send(true);
        r.map_err(|e| RunError::Io(std::io::Error::other(e)))
    };
    let ratelimit_http_server = async {
        let Some(listener) = ratelimit_http else {
            return Ok(());
        };
        let r = serve(
            listener,
            http::peer::router(app.clone()),
            header_read_timeout,
            // A listener of its own takes the admin listener's TLS (it is part of that API's surface).
            tls.admin.clone(),
            stop_rx.clone(),
        )
        .await;
        let _ = stop_tx.send(true);
        r
    };
    let (d, a, g, p) = tokio::join!(
        decision_server,
        admin_server,
        grpc_server,
        ratelimit_http_server
    );

    let _ = stop_tx.send(true);
    let flush = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), flush)
        .await
        .is_err()
    {
        tracing::warn!("background tasks did not stop within 2 s; abandoning them");
    }
    tracing::info!("stopped");
    d.and(a).and(g).and(p)
}

async fn serve(
    listener: TcpListener,
    router: axum::Router,
    header_read_timeout: Duration,
    transport: crate::tls::Transport,
    stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    http::serve::serve(listener, router, header_read_timeout, transport, stop).await?;
    Ok(())
}

/// At start with `--ratelimit-config`: when sluice has rules of its own, says that an RLS request
/// for a domain in no file is answered OK by the peer's rule, not decided by them (unless the
/// semantics say `own_rules_for_unknown_domains`). Why: adding a config directory used to turn
/// those rules off for every other domain without a word.
fn say_unknown_domains_answer_ok(
    rules: &crate::rules::RuleSet,
    semantics: crate::ratelimit::semantics::Semantics,
) {
    use crate::ratelimit::semantics::Point;
    let own = crate::grpc::rls::unknown_domains::own_rule_count(rules);
    if own == 0 || semantics.has(Point::OwnRulesForUnknownDomains) {
        return;
    }
    tracing::warn!(
        own_rules = own,
        filter_domain = sluice_core::descriptor::FILTER_DOMAIN,
        "--ratelimit-config: RLS requests for a domain in no file are answered OK with no limit (the peer's answer), not decided by sluice's own rules (only the sluice filter's domain still is); each such domain is logged once and counted in sluice_rls_unknown_domain_total; set --ratelimit-semantics own_rules_for_unknown_domains to decide them by sluice's rules"
    );
}
