//! What [`crate::run`] needs, independent of how it was given (flags, environment, tests).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::Rule;

use crate::store::redis::RedisConfig;
use crate::store::Store;

/// Which store backs the service.
#[derive(Clone)]
pub enum StoreChoice {
    /// In-process state: one replica only (the embedded default).
    Memory,
    /// Redis, single node or Cluster, shared by every replica.
    Redis(RedisConfig),
    /// A store built by the caller (tests that inspect the store, embedders).
    Custom(Arc<dyn Store>),
}

impl std::fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreChoice::Memory => f.write_str("Memory"),
            StoreChoice::Redis(c) => f.debug_tuple("Redis").field(&c.target).finish(),
            StoreChoice::Custom(s) => write!(f, "Custom({})", s.kind()),
        }
    }
}

/// Background cadences. The defaults meet the "within 1 s" promises; tests keep them.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// How often each replica asks the store for the rules version.
    pub rules_poll: Duration,
    /// How often the batched activity is written to the store (at most 250 ms by contract).
    pub activity_flush: Duration,
    /// How often a level snapshot is pushed to SSE listeners.
    pub levels_push: Duration,
}

impl Default for Intervals {
    fn default() -> Intervals {
        Intervals {
            rules_poll: Duration::from_millis(250),
            activity_flush: Duration::from_millis(200),
            levels_push: Duration::from_millis(500),
        }
    }
}

/// Everything [`crate::run`] needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The store.
    pub store: StoreChoice,
    /// Bound on one store call from an HTTP handler, as a backstop to the store's own timeout.
    pub store_deadline: Duration,
    /// The admin token (Bearer, or exchanged for a session cookie), the identity `admin`; empty
    /// when only named identities are given.
    pub admin_token: String,
    /// Named admin identities `(name, token)` (`--admin-tokens-file`): the audit trail says who.
    pub admin_identities: Vec<(String, String)>,
    /// Failed admin sign-ins one client address may make back to back before it is refused
    /// with 429 (refilled at one per [`crate::sign_ins::REFILL_EVERY`]).
    pub admin_sign_in_burst: u64,
    /// Rules imported into the store at start (from `--rules FILE`, see [`crate::rules_file`]),
    /// replacing same-named ones.
    pub import_rules: Vec<Rule>,
    /// Directory of the built dashboard (index.html and its assets), if any.
    pub dashboard_dir: Option<PathBuf>,
    /// Background cadences.
    pub intervals: Intervals,
    /// Bound on reading a request's head on both listeners (and its body after the head, and a
    /// keep-alive connection's idle time), so slow clients cannot hold connections forever.
    pub header_read_timeout: Duration,
    /// Memory store only: the most throttle keys held before the store evicts (`--max-keys`);
    /// `None` sizes it from this machine's memory
    /// ([`crate::store::memory::sizing::default_max_keys`]).
    pub max_keys: Option<NonZeroUsize>,
    /// `--ratelimit-config`: an envoyproxy/ratelimit configuration file or directory, served
    /// on the rate limit service and watched for changes ([`crate::ratelimit`]).
    pub ratelimit_config: Option<PathBuf>,
    /// `--ratelimit-merge-domains`: several files may hold one domain (the peer's
    /// `MERGE_DOMAIN_CONFIG`).
    pub ratelimit_merge_domains: bool,
    /// `--ratelimit-semantics`: whose answers the configuration's domains give
    /// ([`crate::ratelimit::semantics`]); the peer's by default.
    pub ratelimit_semantics: crate::ratelimit::semantics::Semantics,
    /// TLS of each listener (`--grpc-tls-*`, `--decision-tls-*`, `--admin-tls-*`); none by
    /// default ([`crate::tls`]).
    pub listener_tls: crate::tls::ListenersTls,
    /// The RLQS server's TTL, bucket bound and mapping (`--rlqs-*`, [`crate::rlqs::settings`]).
    pub rlqs: crate::rlqs::Settings,
}

impl Config {
    /// A config over `store` with `admin_token` and defaults for everything else.
    pub fn new(store: StoreChoice, admin_token: impl Into<String>) -> Config {
        Config {
            store,
            store_deadline: Duration::from_secs(1),
            admin_token: admin_token.into(),
            admin_identities: Vec::new(),
            admin_sign_in_burst: crate::sign_ins::BURST,
            import_rules: Vec::new(),
            dashboard_dir: None,
            intervals: Intervals::default(),
            header_read_timeout: crate::http::serve::DEFAULT_HEADER_READ_TIMEOUT,
            max_keys: None,
            ratelimit_config: None,
            ratelimit_merge_domains: false,
            ratelimit_semantics: crate::ratelimit::semantics::Semantics::PEER,
            listener_tls: crate::tls::ListenersTls::default(),
            rlqs: crate::rlqs::Settings::default(),
        }
    }
}

/// The gRPC listener's default address (`--grpc-listen`): on by default, because it serves the
/// sluice filter's default protocol.
pub const DEFAULT_GRPC_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        sluice_core::limits::DEFAULT_GRPC_PORT,
    ));

/// Where an optional listener listens (`--grpc-listen`, `--ratelimit-http-listen`): an address,
/// or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// Not served (`off`).
    Off,
    /// Served at this address.
    At(std::net::SocketAddr),
}

/// `--grpc-listen`'s value (`off`: filters on the default `grpc_stream` protocol and Envoy's rate
/// limit service get no answer from this process).
pub type GrpcListen = Listen;

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Off => f.write_str("off"),
            Listen::At(addr) => write!(f, "{addr}"),
        }
    }
}

/// A listener flag's value that is neither an address nor `off`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an address (HOST:PORT, e.g. 127.0.0.1:8082) or off")]
pub struct ListenError(String);

impl std::str::FromStr for Listen {
    type Err = ListenError;

    fn from_str(s: &str) -> Result<Listen, ListenError> {
        if s.trim().eq_ignore_ascii_case("off") {
            return Ok(Listen::Off);
        }
        s.trim()
            .parse()
            .map(Listen::At)
            .map_err(|_| ListenError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_listen_is_an_address_or_off() {
        assert_eq!("off".parse::<GrpcListen>().ok(), Some(GrpcListen::Off));
        assert_eq!("OFF".parse::<GrpcListen>().ok(), Some(GrpcListen::Off));
        assert_eq!(
            "127.0.0.1:9".parse::<GrpcListen>().ok(),
            Some(GrpcListen::At(std::net::SocketAddr::from((
                [127, 0, 0, 1],
                9
            ))))
        );
        assert_eq!(
            Listen::At(DEFAULT_GRPC_LISTEN).to_string(),
            "127.0.0.1:8082"
        );
        let e = "nope".parse::<GrpcListen>().err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("\"nope\" is not an address (HOST:PORT, e.g. 127.0.0.1:8082) or off")
        );
    }
}
