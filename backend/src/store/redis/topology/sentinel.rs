//! A Sentinel-managed Redis: one connection to the master the sentinels name, followed across
//! failovers.
//!
//! The store itself is the single-node store (same scripts, same keys, same errors): only where
//! the commands go changes. At connect the sentinels are asked for the master (redis-rs checks
//! that the node it names answers `ROLE` as a master) and one multiplexed connection is opened to
//! it. A command that fails because that node is gone (an I/O error, a refused or dropped
//! connection) or is no longer a master (`READONLY`: it was demoted) makes a background task ask
//! the sentinels again, every [`RETRY_EVERY`], until they name a master that accepts a
//! connection; the failed command itself is not retried (a script whose answer was lost may have
//! run, and running it twice would debit twice), so it answers `Unavailable` and the next one goes
//! to the new master. A command that does not answer in time makes the task check the sentinels
//! once, without dropping a connection they still vouch for. The task runs apart from the
//! requests, so a request's timeout never cancels a failover half-way.
//!
//! A master can also be replaced while it stays up (`SENTINEL FAILOVER`, a partition that heals):
//! until the sentinels reconfigure it as a replica it still accepts writes, and decisions made
//! there are lost to the new master. So the sentinels are also asked every [`CHECK_EVERY`] while
//! the store lives, which bounds that window to about a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{
    SentinelClient, SentinelClientBuilder, SentinelNodeConnectionInfo, SentinelServerType,
};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline,
    RedisConnectionInfo, RedisError, RedisFuture, RedisResult, ServerErrorKind, TlsMode, Value,
};
use tokio::sync::{watch, Mutex};

use super::super::security::{Credentials, RedisSecurity};
use super::super::target::SentinelTarget;

/// Pause between two questions to the sentinels while no usable master is found.
pub const RETRY_EVERY: Duration = Duration::from_millis(100);
/// How often the sentinels are asked whether they still name the master in use.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Least time a lookup of the master may take (the command timeout, when longer, bounds it
/// instead): asking up to three sentinels and checking the master's `ROLE` is several round trips.
const LOOKUP_MIN: Duration = Duration::from_secs(1);

/// A cheap, cloneable handle on the current master's connection.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<Shared>,
}

struct Shared {
    /// The master's name, for logs.
    name: String,
    /// Asks the sentinels (and caches its connections to them); one lookup at a time.
    sentinels: Mutex<SentinelClient>,
    /// The master in use; replaced (never mutated) when the sentinels name another.
    current: watch::Sender<Master>,
    /// Whether a lookup task is running (at most one at a time).
    looking: AtomicBool,
    /// Whether the connection in use was seen broken (cleared by a switch), so that a running
    /// lookup started for a slow answer escalates instead of keeping a dead connection.
    broken: AtomicBool,
    /// Bound on connecting to the master and on each of its answers.
    timeout: Duration,
}

#[derive(Clone)]
struct Master {
    conn: MultiplexedConnection,
    /// `host:port`, as the sentinels named it.
    address: String,
    /// Bumped on every switch, so that a failure seen on an older connection starts no lookup.
    generation: u64,
}

/// Why a lookup was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trouble {
    /// The connection failed or the node is not a master: reconnect even to the same address.
    Broken,
    /// A command did not answer in time: switch only if the sentinels name another master.
    Slow,
}

impl SentinelConn {
    /// Asks the sentinels for the master and connects to it (logging which master they named).
    /// Fails when no sentinel answers, none knows the master, or the master cannot be reached.
    pub(crate) async fn open(
        target: &SentinelTarget,
        security: &RedisSecurity,
        timeout: Duration,
    ) -> RedisResult<Self> {
        let mut sentinels = sentinel_client(target, security)?;
        let (conn, address) = connect(&mut sentinels, timeout).await?;
        tracing::info!(
            "Redis Sentinel: the sentinels name {address} as master {:?} ({target})",
            target.master
        );
        let (current, _) = watch::channel(Master {
            conn,
            address,
            generation: 0,
        });
        let shared = Arc::new(Shared {
            name: target.master.clone(),
            sentinels: Mutex::new(sentinels),
            current,
            looking: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            timeout,
        });
        tokio::spawn(check_periodically(Arc::downgrade(&shared)));
        Ok(SentinelConn { shared })
    }

