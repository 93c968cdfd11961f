//! Cost budgets in Redis ([`BudgetStore`]).
//!
//! Commits: one call of `commit.lua`, the twin of [`sluice_core::commit::commit`], on the key's
//! throttle state and the commit receipt of the request id, `<state key>:commit:<id>`. The
//! receipt shares the state's hash tag, so both live in one Cluster slot and one script call
//! commits the reservation and writes its receipt, atomically: a retry finds the receipt (kept
//! [`COMMIT_ID_TTL_MS`]) and changes nothing. The same call updates the key's budget record: the
//! reservation is no longer
//! in flight, a debit adds to the overshoot. A debit that does not fit is carried as debt in the
//! state itself (up to core's `carry_bound`, passed to the script), and a meter's state then
//! lives as long as its debt takes to drain.
//!
//! The key's cost-budget record ([`sluice_core::budget`]): two hashes next to the throttle
//! state, in its hash tag (one Cluster slot with the state and the commit receipts):
//! `<state key>:inflight` (reservations in flight, id → `units:recorded_at_ms`, written by
//! `budget_record.lua`) and `<state key>:overshoot` (debits beyond reservations, written by
//! `commit.lua` in the commit's own call). Read by `budget_read.lua` for the key view.
//!
//! Recording a reservation costs one more call, made only for throttle requests that carry a `reservation_id`:
//! the plain throttle path never runs it.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::{RedisResult, Script};
use sluice_core::commit::{carry_bound, Commit, Committed, COMMIT_ID_TTL_MS};
use sluice_core::limits::{
    LEASE_RETURN_SPAN_MS, MAX_IN_FLIGHT_PER_KEY, MAX_RECEIPTS_PER_KEY, RESERVATION_IN_FLIGHT_MS,
};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::wire::KeyBudget;
use sluice_core::{Nanos, Params, Rule};

use super::errors::Call;
use super::scripts::{algorithm_args, with_now_ms};
use super::RedisStore;
use crate::store::{BudgetStore, CommitOutcome, StoreError};

static RECORD: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/budget_record.lua")));
static LEASE_GRANT: LazyLock<Script> =
    LazyLock::new(|| with_now_ms(include_str!("../../../lua/lease_grant.lua")));
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

#[async_trait]
impl BudgetStore for RedisStore {
    async fn record_reservation(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
    ) -> Result<bool, StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let record = in_flight_key(&state);
        let mut invocation = RECORD.key(&record);
        invocation
            .key(format!("{state}:commit:{id}"))
            .arg(now_arg(self.at()))
            .arg(id)
            .arg(units)
            .arg(RESERVATION_IN_FLIGHT_MS)
            .arg(MAX_IN_FLIGHT_PER_KEY)
            .arg(RESERVATION_IN_FLIGHT_MS + GC_SLACK_MS);
        let reply: i64 = self.script(&record, "budget_record", &invocation).await?;
        Ok(reply == 1)
    }

    async fn record_lease_grant(
        &self,
        rule: &Rule,
        key: &str,
        units: u64,
    ) -> Result<(), StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let record = in_flight_key(&state);
        let mut invocation = LEASE_GRANT.key(&record);
        invocation
            .arg(now_arg(self.at()))
            .arg(units)
            .arg(LEASE_RETURN_SPAN_MS)
            .arg(LEASE_RETURN_SPAN_MS + GC_SLACK_MS);
        let _pool: i64 = self.script(&record, "lease_grant", &invocation).await?;
        Ok(())
    }

    async fn commit(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        c: Commit,
    ) -> Result<CommitOutcome, StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let receipt = format!("{state}:commit:{id}");
        let params = rule.params();
        let reply = self
            .bounded(
                &state,
                Call::Script("commit"),
                self.invoke_commit(&state, &receipt, id, params, c, self.at()),
            )
            .await?;
        outcome(params, &reply)
    }

    async fn budget(&self, rule: &Rule, key: &str) -> Result<KeyBudget, StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let record = in_flight_key(&state);
        let mut invocation = READ.key(&record);
        invocation
            .key(overshoot_key(&state))
            .arg(now_arg(self.at()))
            .arg(RESERVATION_IN_FLIGHT_MS);
        let reply: Vec<i64> = self.script(&record, "budget_read", &invocation).await?;
        figures(&reply)
    }
}

impl RedisStore {
    /// `commit.lua` on `state` and `receipt`, with the budget record's keys.
    async fn invoke_commit(
        &self,
        state: &str,
        receipt: &str,
        id: &str,
        params: Params,
        c: Commit,
        at: Option<Nanos>,
    ) -> RedisResult<Vec<i64>> {
        let mut conn = self.conn.clone();
        let mut invocation = self.scripts.commit.key(state);
        invocation.key(receipt);
        // The key's budget record, settled in the same call (sluice_core::budget).
        invocation.key(in_flight_key(state));
        invocation.key(overshoot_key(state));
        // The key's latest reset: a reservation from before it changes nothing.
        invocation.key(reset_key(state));
        // The prelude's six (quantity 0, no lease), then the commit's own.
        for arg in algorithm_args(params, 0, None, at).into_iter().take(6) {
            invocation.arg(arg);
        }
        invocation
            .arg(params.algorithm().name())
            .arg(c.reserved)
            .arg(c.actual)
            .arg(c.reserved_at.to_string())
            .arg(COMMIT_ID_TTL_MS)
            .arg(id)
            .arg(carry_bound(&params))
            .arg(MAX_RECEIPTS_PER_KEY);
        invocation.invoke_async(&mut conn).await
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

/// The script's reply `{duplicate, refunded, debited, overshoot, a, b, c, d, unrecorded, shed}`; the level from
/// a..d with core's own f64 operations.
fn outcome(params: Params, reply: &[i64]) -> Result<CommitOutcome, StoreError> {
    let corrupt = |what: String| StoreError::Script {
        script: "commit",
        message: format!("unexpected reply: {what}"),
    };
    let [duplicate, refunded, debited, overshoot, a, b, c, d, unrecorded, shed] = reply else {
        return Err(corrupt(format!("{} values, expected 10", reply.len())));
    };
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| corrupt(format!("a negative {v}")));
    let level = match params {
        Params::Gcra(_) | Params::LeakyBucket(_) | Params::TokenBucket(_) => *a as f64 / *b as f64,
        Params::FixedWindow(_) | Params::SlidingLog(_) => *a as f64,
        Params::SlidingWindow(_) => *a as f64 * *b as f64 / *c as f64 + *d as f64,
    };
    Ok(CommitOutcome {
        committed: Committed {
            refunded: unsigned(*refunded)?,
            debited: unsigned(*debited)?,
            overshoot: unsigned(*overshoot)?,
            level,
        },
        duplicate: *duplicate == 1,
        unrecorded: *unrecorded == 1,
        receipts_shed: unsigned(*shed)?,
    })
}
