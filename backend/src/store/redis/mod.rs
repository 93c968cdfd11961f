//! The Redis store: single node or Cluster, shared by every backend replica.
//!
//! Every decision is ONE Lua script (backend/lua), a twin of sluice-core's transition, run
//! atomically inside Redis with time from Redis `TIME`, so replicas with skewed clocks agree.
//! Every command is bounded twice: by `timeout` (then [`StoreError::Timeout`]) and by
//! `max_in_flight` permits taken without waiting (none free: [`StoreError::Overloaded`] at once),
//! so a slow Redis sheds load instead of queueing it. See docs/storage.md for the key layout and
//! the precision reasoning of the scripts.

mod all;
mod changes;
mod commit;
mod commit_inflight;
mod config;
mod conn;
mod errors;
mod health;
mod history;
mod keys;
mod ready;
mod scripts;
mod sentinel;
mod sizing;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::try_join_all;
use redis::RedisResult;
use sluice_core::cell::CellArgs;
use sluice_core::wire::StoreHealth;
use sluice_core::{Action, Decision, Lease, Leased, Nanos, Params, Rule};
use tokio::sync::Semaphore;

use self::conn::Conn;
use self::errors::Call;
use self::health::Health;
use self::keys::KeyLayout;
use self::scripts::{algorithm_args, leased, Scripts};
use super::{Activity, ActivityStore, DecisionStore, RuleSnapshot, RuleStore, Store, StoreError};

pub use self::config::{
    RedisConfig, RedisConfigError, RedisField, RedisTarget, SentinelTarget, DEFAULT_KEY_PREFIX,
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_SENTINEL_PORT, DEFAULT_TIMEOUT_MS, MAX_IN_FLIGHT,
    MAX_TIMEOUT_MS,
};
pub use self::health::HEALTH_INTERVAL;
pub use self::keys::MAX_RAW_SUBJECT;
pub use self::sentinel::RETRY_EVERY as SENTINEL_RETRY_EVERY;
pub use self::sizing::RECOMMENDED_POLICY;

/// Keys of recent activity kept per action.
pub const ACTIVITY_KEEP: usize = 200;
/// The field of the rules hash that holds the rules version. Kept inside the hash (not in a key
/// of its own) so that losing the hash, by a stray `DEL` or eviction, loses the version too: the
/// replicas then see no version and publish their cached rules again. No action can be named so
/// (actions are `[A-Za-z0-9_.:-]`).
pub const VERSION_FIELD: &str = "#version";
/// Activity of an action vanishes after this long without traffic. Activity keys carry a TTL like
/// throttle state, so a `volatile-*` policy may evict them (the dashboard's recent keys of that
/// action start over; decisions are unaffected); there is one pair per action, each bounded to
/// [`ACTIVITY_KEEP`] keys, so a key spray cannot grow them.
pub const ACTIVITY_TTL_MS: u64 = 24 * 60 * 60 * 1000;
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
    cluster: bool,
    keys: KeyLayout,
    scripts: Scripts,
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    timeout: Duration,
    /// Redis's memory settings and evictions, read in the background (see `health.rs`).
    health: Health,
    /// History and top-denied keys and scripts (see `history.rs`).
    history: history::HistoryKeys,
}

impl RedisStore {
    /// Checks the configuration ([`RedisConfig::validate`]: a bad setting is
    /// [`ConnectError::Config`], before any network traffic), then connects eagerly (a Redis that
    /// cannot be reached is [`StoreError::Unavailable`] here). Then reads Redis's memory settings
    /// once (logging a WARN for a setting that lets a key spray switch limiting off; a refused
    /// reading is a warning, never a failure) and starts the task that reads them again every
    /// [`HEALTH_INTERVAL`] while the store lives. Scripts are sent to Redis on first use.
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, ConnectError> {
        config.validate()?;
        let connect_bound = config.timeout.max(Duration::from_secs(5));
        let conn =
            match tokio::time::timeout(connect_bound, Conn::open(&config.target, config.timeout))
                .await
            {
                Ok(Ok(conn)) => conn,
                Ok(Err(e)) => {
                    return Err(
                        StoreError::Unavailable(format!("cannot connect to Redis: {e}")).into(),
                    )
                }
                Err(_) => return Err(StoreError::Timeout(duration_ms(connect_bound)).into()),
            };
        let cluster = matches!(config.target, RedisTarget::Cluster(_));
        let health = Health::start(
            conn.clone(),
            store_kind(cluster),
            config.timeout.max(HEALTH_READ_MIN),
            HEALTH_INTERVAL,
        )
        .await;
        Ok(RedisStore {
            conn,
            cluster,
            keys: KeyLayout::new(&config.key_prefix),
            history: history::HistoryKeys::new(&config.key_prefix),
            scripts: Scripts::new(),
            permits: Arc::new(Semaphore::new(config.max_in_flight)),
            max_in_flight: config.max_in_flight,
            timeout: config.timeout,
            health,
        })
    }