    /// The master's name and the address of the node in use (`host:port`).
    pub(crate) fn master(&self) -> (String, String) {
        (
            self.shared.name.clone(),
            self.shared.current.borrow().address.clone(),
        )
    }

    /// Runs `send` on the current master's connection; on a failure that says the master is gone
    /// or demoted, or on no answer at all (the future dropped by the caller's timeout), starts a
    /// lookup in the background.
    async fn send<'a, T, F>(&'a self, send: F) -> RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> RedisFuture<'a, T>,
    {
        let (conn, generation) = {
            let master = self.shared.current.borrow();
            (master.conn.clone(), master.generation)
        };
        let mut pending = Pending {
            shared: Some(&self.shared),
            generation,
        };
        let result = send(conn).await;
        pending.shared = None;
        if let Err(e) = &result {
            if let Some(trouble) = trouble(e) {
                look_up(&self.shared, generation, trouble);
            }
        }
        result
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.send(|mut conn| Box::pin(async move { conn.req_packed_command(cmd).await }))
                .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.send(|mut conn| {
                Box::pin(async move { conn.req_packed_commands(pipeline, offset, count).await })
            })
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.current.borrow().conn.get_db()
    }
}

/// Notices a command dropped before its answer (the store's timeout gave up on it).
struct Pending<'a> {
    shared: Option<&'a Arc<Shared>>,
    generation: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared {
            look_up(shared, self.generation, Trouble::Slow);
        }
    }
}

/// Whether an error means the node in use may no longer be the master.
fn trouble(e: &RedisError) -> Option<Trouble> {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        return Some(Trouble::Broken);
    }
    match e.kind() {
        ErrorKind::Server(ServerErrorKind::ReadOnly) => Some(Trouble::Broken),
        _ if e.is_timeout() => Some(Trouble::Slow),
        _ => None,
    }
}

