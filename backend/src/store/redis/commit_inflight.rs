//! The key's cost-budget record in Redis ([`sluice_core::budget`]): two hashes next to the throttle
//! state, in its hash tag (one Cluster slot with the state and the commit markers):
//! `<state key>:inflight` (reservations in flight, id → `units:held_at_ms`, written by
//! `budget_hold.lua`) and `<state key>:overshoot` (debits beyond reservations, written by
//! `commit.lua` in the commit's own call). Read by `budget_read.lua` for the key view.
//!
//! Holding costs one more call, made only for throttle requests that carry a `reservation_id`:
//! the plain throttle path never runs it.

use std::sync::LazyLock;

use redis::Script;
use sluice_core::limits::{MAX_IN_FLIGHT_PER_KEY, RESERVATION_IN_FLIGHT_MS};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::KeyBudget;
use sluice_core::{Nanos, Rule};

use super::errors::Call;
use super::scripts::with_now_ms;
use super::RedisStore;
use crate::store::StoreError;

static HOLD: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/budget_hold.lua")));
static READ: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/budget_read.lua")));

/// Slack beyond the in-flight span before Redis drops a whole record of a key gone quiet.
const GC_SLACK_MS: u64 = 1_000;

/// The reservations in flight of the state key `state`.
pub(crate) fn in_flight_key(state: &str) -> String {
    format!("{state}:inflight")
}

/// The debits beyond reservations of the state key `state`.
pub(crate) fn overshoot_key(state: &str) -> String {
    format!("{state}:overshoot")
}

/// The time of the key's latest reset, in ms (written by `state_reset.lua`, read by `commit.lua`):
/// a commit of a reservation decided at or before it changes nothing
/// ([`sluice_core::budget::before_reset`]).
pub(crate) fn reset_key(state: &str) -> String {
    format!("{state}:reset")
}

/// A script's "now" argument: ms, or "" for Redis TIME.
pub(crate) fn now_arg(at: Option<Nanos>) -> String {
    at.map_or_else(String::new, |t| (t / NANOS_PER_MILLI).to_string())
}

impl RedisStore {
    /// [`crate::store::DecisionStore::hold`] on Redis.
    pub(crate) async fn hold_reservation(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
        at: Option<Nanos>,
    ) -> Result<bool, StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let held = in_flight_key(&state);
        let mut invocation = HOLD.key(&held);
        invocation
            .key(format!("{state}:commit:{id}"))
            .arg(now_arg(at))
            .arg(id)
            .arg(units)
            .arg(RESERVATION_IN_FLIGHT_MS)
            .arg(MAX_IN_FLIGHT_PER_KEY)
            .arg(RESERVATION_IN_FLIGHT_MS + GC_SLACK_MS);
        let mut conn = self.conn.clone();
        let reply: i64 = self
            .bounded(
                &held,
                Call::Script("budget_hold"),
                invocation.invoke_async(&mut conn),
            )
            .await?;
        Ok(reply == 1)
    }

    /// [`crate::store::DecisionStore::budget`] on Redis.
    pub(crate) async fn read_budget(
        &self,
        rule: &Rule,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<KeyBudget, StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let held = in_flight_key(&state);
        let mut invocation = READ.key(&held);
        invocation
            .key(overshoot_key(&state))
            .arg(now_arg(at))
            .arg(RESERVATION_IN_FLIGHT_MS);
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = self
            .bounded(
                &held,
                Call::Script("budget_read"),
                invocation.invoke_async(&mut conn),
            )
            .await?;
        figures(&reply)
    }
}

/// The read script's reply `{reserved, reservations, overshoot, debited, until}`.
fn figures(reply: &[i64]) -> Result<KeyBudget, StoreError> {
    let corrupt = |what: String| StoreError::Script {
        script: "budget_read",
        message: format!("unexpected reply: {what}"),
    };
    let values: Vec<u64> = reply
        .iter()
        .map(|v| u64::try_from(*v).map_err(|_| corrupt(format!("a negative {v}"))))
        .collect::<Result<_, _>>()?;
    let [reserved, count, overshoot, debited, until] = values[..] else {
        return Err(corrupt(format!("{} values, expected 5", reply.len())));
    };
    Ok(KeyBudget {
        reserved_in_flight: reserved,
        reservations_in_flight: count,
        overshoot,
        debited,
        overshoot_until_ms: (until > 0).then_some(until),
        // Read from the throttle state, not this record (the key view's peek).
        debt: 0,
    })
}
