//! The Redis settings sluice refuses, each naming the field at fault so the command line can
//! name its flag.

use std::time::Duration;

use redis::RedisError;

/// Largest accepted command timeout, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// Largest accepted bound on commands in flight (far below what a semaphore can hold).
pub const MAX_IN_FLIGHT: usize = 1_000_000;

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
    /// A URL carries a fragment such as `#insecure` (no certificate check at all).
    #[error("{url:?}: a URL fragment such as #insecure (no certificate check at all) is refused: give the CA with --redis-tls-ca-cert, or skip only the hostname check with --redis-tls-skip-hostname-verification")]
    InsecureUrl {
        /// The setting holding the URL.
        field: RedisField,
        /// The URL, with any password hidden.
        url: String,
    },
    /// A TLS file is missing, unreadable or not the PEM it should be.
    #[error("{path}: {reason}")]
    TlsFile {
        /// Which file.
        field: RedisField,
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A client certificate without its key, or a key without its certificate.
    #[error("{reason}")]
    TlsPair {
        /// The missing half.
        field: RedisField,
        /// What to do.
        reason: &'static str,
    },
    /// Hostname verification cannot be skipped with Sentinel: redis-rs checks the master's
    /// certificate against the address the sentinels announce, with no way to relax that alone.
    #[error("cannot skip hostname verification with Sentinel: redis-rs verifies that the master's certificate names the address the sentinels announce; give the master and sentinels certificates naming those addresses (IP addresses may be in the certificate)")]
    SentinelSkipHostname,
    /// The password file is missing, unreadable or empty.
    #[error("{path}: {reason}")]
    PasswordFile {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A true/false setting holds something else.
    #[error("{value:?} is not true or false")]
    NotABool {
        /// The setting.
        field: RedisField,
        /// The value given.
        value: String,
    },
    /// TLS files or the hostname check are given while TLS is switched off.
    #[error(
        "TLS is switched off (--redis-tls=false) but {what} is given: switch TLS on or remove it"
    )]
    TlsOff {
        /// The TLS setting given.
        what: &'static str,
    },
    /// Both --redis-password and --redis-sentinel-master-password name the master's password.
    #[error("the master's password is given twice (--redis-password and --redis-sentinel-master-password): give one")]
    TwoMasterPasswords,
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

/// The `RedisConfig` field a [`RedisConfigError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisField {
    /// `RedisConfig::target`, single node.
    Url,
    /// `RedisConfig::target`, Cluster.
    ClusterUrls,
    /// `RedisConfig::target`, Sentinel.
    Sentinel,
    /// `RedisConfig::timeout`.
    Timeout,
    /// `RedisConfig::max_in_flight`.
    MaxInFlight,
    /// `RedisConfig::key_prefix`.
    KeyPrefix,
    /// `RedisTls::ca`.
    TlsCaCert,
    /// The client certificate of `RedisTls::client`.
    TlsClientCert,
    /// The client key of `RedisTls::client`.
    TlsClientKey,
    /// `RedisTls::hostname`.
    TlsSkipHostname,
    /// `RedisSecurity::password`.
    Password,
    /// `RedisSecurity::password`, read from a file.
    PasswordFile,
    /// Whether TLS is forced (`RedisSecurity::tls`).
    Tls,
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
            RedisConfigError::InsecureUrl { field, .. }
            | RedisConfigError::TlsFile { field, .. }
            | RedisConfigError::TlsPair { field, .. } => *field,
            RedisConfigError::SentinelSkipHostname => RedisField::TlsSkipHostname,
            RedisConfigError::TwoMasterPasswords => RedisField::Password,
            RedisConfigError::PasswordFile { .. } => RedisField::PasswordFile,
            RedisConfigError::NotABool { field, .. } => *field,
            RedisConfigError::TlsOff { .. } => RedisField::Tls,
        }
    }
}

/// What the Redis client said, without its error-kind suffix (" - InvalidClientConfig").
pub(crate) fn reason(e: &RedisError) -> String {
    let text = e.to_string();
    match text.split_once(" - ") {
        Some((head, _)) if !head.is_empty() => head.to_owned(),
        _ => text,
    }
}