/// The client that asks the sentinels for the master and connects to it. Without TLS each
/// sentinel keeps its own URL's credentials. With TLS (a `rediss://` sentinel, or TLS forced by
/// `security`) both the sentinels and the master are reached over TLS with `security`'s
/// certificates; redis-rs then takes one user and password for all sentinels, so their URLs must
/// agree. The master's credentials are `security`'s user and password (or the target's
/// `master_password`).
pub(crate) fn sentinel_client(
    target: &SentinelTarget,
    security: &RedisSecurity,
) -> RedisResult<SentinelClient> {
    let sentinels = target
        .sentinels
        .iter()
        .map(|url| security.node(url, Credentials::Url))
        .collect::<RedisResult<Vec<ConnectionInfo>>>()?;
    let mut master = RedisConnectionInfo::default();
    if let Some(user) = &security.user {
        master = master.set_username(user);
    }
    if let Some(password) = target
        .master_password
        .as_ref()
        .or(security.password.as_ref())
    {
        master = master.set_password(password);
    }
    let tls = sentinels
        .iter()
        .any(|s| matches!(s.addr(), ConnectionAddr::TcpTls { .. }));
    if !tls {
        return SentinelClient::build(
            sentinels,
            target.master.clone(),
            Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(master)),
            SentinelServerType::Master,
        );
    }
    let own = |s: &ConnectionInfo| {
        (
            s.redis_settings().username().map(str::to_owned),
            s.redis_settings().password().map(str::to_owned),
        )
    };
    let (user, password) = sentinels.first().map(own).unwrap_or_default();
    if sentinels
        .iter()
        .any(|s| own(s) != (user.clone(), password.clone()))
    {
        return Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "with TLS every sentinel must have the same user and password in its address",
        )));
    }
    let mut builder = SentinelClientBuilder::new(
        sentinels.iter().map(|s| s.addr().clone()),
        target.master.clone(),
        SentinelServerType::Master,
    )?
    .set_client_to_redis_tls_mode(TlsMode::Secure);
    if let Some(user) = user {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(user) = master.username() {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = master.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    if let Some(certs) = security.certificates() {
        builder = builder.set_client_to_redis_certificates(certs);
    }
    builder.build()
}

/// Asks the sentinels every [`CHECK_EVERY`] whether the master changed; ends with the store (the
/// last [`SentinelConn`] dropped).
async fn check_periodically(shared: Weak<Shared>) {
    let mut every = crate::clock::ticker(CHECK_EVERY);
    every.tick().await;
    loop {
        every.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let generation = shared.current.borrow().generation;
        look_up(&shared, generation, Trouble::Slow);
    }
}

/// Starts the lookup task unless one is running (or there is no runtime to run it on, which only
/// happens while the process shuts down).
fn look_up(shared: &Arc<Shared>, generation: u64, trouble: Trouble) {
    if shared.current.borrow().generation != generation {
        return;
    }
    if trouble == Trouble::Broken {
        shared.broken.store(true, Ordering::Release);
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if shared.looking.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(follow(Arc::clone(shared), generation, trouble));
}

/// Asks the sentinels until they name a usable master, then switches to it (`Broken`), or once,
/// switching only if they name another node (`Slow`).
async fn follow(shared: Arc<Shared>, generation: u64, trouble: Trouble) {
    let mut said_why = false;
    loop {
        if shared.current.borrow().generation != generation {
            break;
        }
        let trouble = if shared.broken.load(Ordering::Acquire) {
            Trouble::Broken
        } else {
            trouble
        };
        match switch(&shared, generation, trouble).await {
            Ok(()) => break,
            Err(e) if trouble == Trouble::Slow => {
                tracing::debug!(
                    "Redis Sentinel: cannot check master {:?} after a slow answer: {e}",
                    shared.name
                );
                break;
            }
            Err(e) => {
                if !said_why {
                    tracing::warn!(
                        "Redis Sentinel: master {:?} at {} is unreachable or demoted; asking the \
                         sentinels every {RETRY_EVERY:?} until they name a master ({e})",
                        shared.name,
                        shared.current.borrow().address
                    );
                    said_why = true;
                }
            }
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
    // A pause before the next lookup may start, so a stream of slow answers cannot keep the
    // sentinels busy.
    tokio::time::sleep(RETRY_EVERY).await;
    shared.looking.store(false, Ordering::Release);
}

/// One lookup: asks the sentinels and, if needed, connects to the master they name and makes it
/// the current one. `Ok` when nothing more is to be done.
async fn switch(shared: &Shared, generation: u64, trouble: Trouble) -> RedisResult<()> {
    let mut sentinels = shared.sentinels.lock().await;
    let bound = shared.timeout.max(LOOKUP_MIN);
    let client = within(bound, sentinels.async_get_client()).await?;
    let address = client.get_connection_info().addr().to_string();
    let previous = shared.current.borrow().address.clone();
    if trouble == Trouble::Slow && address == previous {
        return Ok(());
    }
    let conn = within(
        bound,
        client.get_multiplexed_async_connection_with_config(&conn_config(shared.timeout)),
    )
    .await?;
    shared.current.send_replace(Master {
        conn,
        address: address.clone(),
        generation: generation + 1,
    });
    shared.broken.store(false, Ordering::Release);
    if address == previous {
        tracing::info!(
            "Redis Sentinel: reconnected to master {:?} at {address}",
            shared.name
        );
    } else {
        tracing::warn!(
            "Redis Sentinel: the sentinels now name {address} as master {:?} (was {previous}); \
             decisions go there",
            shared.name
        );
    }
    Ok(())
}

/// Asks the sentinels for the master and connects to it.
async fn connect(
    sentinels: &mut SentinelClient,
    timeout: Duration,
) -> RedisResult<(MultiplexedConnection, String)> {
    let bound = timeout.max(LOOKUP_MIN);
    let client = within(bound, sentinels.async_get_client()).await?;
    let address = client.get_connection_info().addr().to_string();
    let conn = within(
        bound,
        client.get_multiplexed_async_connection_with_config(&conn_config(timeout)),
    )
    .await?;
    Ok((conn, address))
}

fn conn_config(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
}

/// `work` bounded by `bound`; running out is an I/O timeout error.
async fn within<T>(
    bound: Duration,
    work: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(bound, work).await {
        Ok(result) => result,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {bound:?}"),
        ))),
    }
}
