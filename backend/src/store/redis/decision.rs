//! Decisions in Redis ([`DecisionStore`]): ONE Lua script per decision (backend/lua), a twin of
//! sluice-core's transition, run atomically inside Redis with time from Redis `TIME` (or the
//! store's test clock), so replicas with skewed clocks agree. All-or-nothing checks: `all.rs`.

use async_trait::async_trait;
use futures::future::try_join_all;
use redis::RedisResult;
use sluice_core::cell::CellArgs;
use sluice_core::{Decision, Lease, Leased, Nanos, Params, Rule};

use super::errors::Call;
use super::scripts::{algorithm_args, leased};
use super::RedisStore;
use crate::store::{AllOutcome, CheckRequest, DecisionStore, StoreError};

/// One algorithm script call beyond its key: the rule's parameters, the units asked, the lease
/// offered (debited in the same call) and the time (`None`: Redis `TIME`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub(super) params: Params,
    pub(super) quantity: u64,
    pub(super) lease: Option<Lease>,
    pub(super) at: Option<Nanos>,
}

impl Step {
    /// A quantity-0 peek: nothing changes.
    pub(super) fn peek(params: Params, at: Option<Nanos>) -> Step {
        Step {
            params,
            quantity: 0,
            lease: None,
            at,
        }
    }
}

impl RedisStore {
    /// Runs an algorithm script on one key (with a lease, the script also debits the grant in
    /// the same call), bounded.
    pub(super) async fn decide(&self, key: &str, step: Step) -> Result<Leased, StoreError> {
        let call = Call::Script(step.params.algorithm().name());
        let reply = self
            .bounded(key, call, self.invoke_algorithm(key, step))
            .await?;
        leased(step.params, step.lease, &reply)
    }

    async fn invoke_algorithm(&self, key: &str, step: Step) -> RedisResult<Vec<i64>> {
        let mut conn = self.conn.clone();
        let mut invocation = self.scripts.algorithm(step.params.algorithm()).key(key);
        for arg in algorithm_args(step.params, step.quantity, step.lease, step.at) {
            invocation.arg(arg);
        }
        invocation.invoke_async(&mut conn).await
    }
}

#[async_trait]
impl DecisionStore for RedisStore {
    async fn throttle_leased(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        lease: Option<Lease>,
    ) -> Result<Leased, StoreError> {
        let redis_key = self.keys.state(rule.action(), rule.algorithm(), key);
        let step = Step {
            params: rule.params(),
            quantity,
            lease,
            at: self.at(),
        };
        self.decide(&redis_key, step).await
    }
    async fn throttle_all(&self, checks: &[CheckRequest<'_>]) -> Result<AllOutcome, StoreError> {
        self.throttle_all_checks(checks, self.at()).await
    }
    async fn cell_throttle(&self, key: &str, args: CellArgs) -> Result<Decision, StoreError> {
        let redis_key = self.keys.cell(key);
        let step = Step {
            params: Params::Gcra(args.params),
            quantity: args.quantity,
            lease: None,
            at: self.at(),
        };
        Ok(self.decide(&redis_key, step).await?.decision)
    }
    async fn peek_many(&self, rule: &Rule, keys: &[String]) -> Result<Vec<Decision>, StoreError> {
        let params = rule.params();
        let peek = Step::peek(params, self.at());
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
                try_join_all(redis_keys.iter().map(|k| self.invoke_algorithm(k, peek))),
            )
            .await?;
        replies
            .iter()
            .map(|reply| leased(params, None, reply).map(|l| l.decision))
            .collect()
    }
}
