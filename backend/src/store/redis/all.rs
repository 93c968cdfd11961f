//! All-or-nothing checks (several limits on one request), in Redis.
//!
//! Single node: ONE call of `throttle_all.lua` with every check's key: the algorithm scripts,
//! each with its own prelude, wrapped unchanged as functions (so the single-check scripts and
//! their parity tests stay as they are), run in order, and on the first enforced denial every key
//! is put back by DUMP/RESTORE before the call ends. Nobody sees the intermediate state: the
//! request is one atomic step, exactly [`sluice_core::all::decide_all`].
//!
//! Cluster: a check's keys share one hash tag (action and subject), but different checks' keys
//! live in different slots, often on different masters, and one script cannot span them. So every
//! check is first probed, all at once (mode `probe`: decided and put back, nothing changes); if
//! one would deny, the request is denied having written nothing, the common case of a limited
//! client. Only when every probe passes is each check reserved in turn, the one with the least
//! headroom (the probe's `remaining`) first (the same script, one check, mode `reserve`, which
//! also returns the key's DUMP before and after); on a denial the earlier reservations are refunded, newest first,
//! by `throttle_refund.lua`, a compare-and-set that restores the state before only if the key
//! still holds exactly what the reservation left. What holds:
//! - a request denied by a probe writes nothing (two round trips: probes, then peeks of the
//!   others for the answer);
//! - a request denied at its reservation (a probe passed, then another request took the last
//!   unit: a race near a limit's edge) never keeps a debit whose key nobody else touched in
//!   between;
//! - between a reservation and its refund another request may see that limit debited, so it may
//!   be denied by it (never allowed by it: the error is on the safe side);
//! - if another request changed the key in between, restoring would erase that request's debit,
//!   so the refund is skipped and the denied request's debit stays: counted in
//!   [`AllOutcome::unrefunded`] (logged at WARN by the decision path);
//! - a failure (timeout, node down) after some reservations leaves them debited (the request is
//!   answered with the error; the filter applies its failure mode).

use redis::{RedisResult, Value};
use sluice_core::all::{peer_view, Part};
use sluice_core::Params;

use super::decision::Step;
use super::errors::Call;
use super::scripts::{algorithm_args, leased};
use super::RedisStore;
use crate::store::{AllOutcome, CheckRequest, StoreError};

/// What one reservation left, to refund it: key, existed before, DUMP before, PTTL before, DUMP
/// after.
struct Snapshot {
    key: String,
    existed: Vec<u8>,
    before: Vec<u8>,
    ttl: Vec<u8>,
    after: Vec<u8>,
}

