//! Which Redis deployment to use: one node, a Cluster, or the master a set of sentinels names;
//! the Sentinel setting's two spellings parsed, and passwords hidden wherever a target is shown.
//! Checked further (every URL, as the Redis client reads it) by `config.rs`.

use super::config_error::RedisConfigError;

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
pub(crate) fn redact_list(list: &str) -> String {
    list.split(',')
        .map(|item| match item.split_once('@') {
            Some((name, rest)) if rest.contains("://") => format!("{name}@{}", redact(rest)),
            _ => redact(item),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The URL with the password of `scheme://user:password@host` replaced by `***`, so that a
/// refused URL can be shown in a log line.
pub(crate) fn redact(url: &str) -> String {
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
