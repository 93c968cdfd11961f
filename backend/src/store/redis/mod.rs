//! The Redis store: single node, Sentinel or Cluster, shared by every backend replica.
//!
//! Every decision is ONE Lua script (backend/lua), a twin of sluice-core's transition, run
//! atomically inside Redis with time from Redis `TIME`, so replicas with skewed clocks agree.
//! Every command is bounded twice: by `timeout` (then [`StoreError::Timeout`]) and by
//! `max_in_flight` permits taken without waiting (none free: [`StoreError::Overloaded`] at once),
//! so a slow Redis sheds load instead of queueing it. See docs/storage.md for the key layout and
//! the precision reasoning of the scripts.
//!
//! One file per concern: `decision.rs` (and `all.rs`), `budget.rs`, `reset.rs`, `rules.rs`,
//! `activity.rs`, `history.rs`, `health.rs`, `rlqs.rs`; the deployments in `topology/` (single node here,
//! `cluster.rs`, `sentinel.rs`); TLS and credentials in `security.rs`; key names in `keys.rs`,
//! error mapping in `errors.rs`.

mod activity;
mod all;
mod budget;
mod config;
mod config_error;
mod decision;
mod errors;
mod health;
mod history;
mod keys;
mod preload;
mod reset;
mod rlqs;
mod rules;
mod scripts;
mod security;
mod sizing;
mod target;
mod topology;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};
use sluice_core::wire::StoreHealth;
use sluice_core::Nanos;
use tokio::sync::Semaphore;

use self::errors::Call;
use self::health::state::Health;
use self::keys::KeyLayout;
use self::scripts::Scripts;
use self::topology::Conn;
use super::{Clock, StoreError};

pub use self::config::{
    RedisConfig, RedisConfigError, RedisField, RedisTarget, SentinelTarget, DEFAULT_KEY_PREFIX,
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_SENTINEL_PORT, DEFAULT_TIMEOUT_MS, MAX_IN_FLIGHT,
    MAX_TIMEOUT_MS,
};
pub use self::health::state::HEALTH_INTERVAL;
pub use self::keys::ACTIVITY_TTL_MS;
pub use self::keys::MAX_RAW_SUBJECT;
pub use self::keys::VERSION_FIELD;
pub use self::security::{
    is_tls_url, ClientIdentity, HostnameCheck, PemFile, RedisSecurity, RedisTls, TlsFiles,
};
pub use self::sizing::RECOMMENDED_POLICY;
pub use self::topology::SENTINEL_RETRY_EVERY;
pub use super::ACTIVITY_KEEP;

/// Least time allowed for one reading of Redis's memory settings (the command timeout, when
/// longer, bounds it instead): it runs in the background, where a slow answer costs nothing.
const HEALTH_READ_MIN: Duration = Duration::from_secs(1);

