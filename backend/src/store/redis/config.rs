//! How to reach and use Redis: the one set of defaults (the command line shows these same
//! values), and the checks that refuse a setting that can never work when the configuration is
//! built, so it is reported as what it is and not, later, as an unreachable store.

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::{IntoConnectionInfo, RedisError};

/// Default bound on each Redis command, in milliseconds (`--redis-timeout-ms`): derived from
/// the filter's default wait ([`crate::deadline::DEFAULT_REDIS_TIMEOUT_MS`], 100 ms).
pub const DEFAULT_TIMEOUT_MS: u64 = crate::deadline::DEFAULT_REDIS_TIMEOUT_MS;
/// Largest accepted command timeout, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// Default bound on Redis commands in flight (`--max-in-flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
/// Largest accepted bound on commands in flight (far below what a semaphore can hold).
pub const MAX_IN_FLIGHT: usize = 1_000_000;
/// Default prefix of every key sluice writes (`--key-prefix`).
pub const DEFAULT_KEY_PREFIX: &str = "sluice";

/// Which Redis deployment to use. `Debug` hides the passwords in its URLs (the start log prints
/// the target).
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One node: `redis://host:port/db`.
    Single(String),
    /// A Redis Cluster, by one or more seed node URLs.
    Cluster(Vec<String>),
    /// A Sentinel-managed Redis: the master the sentinels name, followed across failovers.
    Sentinel(SentinelTarget),
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisTarget::Single(url) => f.debug_tuple("Single").field(&redact(url)).finish(),
            RedisTarget::Cluster(urls) => f
                .debug_tuple("Cluster")
                .field(&urls.iter().map(|u| redact(u)).collect::<Vec<_>>())
                .finish(),
            RedisTarget::Sentinel(target) => f.debug_tuple("Sentinel").field(target).finish(),
        }
    }
}

/// How to reach and use Redis. Check it with [`RedisConfig::validate`] when it is built;
/// [`super::RedisStore::connect`] checks it again, so a bad setting is never reported as an
/// unreachable store.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// The deployment.
    pub target: RedisTarget,
    /// Bound on each command, after which the request fails fast with a timeout.
    pub timeout: Duration,
    /// Bound on commands in flight; beyond it requests fail fast as overloaded instead of queueing.
    pub max_in_flight: usize,
    /// Prefix of every key sluice writes.
    pub key_prefix: String,
}

impl RedisConfig {
    /// A config for `target` with the defaults: [`DEFAULT_TIMEOUT_MS`],
    /// [`DEFAULT_MAX_IN_FLIGHT`], [`DEFAULT_KEY_PREFIX`] (the command line's defaults too).
    pub fn new(target: RedisTarget) -> RedisConfig {
        RedisConfig {
            target,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// Checks every setting without touching the network: the URLs parse as Redis URLs (and a
    /// Cluster's seed nodes form a valid cluster client), the timeout and in-flight bound are in
    /// range, and the key prefix cannot break Cluster hash tags. Returns the first problem.
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        check_key_prefix(&self.key_prefix)?;
        if !(1..=MAX_IN_FLIGHT).contains(&self.max_in_flight) {
            return Err(RedisConfigError::MaxInFlight {
                value: self.max_in_flight,
            });
        }
        let timeout_ms = self.timeout.as_millis();
        if !(1..=u128::from(MAX_TIMEOUT_MS)).contains(&timeout_ms) {
            return Err(RedisConfigError::Timeout {
                timeout: self.timeout,
            });
        }
        match &self.target {
            RedisTarget::Single(url) => {
                url.as_str()
                    .into_connection_info()
                    .map_err(|e| RedisConfigError::Url {
                        url: redact(url),
                        reason: reason(&e),
                    })?;
            }
            RedisTarget::Cluster(urls) => {
                if urls.is_empty() {
                    return Err(RedisConfigError::NoClusterUrls);
                }
                for (i, url) in urls.iter().enumerate() {
                    url.as_str().into_connection_info().map_err(|e| {
                        RedisConfigError::ClusterUrl {
                            index: i + 1,
                            url: redact(url),
                            reason: reason(&e),
                        }
                    })?;
                }
                ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .build()
                    .map_err(|e| RedisConfigError::Cluster { reason: reason(&e) })?;
            }
            RedisTarget::Sentinel(target) => target.validate()?,
        }
        Ok(())
    }
}

/// A Redis setting sluice refuses. Each names the field at fault ([`RedisConfigError::field`])
/// so the command line can name its flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisConfigError {
    /// The key prefix is empty, or holds a character that would break Cluster hash tags.
    #[error("key prefix {prefix:?} {reason}")]
    KeyPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The bound on commands in flight is 0 or too large.
    #[error("at most {value} commands in flight: must be between 1 and {MAX_IN_FLIGHT}")]
    MaxInFlight {
        /// The value given.
        value: usize,
    },
    /// The command timeout is under 1 ms or over [`MAX_TIMEOUT_MS`].
    #[error("a command timeout of {timeout:?}: must be between 1 and {MAX_TIMEOUT_MS} ms")]
    Timeout {
        /// The value given.
        timeout: Duration,
    },
    /// The single-node URL is not a Redis URL.
    #[error("{url:?} is not a usable Redis URL: {reason}")]
    Url {
        /// The URL, with any password hidden.
        url: String,
        /// What the Redis client said.
        reason: String,
    },
    /// A Redis Cluster was asked for with no seed node.
    #[error("a Redis Cluster needs at least one node URL")]
    NoClusterUrls,
    /// One Cluster seed node URL is not a Redis URL.
    #[error("node URL #{index} {url:?} is not a usable Redis URL: {reason}")]
    ClusterUrl {
        /// 1-based position in the list.
        index: usize,
        /// The URL, with any password hidden.
        url: String,
        /// What the Redis client said.
        reason: String,
    },
    /// The seed nodes parse one by one but do not make one cluster (e.g. different passwords).
    #[error("the node URLs do not make one cluster client: {reason}")]
    Cluster {
        /// What the Redis client said.
        reason: String,
    },
    /// The Sentinel setting does not have the shape `MASTER@HOST:PORT,HOST:PORT` (or
    /// `MASTER,HOST:PORT,HOST:PORT`).
    #[error("{spec:?} {reason}")]
    SentinelSpec {
        /// The setting as given, with any password hidden.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// One sentinel address is not usable.
    #[error("sentinel #{index} {url:?} is not a usable Redis URL: {reason}")]
    SentinelUrl {
        /// 1-based position in the list of sentinels.
        index: usize,
        /// The address as a URL, with any password hidden.
        url: String,
        /// What the Redis client said.
        reason: String,
    },
}

/// The [`RedisConfig`] field a [`RedisConfigError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisField {
    /// [`RedisConfig::target`], single node.
    Url,
    /// [`RedisConfig::target`], Cluster.
    ClusterUrls,
    /// [`RedisConfig::target`], Sentinel.
    Sentinel,
    /// [`RedisConfig::timeout`].
    Timeout,
    /// [`RedisConfig::max_in_flight`].
    MaxInFlight,
    /// [`RedisConfig::key_prefix`].
    KeyPrefix,
}