fn bytes(value: &Value) -> Result<Vec<u8>, StoreError> {
    match value {
        Value::BulkString(b) => Ok(b.clone()),
        Value::SimpleString(s) => Ok(s.clone().into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        other => Err(corrupt(&format!("a snapshot field {other:?}"))),
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Script {
        script: "throttle_all",
        message: format!("unexpected reply: {what}"),
    }
}

fn int(value: &Value) -> Result<i64, StoreError> {
    redis::from_redis_value::<i64>(value.clone()).map_err(|e| corrupt(&e.to_string()))
}

/// The script's reply: denied index (1-based, 0 = allowed), one reply per check, and in
/// `reserve` mode the snapshots.
fn parse(reply: &Value, params: &[Params]) -> Result<(AllOutcome, Vec<Snapshot>), StoreError> {
    let Value::Array(parts) = reply else {
        return Err(corrupt("not an array"));
    };
    let (Some(denied), Some(Value::Array(replies))) = (parts.first(), parts.get(1)) else {
        return Err(corrupt("no denied index or replies"));
    };
    let denied = usize::try_from(int(denied)?).map_err(|_| corrupt("a negative index"))?;
    if replies.len() != params.len() || denied > params.len() {
        return Err(corrupt("a reply count unlike the check count"));
    }
    let decisions = replies
        .iter()
        .zip(params)
        .map(|(r, &p)| {
            let values: Vec<i64> =
                redis::from_redis_value(r.clone()).map_err(|e| corrupt(&e.to_string()))?;
            leased(p, None, &values).map(|l| l.decision)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut snapshots = Vec::new();
    if let Some(Value::Array(rows)) = parts.get(2) {
        for row in rows {
            let Value::Array(f) = row else {
                return Err(corrupt("a snapshot that is not an array"));
            };
            let [key, existed, before, ttl, after] = f.as_slice() else {
                return Err(corrupt("a snapshot of the wrong length"));
            };
            snapshots.push(Snapshot {
                key: String::from_utf8_lossy(&bytes(key)?).into_owned(),
                existed: bytes(existed)?,
                before: bytes(before)?,
                ttl: bytes(ttl)?,
                after: bytes(after)?,
            });
        }
    }
    Ok((
        AllOutcome {
            decisions,
            denied: denied.checked_sub(1),
            unrefunded: 0,
        },
        snapshots,
    ))
}

/// The parameters `check` is counted with (one unit more for [`Part::PastTheLimit`]).
fn counted(check: &CheckRequest<'_>) -> Params {
    match check.part {
        Part::PastTheLimit => check.rule.params().one_past(),
        Part::AllOrNothing | Part::OnItsOwn => check.rule.params(),
    }
}

/// `check`'s decision for `quantity` as its part tells it (the peer's view for
/// [`Part::PastTheLimit`]).
fn told(
    check: &CheckRequest<'_>,
    quantity: u64,
    d: sluice_core::Decision,
) -> sluice_core::Decision {
    match check.part {
        Part::PastTheLimit => peer_view(d, check.rule.params().capacity(), quantity),
        Part::AllOrNothing | Part::OnItsOwn => d,
    }
}

/// `outcome`'s decisions as each check's part tells them (after a denial, the others' are
/// peeks, of quantity 0).
fn told_all(checks: &[CheckRequest<'_>], mut outcome: AllOutcome) -> AllOutcome {
    for (i, (c, d)) in checks.iter().zip(outcome.decisions.iter_mut()).enumerate() {
        let peeked = outcome.denied.is_some_and(|j| j != i);
        *d = told(c, if peeked { 0 } else { c.quantity }, *d);
    }
    outcome
}

impl RedisStore {
    /// The all-or-nothing decision: one script call on a single node, reserve and refund on a
    /// Cluster (see the module docs).
    pub(crate) async fn throttle_all_checks(
        &self,
        checks: &[CheckRequest<'_>],
        at: Option<sluice_core::Nanos>,
    ) -> Result<AllOutcome, StoreError> {
        let keys: Vec<String> = checks
            .iter()
            .map(|c| self.keys.state(c.rule.action(), c.rule.algorithm(), c.key))
            .collect();
        if !self.conn.is_cluster() {
            let params: Vec<Params> = checks.iter().map(counted).collect();
            let reply = self.run_all(&keys, checks, "all", at).await?;
            return parse(&reply, &params).map(|(outcome, _)| told_all(checks, outcome));
        }
        self.reserve_each(&keys, checks, at).await
    }

    async fn run_all(
        &self,
        keys: &[String],
        checks: &[CheckRequest<'_>],
        mode: &str,
        at: Option<sluice_core::Nanos>,
    ) -> Result<Value, StoreError> {
        let first = keys.first().cloned().unwrap_or_default();
        self.bounded(
            &first,
            Call::Script("throttle_all"),
            self.invoke_all(keys, checks, mode, at),
        )
        .await
    }

    async fn invoke_all(
        &self,
        keys: &[String],
        checks: &[CheckRequest<'_>],
        mode: &str,
        at: Option<sluice_core::Nanos>,
    ) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        let script = &self.scripts.throttle_all;
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        invocation.arg(checks.len()).arg(mode);
        for c in checks {
            let args = algorithm_args(counted(c), c.quantity, None, at);
            invocation
                .arg(c.rule.algorithm().name())
                .arg(match (c.part, c.rule.mode()) {
                    (Part::OnItsOwn | Part::PastTheLimit, _) => "s",
                    (Part::AllOrNothing, sluice_core::Mode::Enforce) => "1",
                    (Part::AllOrNothing, _) => "0",
                })
                .arg(args.len());
            for a in args {
                invocation.arg(a);
            }
        }
        invocation.invoke_async(&mut conn).await
    }

    /// Cluster: each check reserved in its own slot, in order; on the first enforced denial the
    /// earlier reservations are refunded newest first and the others answered by peeks. A
    /// request whose checks all count on their own (none can deny it: the peer's semantics)
    /// needs no probe and no refund: each check is one call in its slot, all at once.
    async fn reserve_each(
        &self,
        keys: &[String],
        checks: &[CheckRequest<'_>],
        at: Option<sluice_core::Nanos>,
    ) -> Result<AllOutcome, StoreError> {
        if checks.iter().all(|c| c.part != Part::AllOrNothing) {
            let replies =
                futures::future::try_join_all(checks.iter().zip(keys).map(|(check, key)| {
                    self.run_all(
                        std::slice::from_ref(key),
                        std::slice::from_ref(check),
                        "all",
                        at,
                    )
                }))
                .await?;
            let mut decisions = Vec::with_capacity(checks.len());
            for (reply, check) in replies.iter().zip(checks) {
                let (outcome, _) = parse(reply, &[counted(check)])?;
                let outcome = told_all(std::slice::from_ref(check), outcome);
                decisions.push(
                    *outcome
                        .decisions
                        .first()
                        .ok_or_else(|| corrupt("no decision"))?,
                );
            }
            return Ok(AllOutcome {
                decisions,
                denied: None,
                unrefunded: 0,
            });
        }
        let probes = futures::future::try_join_all(checks.iter().zip(keys).map(|(check, key)| {
            self.run_all(
                std::slice::from_ref(key),
                std::slice::from_ref(check),
                "probe",
                at,
            )
        }))
        .await?;
        let mut headroom = Vec::with_capacity(checks.len());
        for (i, (reply, check)) in probes.iter().zip(checks).enumerate() {
            let (outcome, _) = parse(reply, &[counted(check)])?;
            let outcome = told_all(std::slice::from_ref(check), outcome);
            let Some(&decision) = outcome.decisions.first() else {
                return Err(corrupt("no decision"));
            };
            if outcome.denied.is_some() {
                return self.denied_answer(checks, i, decision, 0, at).await;
            }
            headroom.push((decision.remaining, i));
        }
        // Tightest first: the limit most likely to deny is reserved before the others, so a
        // race at a limit's edge usually leaves nothing to refund.
        headroom.sort_unstable();
        let mut decisions = vec![None; checks.len()];
        let mut reserved: Vec<Snapshot> = Vec::new();
        for (_, i) in headroom {
            let (Some(check), Some(key)) = (checks.get(i), keys.get(i)) else {
                continue;
            };
            let reply = self
                .run_all(
                    std::slice::from_ref(key),
                    std::slice::from_ref(check),
                    "reserve",
                    at,
                )
                .await?;
            let (outcome, snapshots) = parse(&reply, &[counted(check)])?;
            let outcome = told_all(std::slice::from_ref(check), outcome);
            let Some(&decision) = outcome.decisions.first() else {
                return Err(corrupt("no decision"));
            };
            if outcome.denied.is_some() {
                let mut unrefunded = 0;
                for snapshot in reserved.iter().rev() {
                    if !self.refund(snapshot).await? {
                        unrefunded += 1;
                    }
                }
                return self
                    .denied_answer(checks, i, decision, unrefunded, at)
                    .await;
            }
            reserved.extend(snapshots);
            if let Some(slot) = decisions.get_mut(i) {
                *slot = Some(decision);
            }
        }
        Ok(AllOutcome {
            decisions: decisions.into_iter().flatten().collect(),
            denied: None,
            unrefunded: 0,
        })
    }

    /// The answer to a request check `denied` denied: its denial, and for every other check a
    /// peek of its state now (refunded where it could be), all peeks at once.
    async fn denied_answer(
        &self,
        checks: &[CheckRequest<'_>],
        denied: usize,
        decision: sluice_core::Decision,
        unrefunded: usize,
        at: Option<sluice_core::Nanos>,
    ) -> Result<AllOutcome, StoreError> {
        let peeks =
            futures::future::try_join_all(checks.iter().enumerate().map(|(j, c)| async move {
                if j == denied {
                    Ok(decision)
                } else {
                    let key = self.keys.state(c.rule.action(), c.rule.algorithm(), c.key);
                    let peek = Step::peek(counted(c), at);
                    Ok(told(c, 0, self.decide(&key, peek).await?.decision))
                }
            }))
            .await?;
        Ok(AllOutcome {
            decisions: peeks,
            denied: Some(denied),
            unrefunded,
        })
    }

    /// Puts one reserved key back if it still holds what the reservation left; false when
    /// another request changed it since (nothing written).
    async fn refund(&self, s: &Snapshot) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.throttle_refund.key(&s.key);
        invocation
            .arg(&s.existed)
            .arg(&s.before)
            .arg(&s.ttl)
            .arg(&s.after);
        let done: i64 = self.script(&s.key, "throttle_refund", &invocation).await?;
        Ok(done == 1)
    }
}
