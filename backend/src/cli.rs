//! The `sluice` command line: flags (each with a `SLUICE_*` environment twin), logging, signals.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};

use crate::app::RatelimitHttp;
use crate::config::{Config, GrpcListen, Listen, StoreChoice, DEFAULT_GRPC_LISTEN};
use crate::http::serve::DEFAULT_HEADER_READ_TIMEOUT_MS;
use crate::rules_file;
use crate::store::redis::{
    is_tls_url, RedisConfig, RedisTarget, SentinelTarget, DEFAULT_KEY_PREFIX,
    DEFAULT_MAX_IN_FLIGHT, MAX_IN_FLIGHT, MAX_TIMEOUT_MS,
};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// sluice: rate-limit decisions for Envoy, with the rules and live levels on a dashboard.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Rate-limit decisions for Envoy: gcra, leaky/token bucket and window algorithms over memory or Redis",
    long_about = "sluice answers rate-limit decisions for Envoy: on the gRPC listener (default 127.0.0.1:8082), \
the sluice filter's default grpc_stream protocol and Envoy's rate limit service (RLS v3); on the decision listener, \
the same decisions over HTTP (POST /v1/throttle: the filter's protocol: http, tools). It serves the admin API and \
dashboard (rules, live funnel levels) on the admin listener.\n\n\
Without --redis-url, --redis-cluster or --redis-sentinel, state lives in this process only (fine for one replica). With Redis, \
every replica shares state and rules; rule changes reach every replica within a second.\n\n\
Every flag can also be set by its environment variable (shown as [env: ...]); flags win. \
Log verbosity follows RUST_LOG (default: info).",
    after_help = "Examples:\n  \
sluice --rules demo/rules.yaml\n  \
sluice --redis-url redis://127.0.0.1:6379/ --admin-token \"$TOKEN\"\n  \
SLUICE_REDIS_CLUSTER=redis://10.0.0.1:7000,redis://10.0.0.2:7000 sluice --log-format json"
)]
pub struct Cli {
    /// Address of the decision API over HTTP (the filter's protocol: http, tools; keep it off the
    /// public network).
    #[arg(
        long,
        env = "SLUICE_DECISION_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8081"
    )]
    pub decision_listen: SocketAddr,

    /// Address of the admin API and dashboard (token protected).
    #[arg(
        long,
        env = "SLUICE_ADMIN_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub admin_listen: SocketAddr,

    /// Address of the gRPC listener (HTTP/2 cleartext as Envoy's gRPC clusters speak, or TLS with
    /// --grpc-tls-cert): the sluice
    /// filter's default transport (its grpc_stream protocol, sluice.v1.DecisionExchange) and
    /// Envoy's rate limit service (RLS v3, for the native envoy.filters.http.ratelimit filter).
    /// `off` disables it. Keep it off the public network. [default: 127.0.0.1:8082]
    #[arg(long, env = "SLUICE_GRPC_LISTEN", value_name = "ADDR|off")]
    pub grpc_listen: Option<GrpcListen>,

    /// The old name of --grpc-listen (SLUICE_RLS_LISTEN: of SLUICE_GRPC_LISTEN); still accepted,
    /// with a warning at start.
    #[arg(long, env = "SLUICE_RLS_LISTEN", value_name = "ADDR|off")]
    pub rls_listen: Option<GrpcListen>,

    /// Redis single node, e.g. redis://127.0.0.1:6379/0. Default: memory store.
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        value_name = "URL",
        conflicts_with = "redis_cluster"
    )]
    pub redis_url: Option<String>,

    /// Redis Cluster seed nodes, comma-separated, e.g. redis://10.0.0.1:7000,redis://10.0.0.2:7000.
    #[arg(long, env = "SLUICE_REDIS_CLUSTER", value_name = "URL,URL", value_delimiter = ',', num_args = 1..)]
    pub redis_cluster: Vec<String>,

    /// Sentinel-managed Redis: the master's name and the sentinels, e.g.
    /// mymaster@10.0.0.1:26379,10.0.0.2:26379 (envoyproxy/ratelimit's mymaster,10.0.0.1:26379,...
    /// is accepted too). Decisions follow the master the sentinels name across failovers.
    #[arg(long, env = "SLUICE_REDIS_SENTINEL", value_name = "MASTER@HOST:PORT,HOST:PORT",
          conflicts_with_all = ["redis_url", "redis_cluster"])]
    pub redis_sentinel: Option<String>,

    /// With --redis-sentinel: the password of the master and its replicas (their requirepass);
    /// prefer the environment variable. A sentinel's own password goes in its address:
    /// redis://:PASSWORD@HOST:PORT.
    #[arg(long, env = "SLUICE_REDIS_SENTINEL_MASTER_PASSWORD", value_name = "PASSWORD",
          requires = "redis_sentinel", conflicts_with_all = ["redis_url", "redis_cluster"], hide_env_values = true,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub redis_sentinel_master_password: Option<String>,

    /// Redis TLS and credentials (cli/redis_flags.rs).
    #[command(flatten)]
    pub redis_security: RedisSecurityFlags,

    /// Bound on each Redis command; past it the command fails with 503 store_timeout. Decisions
    /// whose caller sends a deadline (the filter does) are bounded by it instead; this bounds
    /// the rest, and lets a step that outlives its caller end with a known answer (default: 4 x
    /// the filter's default backend.timeout_ms; docs/failure-modes.md, "One deadline").
    #[arg(long, env = "SLUICE_REDIS_TIMEOUT_MS", value_name = "MS", default_value_t = crate::deadline::DEFAULT_REDIS_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    pub redis_timeout_ms: u64,

    /// Most Redis commands in flight; beyond it decisions fail fast with 503 overloaded instead of queueing.
    #[arg(long, env = "SLUICE_MAX_IN_FLIGHT", value_name = "N", default_value_t = DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
              .range(1..=u64::try_from(MAX_IN_FLIGHT).unwrap_or(u64::MAX)))]
    pub max_in_flight: usize,

    /// Bound on reading a request's headers on both listeners (slow clients are cut off); the
    /// body must follow within the same time, and a keep-alive connection idle this long closes.
    #[arg(long, env = "SLUICE_HEADER_READ_TIMEOUT_MS", value_name = "MS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub header_read_timeout_ms: u64,

    /// Memory store: the most throttle keys held; when full, the store evicts the keys with the
    /// least state at stake (already fresh first) and keeps limiting. Default: a quarter of this
    /// machine's (or container's) memory at 256 bytes per key, between 100,000 and 10,000,000.
    #[arg(long, env = "SLUICE_MAX_KEYS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_keys: Option<u64>,

    /// Prefix of every Redis key sluice writes (to share one Redis between deployments).
    #[arg(
        long,
        env = "SLUICE_KEY_PREFIX",
        value_name = "PREFIX",
        default_value = DEFAULT_KEY_PREFIX
    )]
    pub key_prefix: String,

    /// Rules to import at start (YAML or JSON: a list of rules, or {rules: [...]}); they replace
    /// stored rules of the same action. A file with any invalid rule imports nothing.
    #[arg(long, env = "SLUICE_RULES", value_name = "FILE")]
    pub rules: Option<PathBuf>,

    /// An envoyproxy/ratelimit configuration (a YAML file or a directory of them), served on the
    /// rate limit service as that service answers it, and reloaded within a second of a change
    /// (docs/rls.md "Coming from envoyproxy/ratelimit"). A bad file stops the start.
    #[arg(long, env = "SLUICE_RATELIMIT_CONFIG", value_name = "PATH")]
    pub ratelimit_config: Option<PathBuf>,

    /// With --ratelimit-config: several files may hold one domain, their descriptors side by
    /// side (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true).
    #[arg(long, env = "SLUICE_RATELIMIT_MERGE_DOMAINS")]
    pub ratelimit_merge_domains: bool,

    /// With --ratelimit-config: whose answers its domains give. `peer` (the default):
    /// envoyproxy/ratelimit's, answer for answer; `sluice`: sluice's stricter ones; or a
    /// comma-separated list of them: strict_counting, refuse_limit_overrides,
    /// own_rules_for_unknown_domains (docs/rls.md "Whose semantics"). A file's top-level
    /// `sluice_semantics` wins for its domain.
    #[arg(long, env = "SLUICE_RATELIMIT_SEMANTICS", value_name = "SEMANTICS", default_value = "peer", value_parser = crate::ratelimit::semantics::Semantics::parse)]
    pub ratelimit_semantics: crate::ratelimit::semantics::Semantics,

    /// envoyproxy/ratelimit's HTTP surface: POST /json (a RateLimitRequest as JSON, answered as
    /// on the rate limit service), GET /healthcheck and GET /rlconfig (the peer's PORT, HOST and
    /// DEBUG_PORT). An address the admin or decision listener has is served by that listener
    /// (on the admin listener, POST /json and GET /rlconfig then take the admin token); `off`
    /// disables it. Elsewhere no token, as on the peer: keep it off the public network.
    /// [default with --ratelimit-config: the decision listener (it decides, so it is never on
    /// the admin listener unasked); without it: off]
    #[arg(long, env = "SLUICE_RATELIMIT_HTTP_LISTEN", value_name = "ADDR|off")]
    pub ratelimit_http_listen: Option<Listen>,

    /// RLQS (Envoy's quota filter, docs/rlqs.md): the TTL of every assignment, in whole
    /// seconds (6 to 300). A disconnected Envoy keeps enforcing its share this long, and sluice
    /// keeps paying for it; shorter frees a departed Envoy's share sooner.
    #[arg(long, env = "SLUICE_RLQS_TTL", value_name = "SECONDS", default_value_t = sluice_core::rlqs::DEFAULT_TTL_S)]
    pub rlqs_ttl: u64,

    /// RLQS: the most quota filter buckets one Envoy stream may hold; a bucket past it is
    /// answered DENY_ALL (and counted).
    #[arg(long, env = "SLUICE_RLQS_MAX_BUCKETS", value_name = "N", default_value_t = sluice_core::rlqs::DEFAULT_MAX_BUCKETS_PER_STREAM)]
    pub rlqs_max_buckets: usize,

    /// RLQS: a mapping file (YAML or JSON) saying which action and key each quota filter
    /// bucket id stands for (docs/rlqs.md "Mapping file"). Without it: the default mapping
    /// (the `name` entry names the action, the other entries form the key). A bad file stops
    /// the start, naming the rule and field.
    #[arg(long, env = "SLUICE_RLQS_MAPPING", value_name = "FILE")]
    pub rlqs_mapping: Option<PathBuf>,

    /// A tool instead of the service.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Token for the admin API (Authorization: Bearer TOKEN, or the dashboard login). If unset,
    /// a random one is generated and printed once to stderr.
    #[arg(
        long,
        env = "SLUICE_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// The admin token read from a file (its first line; e.g. a mounted secret), instead of
    /// --admin-token, so it is neither on the command line nor in the environment. Read at start;
    /// restart to rotate.
    #[arg(
        long,
        env = "SLUICE_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "admin_token"
    )]
    pub admin_token_file: Option<PathBuf>,

    /// TLS on the listeners (docs/security.md).
    #[command(flatten)]
    pub tls: crate::tls::flags::TlsFlags,

    /// Named admin identities, one `name token` per line (`#` comments), so the audit trail and
    /// the dashboard say who: each admin signs in with their own token. With it, --admin-token
    /// is optional (if given, it is the identity `admin`).
    #[arg(long, env = "SLUICE_ADMIN_TOKENS_FILE", value_name = "FILE")]
    pub admin_tokens_file: Option<PathBuf>,

    /// Failed admin sign-ins (wrong tokens) one client address may make back to back before it
    /// is refused with 429; one more is allowed every 6 s. Raise it when many admins share an
    /// address (a reverse proxy in front of the admin listener).
    #[arg(
        long,
        env = "SLUICE_ADMIN_SIGN_IN_BURST",
        value_name = "N",
        default_value_t = crate::sign_ins::BURST,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub admin_sign_in_burst: u64,

    /// Directory of the built dashboard (trunk build output). Default: dashboard/dist if it exists.
    #[arg(long, env = "SLUICE_DASHBOARD_DIR", value_name = "DIR")]
    pub dashboard_dir: Option<PathBuf>,

    /// Log format.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `sluice <command>`: tools that run and exit.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Rules tools.
    Rules {
        /// The tool.
        #[command(subcommand)]
        tool: RulesTool,
    },
}