/// Why [`RedisStore::connect`] failed: a setting that can never work (fix the configuration), or
/// a Redis that cannot be reached now (fix or wait for Redis).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A setting is refused; nothing was sent to Redis.
    #[error("invalid Redis configuration: {0}")]
    Config(#[from] RedisConfigError),
    /// Redis could not be reached or did not answer in time.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Throttle state, rules and activity in Redis.
pub struct RedisStore {
    conn: Conn,
    keys: KeyLayout,
    scripts: Scripts,
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    timeout: Duration,
    /// Redis's memory settings and evictions, read in the background (see `health.rs`).
    health: Health,
    /// History and top-denied keys and scripts (see `history.rs`).
    history: history::keys::HistoryKeys,
    /// The time decisions are made at: `None`, Redis `TIME` read by each script (production);
    /// a clock for tests that hold the store to fixed times ([`RedisStore::with_clock`]).
    clock: Option<Arc<dyn Clock>>,
}

impl RedisStore {
    /// Checks the configuration ([`RedisConfig::validate`]: a bad setting is
    /// [`ConnectError::Config`], before any network traffic), then connects eagerly (a Redis that
    /// cannot be reached is [`StoreError::Unavailable`] here). Then reads Redis's memory settings
    /// once (logging a WARN for a setting that lets a key spray switch limiting off; a refused
    /// reading is a warning, never a failure) and starts the task that reads them again every
    /// [`HEALTH_INTERVAL`] while the store lives. The decision scripts are loaded on every node
    /// (`preload.rs`); the others on first use.
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, ConnectError> {
        config.validate()?;
        let connect_bound = config.timeout.max(Duration::from_secs(5));
        let conn = match tokio::time::timeout(
            connect_bound,
            Conn::open(&config.target, &config.security, config.timeout),
        )
        .await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                let hint = match security::explain(&e) {
                    Some(hint) => Some(hint.to_owned()),
                    None => config.plaintext_hint().await,
                };
                let hint = hint.map(|h| format!(" ({h})")).unwrap_or_default();
                return Err(
                    StoreError::Unavailable(format!("cannot connect to Redis: {e}{hint}")).into(),
                );
            }
            Err(_) => {
                return Err(match config.plaintext_hint().await {
                    Some(hint) => StoreError::Unavailable(format!(
                        "cannot connect to Redis: no answer within {} ms ({hint})",
                        duration_ms(connect_bound)
                    )),
                    None => StoreError::Timeout(duration_ms(connect_bound)),
                }
                .into())
            }
        };
        let health = Health::start(
            conn.clone(),
            conn.kind(),
            config.timeout.max(HEALTH_READ_MIN),
            HEALTH_INTERVAL,
        )
        .await;
        let scripts = Scripts::new();
        preload::preload(&conn, &scripts, connect_bound).await;
        Ok(RedisStore {
            conn,
            keys: KeyLayout::new(&config.key_prefix),
            history: history::keys::HistoryKeys::new(&config.key_prefix),
            scripts,
            permits: Arc::new(Semaphore::new(config.max_in_flight)),
            max_in_flight: config.max_in_flight,
            timeout: config.timeout,
            health,
            clock: None,
        })
    }

    /// This store passing the time `clock` reads to its scripts instead of letting them read
    /// Redis `TIME`: for tests that hold it to fixed times ([`crate::store::ManualClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> RedisStore {
        self.clock = Some(clock);
        self
    }

    /// Reads Redis's memory settings and eviction count now (instead of waiting for the next
    /// periodic reading) and returns the new [`crate::store::HealthStore::health`]. For tests and
    /// operators' tools; the background task does this every [`HEALTH_INTERVAL`] anyway.
    pub async fn refresh_health(&self) -> StoreHealth {
        self.health.refresh().await
    }

    /// The time to pass to a script: `None` (the script reads Redis `TIME`) unless the store was
    /// given a clock.
    fn at(&self) -> Option<Nanos> {
        self.clock.as_ref().map(|clock| clock.now())
    }

    /// Runs one script invocation on its own handle of the connection, bounded
    /// ([`Self::bounded`]): `key` names the key in a WRONGTYPE error, `name` the script.
    async fn script<T>(
        &self,
        key: &str,
        name: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError>
    where
        T: FromRedisValue + Send,
    {
        let mut conn = self.conn.clone();
        self.bounded(key, Call::Script(name), invocation.invoke_async(&mut conn))
            .await
    }

    /// Runs one plain command (PING, HGET) on its own handle of the connection, bounded
    /// ([`Self::bounded`]): `key` names the key in a WRONGTYPE error.
    async fn command<T>(&self, key: &str, cmd: &Cmd) -> Result<T, StoreError>
    where
        T: FromRedisValue + Send,
    {
        let mut conn = self.conn.clone();
        self.bounded(key, Call::Command, cmd.query_async(&mut conn))
            .await
    }

    /// Runs a batch of script calls (one a record) together under one bound
    /// ([`Self::bounded`]); their replies are not needed. `key` names the batch in a WRONGTYPE
    /// error, `name` the script.
    async fn batch<I, F, T>(
        &self,
        key: &str,
        name: &'static str,
        calls: I,
    ) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = F>,
        F: Future<Output = RedisResult<T>>,
    {
        self.bounded(key, Call::Script(name), try_join_all(calls))
            .await
            .map(|_| ())
    }

    /// Runs one bounded unit of work: a permit taken without waiting, then the timeout. `key`
    /// names the key in a WRONGTYPE error, `call` the script in a script error.
    async fn bounded<T, F>(&self, key: &str, call: Call, work: F) -> Result<T, StoreError>
    where
        F: Future<Output = RedisResult<T>>,
    {
        let _permit = self
            .permits
            .try_acquire()
            .map_err(|_| StoreError::Overloaded(self.max_in_flight))?;
        match tokio::time::timeout(self.timeout, work).await {
            Err(_) => Err(StoreError::Timeout(duration_ms(self.timeout))),
            Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout(duration_ms(self.timeout))),
            Ok(Err(e)) => Err(errors::map(&e, key, call)),
            Ok(Ok(value)) => Ok(value),
        }
    }
}

impl RedisConfig {
    /// After a failed connection: which TLS address answers plaintext Redis, if any
    /// ([`security::plaintext_hint`], each probe bounded by the command timeout, kept between
    /// 250 ms and 1 s: a plaintext Redis answers `PING` at once, but a loaded host may not).
    async fn plaintext_hint(&self) -> Option<String> {
        let bound = self
            .timeout
            .clamp(Duration::from_millis(250), Duration::from_secs(1));
        security::plaintext_hint(&self.target, &self.security, bound).await
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