impl RedisConfigError {
    /// The field at fault.
    pub fn field(&self) -> RedisField {
        match self {
            RedisConfigError::KeyPrefix { .. } => RedisField::KeyPrefix,
            RedisConfigError::MaxInFlight { .. } => RedisField::MaxInFlight,
            RedisConfigError::Timeout { .. } => RedisField::Timeout,
            RedisConfigError::Url { .. } => RedisField::Url,
            RedisConfigError::NoClusterUrls
            | RedisConfigError::ClusterUrl { .. }
            | RedisConfigError::Cluster { .. } => RedisField::ClusterUrls,
            RedisConfigError::SentinelSpec { .. } | RedisConfigError::SentinelUrl { .. } => {
                RedisField::Sentinel
            }
        }
    }
}

/// A Sentinel-managed Redis: the name the sentinels know the master by, and the sentinels to ask
/// (as `redis://host:port` URLs; a URL's user and password are the sentinel's own). The master's
/// address is never configured: it is whatever the sentinels name now (see `sentinel.rs`).
/// `Debug` hides passwords (the start log prints the target).
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The master's name in the sentinels' configuration (`sentinel monitor <name> ...`).
    pub master: String,
    /// The sentinels, as Redis URLs.
    pub sentinels: Vec<String>,
    /// The master's (and replicas') `requirepass`, if any (`--redis-sentinel-master-password`);
    /// a sentinel's own password goes in its URL.
    pub master_password: Option<String>,
}

/// The port a sentinel listens on when an address names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