/// `sluice rules <tool>`.
#[derive(Debug, clap::Subcommand)]
pub enum RulesTool {
    /// Validates an envoyproxy/ratelimit configuration (a file or a directory) as
    /// --ratelimit-config loads it; lists every error (file: path.to.field: reason) and exits
    /// non-zero if there is any.
    Check {
        /// The file or directory.
        path: PathBuf,
        /// Several files may hold one domain (as --ratelimit-merge-domains).
        #[arg(long)]
        merge_domains: bool,
    },
}

/// Installs the tracing subscriber (RUST_LOG filter, default info).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// `--grpc-listen` and its old name `--rls-listen` give different addresses.
#[derive(Debug, thiserror::Error)]
#[error("--grpc-listen (SLUICE_GRPC_LISTEN) is {new} but its old name --rls-listen (SLUICE_RLS_LISTEN) is {old}; give only --grpc-listen")]
pub struct GrpcListenConflict {
    /// The new name's value.
    pub new: GrpcListen,
    /// The old name's value.
    pub old: GrpcListen,
}

impl Cli {
    /// Where the gRPC listener listens: `--grpc-listen`, or its old name `--rls-listen` (with a
    /// warning), or the default. Both, with different values, is refused naming both.
    pub fn grpc_listen(&self) -> Result<GrpcListen, GrpcListenConflict> {
        if let Some(old) = self.rls_listen {
            tracing::warn!("--rls-listen (SLUICE_RLS_LISTEN) is the old name of --grpc-listen (SLUICE_GRPC_LISTEN); it still works, but use the new name");
            if let Some(new) = self.grpc_listen.filter(|new| *new != old) {
                return Err(GrpcListenConflict { new, old });
            }
        }
        Ok(self
            .grpc_listen
            .or(self.rls_listen)
            .unwrap_or(Listen::At(DEFAULT_GRPC_LISTEN)))
    }

