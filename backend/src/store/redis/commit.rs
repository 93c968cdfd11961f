//! Commits in Redis: one call of `commit.lua`, the twin of [`sluice_core::commit::commit`], on
//! the key's throttle state and the mark of the request id, `<state key>:commit:<id>`. The mark
//! shares the state's hash tag, so both live in one Cluster slot and one script call settles the
//! reservation and marks it, atomically: a retry finds the mark (kept
//! [`COMMIT_ID_TTL_MS`]) and changes nothing. The same call settles the key's budget record
//! (`commit_inflight.rs`): the reservation is no longer in flight, a debit adds to the overshoot.
//! A debit that does not fit is carried as debt in the state itself (up to core's
//! `carry_bound`, passed to the script), and a meter's state then lives as long as its debt
//! takes to drain.

use redis::RedisResult;
use sluice_core::commit::{carry_bound, Commit, Committed, COMMIT_ID_TTL_MS};
use sluice_core::{Nanos, Params, Rule};

use super::errors::Call;
use super::scripts::algorithm_args;
use super::RedisStore;
use crate::store::{CommitOutcome, StoreError};

impl RedisStore {
    /// [`crate::store::DecisionStore::commit`] on Redis.
    pub(crate) async fn commit_reservation(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        c: Commit,
        at: Option<Nanos>,
    ) -> Result<CommitOutcome, StoreError> {
        let state = self.keys.state(rule.action(), rule.algorithm(), key);
        let mark = format!("{state}:commit:{id}");
        let params = rule.params();
        let reply = self
            .bounded(
                &state,
                Call::Script("commit"),
                self.invoke_commit(&state, &mark, id, params, c, at),
            )
            .await?;
        outcome(params, &reply)
    }

    async fn invoke_commit(
        &self,
        state: &str,
        mark: &str,
        id: &str,
        params: Params,
        c: Commit,
        at: Option<Nanos>,
    ) -> RedisResult<Vec<i64>> {
        let mut conn = self.conn.clone();
        let mut invocation = self.scripts.commit.key(state);
        invocation.key(mark);
        // The key's budget record, settled in the same call (sluice_core::budget).
        invocation.key(super::commit_inflight::in_flight_key(state));
        invocation.key(super::commit_inflight::overshoot_key(state));
        // The key's latest reset: a reservation from before it changes nothing.
        invocation.key(super::commit_inflight::reset_key(state));
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
            .arg(carry_bound(&params));
        invocation.invoke_async(&mut conn).await
    }
}

/// The script's reply `{duplicate, refunded, debited, overshoot, a, b, c, d}`; the level from
/// a..d with core's own f64 operations.
fn outcome(params: Params, reply: &[i64]) -> Result<CommitOutcome, StoreError> {
    let corrupt = |what: String| StoreError::Script {
        script: "commit",
        message: format!("unexpected reply: {what}"),
    };
    let [duplicate, refunded, debited, overshoot, a, b, c, d] = reply else {
        return Err(corrupt(format!("{} values, expected 8", reply.len())));
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
    })
}
