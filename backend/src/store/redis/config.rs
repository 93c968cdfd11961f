//! How to reach and use Redis: the one set of defaults (the command line shows these same
//! values), and the checks that refuse a setting that can never work when the configuration is
//! built, so it is reported as what it is and not, later, as an unreachable store.

use std::time::Duration;

use redis::IntoConnectionInfo;

use super::security::{Credentials, HostnameCheck, RedisSecurity};
use super::topology;

use super::config_error::reason;
pub use super::config_error::{RedisConfigError, RedisField, MAX_IN_FLIGHT, MAX_TIMEOUT_MS};
use super::target::{redact, redact_list};
pub use super::target::{RedisTarget, SentinelTarget, DEFAULT_SENTINEL_PORT};

/// Default bound on each Redis command, in milliseconds (`--redis-timeout-ms`): derived from
/// the filter's default wait ([`crate::deadline::DEFAULT_REDIS_TIMEOUT_MS`], 100 ms).
pub const DEFAULT_TIMEOUT_MS: u64 = crate::deadline::DEFAULT_REDIS_TIMEOUT_MS;
/// Default bound on Redis commands in flight (`--max-in-flight`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
/// Default prefix of every key sluice writes (`--key-prefix`).
pub const DEFAULT_KEY_PREFIX: &str = "sluice";

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
    /// TLS and credentials for every node (`security.rs`).
    pub security: RedisSecurity,
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
            security: RedisSecurity::default(),
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
                check_fragment(url, RedisField::Url)?;
                self.security
                    .node(url, Credentials::Ours)
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
                    check_fragment(url, RedisField::ClusterUrls)?;
                    url.as_str().into_connection_info().map_err(|e| {
                        RedisConfigError::ClusterUrl {
                            index: i + 1,
                            url: redact(url),
                            reason: reason(&e),
                        }
                    })?;
                }
                topology::cluster_builder(urls, &self.security)
                    .and_then(|b| b.build())
                    .map_err(|e| RedisConfigError::Cluster { reason: reason(&e) })?;
            }
            RedisTarget::Sentinel(target) => {
                if self.security.hostname() == HostnameCheck::Skip {
                    return Err(RedisConfigError::SentinelSkipHostname);
                }
                if self.security.password.is_some() && target.master_password.is_some() {
                    return Err(RedisConfigError::TwoMasterPasswords);
                }
                for url in &target.sentinels {
                    check_fragment(url, RedisField::Sentinel)?;
                }
                target.validate_with(&self.security)?
            }
        }
        Ok(())
    }
}

/// Refuses a URL's `#insecure` fragment (redis-rs's switch for no certificate check at all):
/// give the CA instead, or skip only the hostname check.
fn check_fragment(url: &str, field: RedisField) -> Result<(), RedisConfigError> {
    if url.contains('#') {
        return Err(RedisConfigError::InsecureUrl {
            field,
            url: redact(url),
        });
    }
    Ok(())
}

/// The checks that build a Sentinel client (here, beside the other checks, because they need
/// the topology code).
impl SentinelTarget {
    /// Checks every sentinel URL and that they make one Sentinel client; no network traffic.
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        self.validate_with(&RedisSecurity::default())
    }

    /// [`SentinelTarget::validate`] with TLS and credentials applied as they will be.
    pub fn validate_with(&self, security: &RedisSecurity) -> Result<(), RedisConfigError> {
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
        topology::sentinel_client(self, security).map_err(|e| RedisConfigError::SentinelSpec {
            spec: format!("{}@{}", self.master, redact_list(&self.sentinels.join(","))),
            reason: format!("does not make a Sentinel client: {}", reason(&e)),
        })?;
        Ok(())
    }
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

#[cfg(test)]
mod tests;