    /// Where envoyproxy/ratelimit's HTTP surface listens: `--ratelimit-http-listen`, else the
    /// decision listener with `--ratelimit-config` (the surface decides: it belongs with the
    /// Envoys' API, never beside the admin API unasked, where it answered without the token; a
    /// default never binds a port of its own, so it cannot clash), and `off` without.
    pub fn ratelimit_http_listen(&self) -> Listen {
        match (self.ratelimit_http_listen, &self.ratelimit_config) {
            (Some(listen), _) => listen,
            (None, Some(_)) => Listen::At(self.decision_listen),
            (None, None) => Listen::Off,
        }
    }

    /// Whether a Redis URL (or the Sentinel setting) asks for TLS (`rediss://`).
    fn redis_tls_urls(&self) -> bool {
        let tls = |urls: &str| urls.split(',').any(is_tls_url);
        self.redis_url.as_deref().is_some_and(tls)
            || self.redis_cluster.iter().any(|u| tls(u))
            || self.redis_sentinel.as_deref().is_some_and(tls)
    }

    /// The store this command line asks for, with every Redis setting checked
    /// ([`RedisConfig::validate`]): a bad one is refused here, naming its flag. The peer's
    /// `REDIS_TLS*` and `REDIS_AUTH` are read from the environment as fallbacks
    /// (`cli/redis_flags.rs`).
    pub fn store_choice(&self) -> Result<StoreChoice, FlagError> {
        self.store_choice_with(&|name| std::env::var(name).ok())
    }

