//! The Lua scripts (backend/lua/*.lua), loaded once per process and called by EVALSHA with a
//! reload on NOSCRIPT (`redis::Script` does both), and the conversion of their replies into
//! sluice-core [`Decision`]s.

use redis::Script;
use sluice_core::algorithms::gcra;
use sluice_core::leased::grant_ttl_ms;
use sluice_core::{Algorithm, Decision, Lease, LeaseGrant, Leased, Nanos, Params};

use crate::store::StoreError;

const PRELUDE: &str = include_str!("../../../lua/prelude.lua");

/// A script with its code kept, so that it can be loaded on every node ahead of its first use
/// (`preload.rs`); used as the [`Script`] it derefs to.
pub(crate) struct Lua {
    script: Script,
    code: String,
}

impl Lua {
    fn new(code: String) -> Lua {
        Lua {
            script: Script::new(&code),
            code,
        }
    }

    /// The script's code (what `SCRIPT LOAD` sends).
    pub(crate) fn code(&self) -> &str {
        &self.code
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

/// Every script sluice runs.
pub(crate) struct Scripts {
    gcra: Lua,
    leaky_bucket: Lua,
    token_bucket: Lua,
    fixed_window: Lua,
    sliding_log: Lua,
    sliding_window: Lua,
    /// Put or delete a rule and bump the version.
    pub(crate) rules_write: Script,
    /// Read every rule and the version.
    pub(crate) rules_load: Script,
    /// Record a batch of activity of one action.
    pub(crate) activity_record: Script,
    /// Read the newest keys of one action.
    pub(crate) activity_recent: Script,
    /// Raise actions' times in the index of touched actions.
    pub(crate) actions_touch: Script,
    /// all-or-nothing checks (see `all.rs`).
    pub(crate) throttle_all: Lua,
    /// Cluster: undo one reservation of `throttle_all` by compare-and-set.
    pub(crate) throttle_refund: Lua,
    /// Settle a reservation, once per request id (see `commit.rs`).
    pub(crate) commit: Lua,
}

/// `body` after the prelude (prelude.lua: the clock, exact integer helpers, the calendar windows
/// and one state reader per algorithm, which the algorithm scripts and `commit.lua` share, as
/// core's decide and commit share `State`'s readers).
fn with_prelude(body: &str) -> Lua {
    Lua::new(format!("{PRELUDE}\n{body}"))
}

/// The budget and reset scripts' clock (`now_ms(ARGV[1])`: ms, or "" for Redis TIME).
const NOW_MS: &str = include_str!("../../../lua/now_ms.lua");

/// `body` with `now_ms` defined before it.
pub(crate) fn with_now_ms(body: &str) -> Script {
    Script::new(&format!("{NOW_MS}\n{body}"))
}

impl Scripts {
    /// Builds the scripts (computing their SHA1s; nothing is sent to Redis until first use).
    pub(crate) fn new() -> Scripts {
        Scripts {
            gcra: with_prelude(include_str!("../../../lua/gcra.lua")),
            leaky_bucket: with_prelude(include_str!("../../../lua/leaky_bucket.lua")),
            token_bucket: with_prelude(include_str!("../../../lua/token_bucket.lua")),
            fixed_window: with_prelude(include_str!("../../../lua/fixed_window.lua")),
            sliding_log: with_prelude(include_str!("../../../lua/sliding_log.lua")),
            sliding_window: with_prelude(include_str!("../../../lua/sliding_window.lua")),
            rules_write: Script::new(include_str!("../../../lua/rules_write.lua")),
            rules_load: Script::new(include_str!("../../../lua/rules_load.lua")),
            activity_record: Script::new(include_str!("../../../lua/activity_record.lua")),
            activity_recent: Script::new(include_str!("../../../lua/activity_recent.lua")),
            actions_touch: Script::new(include_str!("../../../lua/actions_touch.lua")),
            throttle_all: throttle_all_script(),
            throttle_refund: throttle_refund_script(),
            commit: with_prelude(include_str!("../../../lua/commit.lua")),
        }
    }

    /// The scripts a decision or a commit runs: loaded on every node at connect, so that no
    /// decision pays for a script's first load (on a Redis Cluster, once per master), which a
    /// caller with a 20 ms timeout (envoyproxy/ratelimit's example Envoy) would see fail.
    pub(crate) fn decision_scripts(&self) -> [&Lua; 9] {
        [
            &self.gcra,
            &self.leaky_bucket,
            &self.token_bucket,
            &self.fixed_window,
            &self.sliding_log,
            &self.sliding_window,
            &self.throttle_all,
            &self.throttle_refund,
            &self.commit,
        ]
    }

    /// The script of an algorithm.
    pub(crate) fn algorithm(&self, algorithm: Algorithm) -> &Script {
        match algorithm {
            Algorithm::Gcra => &self.gcra,
            Algorithm::LeakyBucket => &self.leaky_bucket,
            Algorithm::TokenBucket => &self.token_bucket,
            Algorithm::FixedWindow => &self.fixed_window,
            Algorithm::SlidingLog => &self.sliding_log,
            Algorithm::SlidingWindow => &self.sliding_window,
        }
    }
}

/// Slack added to every key's TTL beyond the algorithm's idle TTL.
const TTL_SLACK_MS: u64 = 1_000;
/// Least TTL when a test passes a fixed time: simulated time must not be cut short by the real
/// seconds that pass while a test steps through it.
const FIXED_TIME_MIN_TTL_MS: u64 = 600_000;

/// ARGV of an algorithm script: now ("" = Redis TIME), quantity, TTL in ms, two parameters
/// (interval ns and capacity for meters, window ms, or a calendar, and capacity for windows) and the lease max
/// (0: no lease), as decimal strings. gcra also gets its tolerance (T × capacity) and increment
/// (T × quantity), multiplied here exactly: they reach 2^63 for `cl.throttle`, where Lua's
/// doubles cannot multiply.
pub(crate) fn algorithm_args(
    params: Params,
    quantity: u64,
    lease: Option<Lease>,
    at: Option<Nanos>,
) -> Vec<String> {
    let idle_ms = params
        .idle_ttl_ns()
        .div_ceil(1_000_000)
        .saturating_add(TTL_SLACK_MS);
    let ttl_ms = if at.is_some() {
        idle_ms.max(FIXED_TIME_MIN_TTL_MS)
    } else {
        idle_ms
    };
    // A calendar window goes as "<unit>:<offset minutes>", or, in a named zone, as the window
    // boundaries around this backend's clock (or the fixed time given), which Lua cannot compute
    // without a tz database (Calendar::script_arg; prelude.lua's window_of).
    let first = match params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => m.interval.to_string(),
        Params::FixedWindow(w) | Params::SlidingLog(w) | Params::SlidingWindow(w) => {
            w.calendar.map_or_else(
                || w.window_ms.to_string(),
                |c| c.script_arg(at.unwrap_or_else(crate::clock::now_ns)),
            )
        }
    };
    let mut args = vec![
        at.map_or_else(String::new, |t| t.to_string()),
        quantity.to_string(),
        ttl_ms.to_string(),
        first,
        params.capacity().to_string(),
        lease.map_or(0, |l| l.max).to_string(),
    ];
    if let Params::Gcra(m) = params {
        args.push(m.tolerance().to_string());
        args.push(m.increment(quantity).to_string());
    }
    args
}

/// Builds the decision and its lease grant from a script's reply
/// `{allowed, remaining, retry_after (-1 = none), reset_after, a, b, c, d, units}`, where a..d
/// give the level exactly as core computes it (same f64 operations on the same integers) and
/// `units` is what the script granted beyond the request (its decision is then that of quantity +
/// units, as [`sluice_core::leased`] decides). Numbers may come as integers or decimal strings
/// (gcra's exceed 2^53, where Lua numbers are not exact). gcra's remaining and level are derived
/// here from its exact ttl by core itself; a grant's ttl by core from the decision.
pub(crate) fn leased(
    params: Params,
    lease: Option<Lease>,
    reply: &[i64],
) -> Result<Leased, StoreError> {
    let [head @ .., units] = reply else {
        return Err(StoreError::Corrupt("script returned nothing".to_owned()));
    };
    let decision = decision(params, head)?;
    let units = u64::try_from(*units)
        .map_err(|_| StoreError::Corrupt(format!("script granted {units} units")))?;
    let grant = match (units, lease) {
        (0, _) => None,
        (units, Some(lease)) => Some(LeaseGrant {
            units,
            ttl_ms: grant_ttl_ms(&params, lease, &decision),
        }),
        (units, None) => {
            return Err(StoreError::Corrupt(format!(
                "script granted {units} units with no lease asked"
            )))
        }
    };
    Ok(Leased { decision, grant })
}

fn decision(params: Params, reply: &[i64]) -> Result<Decision, StoreError> {
    let [allowed, remaining, retry, reset, a, b, c, d] = reply else {
        return Err(StoreError::Corrupt(format!(
            "script returned {} values, expected 9",
            reply.len() + 1
        )));
    };
    let unsigned = |v: i64, what: &str| {
        u64::try_from(v)
            .map_err(|_| StoreError::Corrupt(format!("script returned a negative {what}: {v}")))
    };
    let retry_after = if *retry < 0 {
        None
    } else {
        Some(unsigned(*retry, "retry_after")?)
    };
    let reset_after = unsigned(*reset, "reset_after")?;
    let level = match params {
        Params::Gcra(m) => return Ok(gcra::report(m, *allowed == 1, reset_after, retry_after)),
        Params::LeakyBucket(_) | Params::TokenBucket(_) => *a as f64 / *b as f64,
        Params::FixedWindow(_) | Params::SlidingLog(_) => *a as f64,
        Params::SlidingWindow(_) => *a as f64 * *b as f64 / *c as f64 + *d as f64,
    };
    Ok(Decision {
        allowed: *allowed == 1,
        capacity: params.capacity(),
        remaining: unsigned(*remaining, "remaining")?,
        retry_after,
        reset_after,
        level,
    })
}

const ALL_DRIVER: &str = include_str!("../../../lua/throttle_all.lua");

/// `throttle_all.lua` with the six algorithm scripts wrapped as its step functions.
pub(crate) fn throttle_all_script() -> Lua {
    let steps = [
        ("gcra", include_str!("../../../lua/gcra.lua")),
        (
            "leaky_bucket",
            include_str!("../../../lua/leaky_bucket.lua"),
        ),
        (
            "token_bucket",
            include_str!("../../../lua/token_bucket.lua"),
        ),
        (
            "fixed_window",
            include_str!("../../../lua/fixed_window.lua"),
        ),
        ("sliding_log", include_str!("../../../lua/sliding_log.lua")),
        (
            "sliding_window",
            include_str!("../../../lua/sliding_window.lua"),
        ),
    ];
    let mut source = String::from("local STEPS = {}\n");
    for (name, body) in steps {
        source.push_str(&format!(
            "STEPS['{name}'] = function(KEYS, ARGV)\n{PRELUDE}\n{body}\nend\n"
        ));
    }
    source.push_str(ALL_DRIVER);
    Lua::new(source)
}

/// `throttle_refund.lua`.
pub(crate) fn throttle_refund_script() -> Lua {
    Lua::new(include_str!("../../../lua/throttle_refund.lua").to_owned())
}