impl SentinelTarget {
    /// Parses `MASTER@ADDR,ADDR,...` or envoyproxy/ratelimit's `MASTER,ADDR,ADDR,...` (its
    /// `REDIS_URL` with `REDIS_TYPE=sentinel`, so a setting can be copied over). An `ADDR` is
    /// `host:port`, `host` (port 26379) or a `redis://[user:password@]host:port` URL when the
    /// sentinels require a password. The addresses are checked by [`SentinelTarget::validate`].
    pub fn parse(spec: &str) -> Result<SentinelTarget, RedisConfigError> {
        let refuse = |reason: &str| RedisConfigError::SentinelSpec {
            spec: redact_list(spec),
            reason: reason.to_owned(),
        };
        let mut items = spec.split(',').map(str::trim);
        let first = items.next().unwrap_or_default();
        let (master, mut addresses) = match first.split_once('@') {
            Some((name, address)) if !name.contains([':', '/']) => (name, vec![address]),
            _ if !first.contains([':', '/']) => (first, Vec::new()),
            _ => {
                return Err(refuse(
                    "does not start with the master's name: give MASTER@HOST:PORT,HOST:PORT \
                     (or MASTER,HOST:PORT,HOST:PORT), e.g. mymaster@10.0.0.1:26379,10.0.0.2:26379",
                ))
            }
        };
        if master.is_empty() {
            return Err(refuse("names no master: give MASTER@HOST:PORT,HOST:PORT"));
        }
        if master.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(refuse(
                "has a master name with spaces or control characters",
            ));
        }
        addresses.extend(items);
        if addresses.is_empty() {
            return Err(refuse(
                "names no sentinel: give MASTER@HOST:PORT,HOST:PORT (the sentinels, not the master)",
            ));
        }
        let mut sentinels = Vec::with_capacity(addresses.len());
        for (i, address) in addresses.into_iter().enumerate() {
            if address.is_empty() {
                return Err(refuse(&format!(
                    "has an empty sentinel address (#{})",
                    i + 1
                )));
            }
            sentinels.push(sentinel_url(address));
        }
        Ok(SentinelTarget {
            master: master.to_owned(),
            sentinels,
            master_password: None,
        })
    }

    /// Checks every sentinel URL and that they make one Sentinel client; no network traffic.
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        if self.master.is_empty() || self.sentinels.is_empty() {
            return Err(RedisConfigError::SentinelSpec {
                spec: format!("{}@{}", self.master, redact_list(&self.sentinels.join(","))),
                reason: "needs a master name and at least one sentinel".to_owned(),
            });
        }
        for (i, url) in self.sentinels.iter().enumerate() {
            url.as_str()
                .into_connection_info()
                .map_err(|e| RedisConfigError::SentinelUrl {
                    index: i + 1,
                    url: redact(url),
                    reason: reason(&e),
                })?;
        }
        redis::sentinel::SentinelClient::build(
            self.sentinels.iter().map(String::as_str).collect(),
            self.master.clone(),
            None,
            redis::sentinel::SentinelServerType::Master,
        )
        .map_err(|e| RedisConfigError::SentinelSpec {
            spec: format!("{}@{}", self.master, redact_list(&self.sentinels.join(","))),
            reason: format!("does not make a Sentinel client: {}", reason(&e)),
        })?;
        Ok(())
    }
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<String> = self.sentinels.iter().map(|u| redact(u)).collect();
        f.debug_struct("SentinelTarget")
            .field("master", &self.master)
            .field("sentinels", &shown)
            .field(
                "master_password",
                &self.master_password.as_ref().map(|_| "***"),
            )
            .finish()
    }
}

impl std::fmt::Display for SentinelTarget {
    /// `master mymaster via sentinels 10.0.0.1:26379, 10.0.0.2:26379` (passwords hidden).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<String> = self.sentinels.iter().map(|u| redact(u)).collect();
        write!(
            f,
            "master {} via sentinels {}",
            self.master,
            shown.join(", ")
        )
    }
}

/// A sentinel address as a URL: `host:port` and `host` become `redis://host:port`.
fn sentinel_url(address: &str) -> String {
    if address.contains("://") {
        return address.to_owned();
    }
    let has_port = match address.rsplit_once(':') {
        // "[::1]" alone has colons but no port.
        Some((host, port)) => {
            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !host.ends_with(':')
        }
        None => false,
    };
    if has_port && !(address.starts_with('[') && address.ends_with(']')) {
        format!("redis://{address}")
    } else {
        format!("redis://{address}:{DEFAULT_SENTINEL_PORT}")
    }
}

/// [`redact`] applied to each comma-separated item (and to `name@url` items).
fn redact_list(list: &str) -> String {
    list.split(',')
        .map(|item| match item.split_once('@') {
            Some((name, rest)) if rest.contains("://") => format!("{name}@{}", redact(rest)),
            _ => redact(item),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn check_key_prefix(prefix: &str) -> Result<(), RedisConfigError> {
    let refuse = |reason| {
        Err(RedisConfigError::KeyPrefix {
            prefix: prefix.to_owned(),
            reason,
        })
    };
    if prefix.is_empty() {
        return refuse("is empty: give a name for this deployment's keys (default \"sluice\")");
    }
    if prefix.contains(['{', '}']) {
        return refuse(
            "must not contain '{' or '}': they would move the Redis Cluster hash tag of every key",
        );
    }
    if prefix.chars().any(char::is_control) {
        return refuse("must not contain control characters");
    }
    Ok(())
}

/// What the Redis client said, without its error-kind suffix (" - InvalidClientConfig").
fn reason(e: &RedisError) -> String {
    let text = e.to_string();
    match text.split_once(" - ") {
        Some((head, _)) if !head.is_empty() => head.to_owned(),
        _ => text,
    }
}

/// The URL with the password of `scheme://user:password@host` replaced by `***`, so that a
/// refused URL can be shown in a log line.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let Some((user, _password)) = rest[..at].split_once(':') else {
        return url.to_owned();
    };
    format!("{scheme}://{user}:***@{}", &rest[at + 1..])
}

#[cfg(test)]
mod tests;