    /// [`Cli::store_choice`] with the peer's variables read by `env` (tests pass their own).
    pub fn store_choice_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<StoreChoice, FlagError> {
        let target = if let Some(url) = &self.redis_url {
            RedisTarget::Single(url.clone())
        } else if !self.redis_cluster.is_empty() {
            RedisTarget::Cluster(self.redis_cluster.clone())
        } else if let Some(spec) = &self.redis_sentinel {
            RedisTarget::Sentinel(SentinelTarget {
                master_password: self.redis_sentinel_master_password.clone(),
                ..SentinelTarget::parse(spec).map_err(FlagError::redis)?
            })
        } else {
            return Ok(StoreChoice::Memory);
        };
        let config = RedisConfig {
            target,
            timeout: Duration::from_millis(self.redis_timeout_ms),
            max_in_flight: self.max_in_flight,
            key_prefix: self.key_prefix.clone(),
            security: self.redis_security.security(self.redis_tls_urls(), env)?,
        };
        config.validate().map_err(FlagError::redis)?;
        Ok(StoreChoice::Redis(config))
    }

    /// Builds the [`Config`]: reads the rules file, settles the token and dashboard directory.
    /// A generated token is printed here, once.
    pub fn into_config(self) -> anyhow::Result<Config> {
        let store = self.store_choice()?;
        let store_deadline = match store {
            StoreChoice::Redis(_) => {
                crate::deadline::store_deadline(Duration::from_millis(self.redis_timeout_ms))
            }
            _ => Duration::from_secs(1),
        };
        let admin_identities = match &self.admin_tokens_file {
            Some(path) => {
                crate::secret_file::warn_if_readable_by_others(
                    "--admin-tokens-file (SLUICE_ADMIN_TOKENS_FILE)",
                    path,
                );
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--admin-tokens-file {}: {e}", path.display()))?;
                crate::auth::parse_tokens_file(&text)
                    .map_err(|e| anyhow::anyhow!("--admin-tokens-file {}: {e}", path.display()))?
            }
            None => Vec::new(),
        };
        let admin_token = match &self.admin_token_file {
            Some(path) => {
                let token = crate::auth::read_token_file(path).map_err(|e| {
                    anyhow::anyhow!(
                        "--admin-token-file (SLUICE_ADMIN_TOKEN_FILE) {}: {e}",
                        path.display()
                    )
                })?;
                crate::secret_file::warn_if_readable_by_others(
                    "--admin-token-file (SLUICE_ADMIN_TOKEN_FILE)",
                    path,
                );
                Some(token)
            }
            None => self.admin_token,
        };
        let listener_tls = self.tls.resolve()?;
        let admin_token = match admin_token {
            Some(t) if t.trim().is_empty() => anyhow::bail!("--admin-token (SLUICE_ADMIN_TOKEN) is empty; give a real token or leave it unset to generate one"),
            None if !admin_identities.is_empty() => String::new(),
            Some(t) => {
                if t.len() < 16 {
                    tracing::warn!("the admin token is shorter than 16 characters; use a long random one");
                }
                t
            }
            None => {
                let t = crate::auth::generate_token();
                eprintln!("sluice: no --admin-token given; generated this admin token for this run (set SLUICE_ADMIN_TOKEN to keep one across restarts):\n\n    {t}\n");
                t
            }
        };
        let import_rules = match &self.rules {
            Some(path) => rules_file::read(path)?,
            None => Vec::new(),
        };
        let dashboard_dir = self.dashboard_dir.or_else(|| {
            let default = PathBuf::from("dashboard/dist");
            default.join("index.html").is_file().then_some(default)
        });
        let max_keys = self.max_keys.map(|n| {
            NonZeroUsize::new(usize::try_from(n).unwrap_or(usize::MAX)).unwrap_or(NonZeroUsize::MIN)
        });
        if max_keys.is_some() && !matches!(store, StoreChoice::Memory) {
            tracing::warn!("--max-keys (SLUICE_MAX_KEYS) bounds the memory store only; with Redis, bound memory with its maxmemory setting");
        }
        let mut config = Config::new(store, admin_token);
        config.admin_identities = admin_identities;
        config.admin_sign_in_burst = self.admin_sign_in_burst;
        config.max_keys = max_keys;
        config.store_deadline = store_deadline;
        config.import_rules = import_rules;
        config.ratelimit_config = self.ratelimit_config;
        config.ratelimit_merge_domains = self.ratelimit_merge_domains;
        config.ratelimit_semantics = self.ratelimit_semantics;
        config.dashboard_dir = dashboard_dir;
        config.header_read_timeout = Duration::from_millis(self.header_read_timeout_ms);
        config.listener_tls = listener_tls;
        config.rlqs = crate::rlqs::Settings::from_flags(
            self.rlqs_ttl,
            self.rlqs_max_buckets,
            self.rlqs_mapping.as_deref(),
        )?;
        Ok(config)
    }
}