    /// Reads Redis's memory settings and eviction count now (instead of waiting for the next
    /// periodic reading) and returns the new [`Store::health`]. For tests and operators' tools;
    /// the background task does this every [`HEALTH_INTERVAL`] anyway.
    pub async fn refresh_health(&self) -> StoreHealth {
        self.health.refresh().await
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

    /// Runs an algorithm script on one key (with `lease`, the script also debits the grant in
    /// the same call).
    async fn decide(
        &self,
        key: &str,
        params: Params,
        quantity: u64,
        lease: Option<Lease>,
        at: Option<Nanos>,
    ) -> Result<Leased, StoreError> {
        let reply = self
            .bounded(
                key,
                Call::Script(params.algorithm().name()),
                self.invoke_algorithm(key, params, quantity, lease, at),
            )
            .await?;
        leased(params, lease, &reply)
    }

    async fn invoke_algorithm(
        &self,
        key: &str,
        params: Params,
        quantity: u64,
        lease: Option<Lease>,
        at: Option<Nanos>,
    ) -> RedisResult<Vec<i64>> {
        let mut conn = self.conn.clone();
        let script = self.scripts.algorithm(params.algorithm());
        let mut invocation = script.key(key);
        for arg in algorithm_args(params, quantity, lease, at) {
            invocation.arg(arg);
        }
        invocation.invoke_async(&mut conn).await
    }
}

fn store_kind(cluster: bool) -> &'static str {
    if cluster {
        "redis-cluster"
    } else {
        "redis"
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl DecisionStore for RedisStore {
    async fn throttle_leased(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        lease: Option<Lease>,
        at: Option<Nanos>,
    ) -> Result<Leased, StoreError> {
        let redis_key = self.keys.state(rule.action(), rule.algorithm(), key);
        self.decide(&redis_key, rule.params(), quantity, lease, at)
            .await
    }
    async fn throttle_all(
        &self,
        checks: &[super::CheckRequest<'_>],
        at: Option<Nanos>,
    ) -> Result<super::AllOutcome, StoreError> {
        self.throttle_all_checks(checks, at).await
    }
    async fn cell_throttle(
        &self,
        key: &str,
        args: CellArgs,
        at: Option<Nanos>,
    ) -> Result<Decision, StoreError> {
        let redis_key = self.keys.cell(key);
        self.decide(
            &redis_key,
            Params::Gcra(args.params),
            args.quantity,
            None,
            at,
        )
        .await
        .map(|l| l.decision)
    }
    async fn peek_many(
        &self,
        rule: &Rule,
        keys: &[String],
        at: Option<Nanos>,
    ) -> Result<Vec<Decision>, StoreError> {
        let params = rule.params();
        let redis_keys: Vec<String> = keys
            .iter()
            .map(|k| self.keys.state(rule.action(), rule.algorithm(), k))
            .collect();
        let first = redis_keys.first().cloned().unwrap_or_default();
        // One permit and one timeout for the batch; the calls are pipelined on the multiplexed
        // connection (and spread over nodes on a Cluster).
        let replies = self
            .bounded(
                &first,
                Call::Script(params.algorithm().name()),
                try_join_all(
                    redis_keys
                        .iter()
                        .map(|k| self.invoke_algorithm(k, params, 0, None, at)),
                ),
            )
            .await?;
        replies
            .iter()
            .map(|reply| leased(params, None, reply).map(|l| l.decision))
            .collect()
    }
    async fn commit(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        commit: sluice_core::commit::Commit,
        at: Option<Nanos>,
    ) -> Result<super::CommitOutcome, StoreError> {
        self.commit_reservation(rule, key, id, commit, at).await
    }
    async fn hold(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
        at: Option<Nanos>,
    ) -> Result<bool, StoreError> {
        self.hold_reservation(rule, key, id, units, at).await
    }
    async fn budget(
        &self,
        rule: &Rule,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<sluice_core::wire::KeyBudget, StoreError> {
        self.read_budget(rule, key, at).await
    }
    async fn reset_key(
        &self,
        action: &Action,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<Vec<sluice_core::Algorithm>, StoreError> {
        self.state_reset(action, key, at).await
    }
}

#[async_trait]
impl RuleStore for RedisStore {
    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError> {
        let [hash, legacy_version_key] = self.keys.rules();
        let mut conn = self.conn.clone();
        let (version, flat, flat_overrides): (Option<String>, Vec<String>, Vec<String>) = self
            .bounded(
                &hash,
                Call::Script("rules_load"),
                self.scripts
                    .rules_load
                    .key(&hash)
                    .key(&legacy_version_key)
                    .invoke_async(&mut conn),
            )
            .await?;
        let version = version.map(|v| parse_version(&v, &hash)).transpose()?;
        let mut rules = BTreeMap::new();
        for pair in flat.chunks(2) {
            let [action, json] = pair else {
                return Err(StoreError::Corrupt(format!("{hash}: odd HGETALL reply")));
            };
            if action == VERSION_FIELD {
                continue;
            }
            let rule = Rule::from_json_str(json)
                .map_err(|e| StoreError::Corrupt(format!("rule {action:?} in {hash}: {e}")))?;
            rules.insert(action.clone(), rule);
        }
        Ok(RuleSnapshot {
            version,
            rules: rules.into_values().collect(),
            overrides: changes::parse_overrides(&flat_overrides, &hash)?,
        })
    }
    async fn put_rule(&self, rule: &Rule) -> Result<u64, StoreError> {
        let [hash, _] = self.keys.rules();
        let json = rule.to_json().to_string();
        let mut conn = self.conn.clone();
        let mut invocation = self.scripts.rules_write.key(&hash);
        invocation.arg("put").arg(rule.action().as_str()).arg(json);
        self.bounded(
            &hash,
            Call::Script("rules_write"),
            invocation.invoke_async(&mut conn),
        )
        .await
    }
    async fn delete_rule(&self, action: &Action) -> Result<Option<u64>, StoreError> {
        // The same script as the admin API's deletes (its overrides go too), with no audit.
        match self
            .rules_change(&super::RuleChange::DeleteRule(action.clone()), None)
            .await?
        {
            super::ChangeOutcome::Done { version, .. } => Ok(Some(version)),
            _ => Ok(None),
        }
    }
    async fn change_rules(
        &self,
        change: &super::RuleChange,
        audit: Option<&super::AuditStamp>,
    ) -> Result<super::ChangeOutcome, StoreError> {
        self.rules_change(change, audit).await
    }
    async fn record_audit(&self, entry: &sluice_core::wire::AuditEntry) -> Result<(), StoreError> {
        self.audit_record(entry).await
    }
    async fn read_audit(
        &self,
        limit: usize,
    ) -> Result<Vec<sluice_core::wire::AuditEntry>, StoreError> {
        self.audit_read(limit).await
    }
    async fn rules_version(&self) -> Result<Option<u64>, StoreError> {
        let [hash, _] = self.keys.rules();
        let mut conn = self.conn.clone();
        let version: Option<String> = self
            .bounded(
                &hash,
                Call::Command,
                redis::cmd("HGET")
                    .arg(&hash)
                    .arg(VERSION_FIELD)
                    .query_async(&mut conn),
            )
            .await?;
        version.map(|v| parse_version(&v, &hash)).transpose()
    }
}

#[async_trait]
impl ActivityStore for RedisStore {
    async fn record_activity(&self, batch: &[Activity]) -> Result<(), StoreError> {
        let mut by_action: BTreeMap<&Action, Vec<&Activity>> = BTreeMap::new();
        for item in batch {
            by_action.entry(&item.action).or_default().push(item);
        }
        let calls = by_action.into_iter().map(|(action, items)| {
            let [recent, counts] = self.keys.activity(action);
            let mut conn = self.conn.clone();
            async move {
                let mut invocation = self.scripts.activity_record.key(&recent);
                invocation
                    .key(&counts)
                    .arg(ACTIVITY_KEEP)
                    .arg(ACTIVITY_TTL_MS);
                for item in items {
                    invocation
                        .arg(&item.key)
                        .arg(item.last_seen_ms)
                        .arg(item.allowed)
                        .arg(item.denied);
                }
                invocation.invoke_async::<i64>(&mut conn).await
            }
        });
        self.bounded(
            "activity",
            Call::Script("activity_record"),
            try_join_all(calls),
        )
        .await
        .map(|_| ())
    }
    async fn recent_activity(
        &self,
        action: &Action,
        limit: usize,
    ) -> Result<Vec<Activity>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let [recent, counts] = self.keys.activity(action);
        let mut conn = self.conn.clone();
        let flat: Vec<String> = self
            .bounded(
                &recent,
                Call::Script("activity_recent"),
                self.scripts
                    .activity_recent
                    .key(&recent)
                    .key(&counts)
                    .arg(limit)
                    .invoke_async(&mut conn),
            )
            .await?;
        flat.chunks(4)
            .map(|row| {
                let [key, last, allowed, denied] = row else {
                    return Err(StoreError::Corrupt(format!("{recent}: short activity row")));
                };
                let last_seen_ms = last
                    .parse::<f64>()
                    .map_err(|_| StoreError::Corrupt(format!("{recent}: score {last:?}")))?;
                Ok(Activity {
                    action: action.clone(),
                    key: key.clone(),
                    last_seen_ms: last_seen_ms as u64,
                    allowed: parse_u64(allowed, &counts)?,
                    denied: parse_u64(denied, &counts)?,
                })
            })
            .collect()
    }
    async fn record_history(
        &self,
        batch: &[crate::history::HistoryRecord],
    ) -> Result<(), StoreError> {
        self.history_record(batch).await
    }
    async fn apply_report(
        &self,
        mark: &crate::history::ReportMark,
        record: &crate::history::HistoryRecord,
    ) -> Result<crate::history::marks::ReportApplied, StoreError> {
        self.history_apply_report(mark, record).await
    }
    async fn key_denied(
        &self,
        action: &Action,
        key: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, u64)>, StoreError> {
        self.denied_key(action, key, now_ms).await
    }
    async fn read_history(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> Result<crate::history::StoredHistory, StoreError> {
        self.history_read(action, first_step_ms, steps, now_ms)
            .await
    }
    async fn record_denied(
        &self,
        batch: &[crate::history::DeniedRecord],
    ) -> Result<(), StoreError> {
        self.denied_record(batch).await
    }
    async fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        self.denied_top(action, now_ms, limit).await
    }
    async fn key_last_seen(&self, action: &Action, key: &str) -> Result<Option<u64>, StoreError> {
        self.key_seen(action, key).await
    }
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        store_kind(self.cluster)
    }
    /// On a Cluster, every slot range's master must answer (see `ready.rs`: a plain PING through
    /// the cluster client skips a master it lost); elsewhere, a PING to the one node.
    async fn ping(&self) -> Result<(), StoreError> {
        if let Conn::Cluster(cluster, ready) = &self.conn {
            return ready.check(cluster, self.timeout).await;
        }
        let mut conn = self.conn.clone();
        let _: String = self
            .bounded(
                "PING",
                Call::Command,
                redis::cmd("PING").query_async(&mut conn),
            )
            .await?;
        Ok(())
    }
    /// The last reading of Redis's memory settings (no round trip: see [`RedisStore::refresh_health`]).
    fn health(&self) -> StoreHealth {
        self.health.get()
    }

    /// With Sentinel, the master the sentinels name now (no round trip).
    fn master(&self) -> Option<String> {
        self.conn
            .sentinel_master()
            .map(|(name, address)| format!("{name} at {address}"))
    }
}

/// Parses the rules version held in the field [`VERSION_FIELD`] of the rules hash `hash`.
fn parse_version(text: &str, hash: &str) -> Result<u64, StoreError> {
    text.parse().map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        StoreError::Corrupt(format!("the rules version (field {VERSION_FIELD} of {hash}) holds {shown:?}, not a whole number"))
    })
}

fn parse_u64(text: &str, key: &str) -> Result<u64, StoreError> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("{key} holds {text:?}, not a whole number")))
}