/// The listener of `--ratelimit-http-listen ADDR`; a refusal names the flag (an address in use
/// says how to share another sluice listener's).
async fn bind_ratelimit_http(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!("--ratelimit-http-listen (SLUICE_RATELIMIT_HTTP_LISTEN) {addr}: address in use; pass another address, the exact address of --admin-listen or --decision-listen to serve it there, or off")
        } else {
            anyhow::Error::new(e).context(format!(
                "cannot listen on {addr} (--ratelimit-http-listen, SLUICE_RATELIMIT_HTTP_LISTEN)"
            ))
        }
    })
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received"),
        _ = terminate => tracing::info!("SIGTERM received"),
    }
}

/// The whole binary: parse, bind, run until a signal.
pub async fn main_with(cli: Cli) -> anyhow::Result<()> {
    if let Some(Command::Rules {
        tool: RulesTool::Check {
            path,
            merge_domains,
        },
    }) = &cli.command
    {
        let merge = crate::ratelimit::load::MergeDomains(*merge_domains);
        let ok = crate::ratelimit::check::run(path, merge, &mut std::io::stdout().lock())?;
        anyhow::ensure!(ok, "{}: refused (errors above)", path.display());
        return Ok(());
    }
    let (decision_addr, admin_addr) = (cli.decision_listen, cli.admin_listen);
    let grpc_listen = cli.grpc_listen()?;
    let ratelimit_http_listen = cli.ratelimit_http_listen();
    let config = cli.into_config()?;
    let decision = tokio::net::TcpListener::bind(decision_addr)
        .await
        .with_context(|| format!("cannot listen on {decision_addr} (--decision-listen)"))?;
    let admin = tokio::net::TcpListener::bind(admin_addr)
        .await
        .with_context(|| format!("cannot listen on {admin_addr} (--admin-listen)"))?;
    let grpc = match grpc_listen {
        GrpcListen::At(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                anyhow::anyhow!("--grpc-listen {addr}: address in use; pass another address or off")
            } else {
                anyhow::Error::new(e).context(format!("cannot listen on {addr} (--grpc-listen)"))
            }
        })?),
        GrpcListen::Off => None,
    };
    let ratelimit_http = match ratelimit_http_listen {
        Listen::Off => RatelimitHttp::Off,
        Listen::At(addr) if addr == admin_addr => RatelimitHttp::OnAdmin,
        Listen::At(addr) if addr == decision_addr => RatelimitHttp::OnDecision,
        Listen::At(addr) => RatelimitHttp::Own(bind_ratelimit_http(addr).await?),
    };
    crate::app::run(
        crate::Listeners {
            decision,
            admin,
            grpc,
            ratelimit_http,
        },
        config,
        shutdown_signal(),
    )
    .await?;
    Ok(())
}

mod redis_flags;
pub use self::redis_flags::{FlagError, RedisSecurityFlags};
#[cfg(test)]
mod tests;
