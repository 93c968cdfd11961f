//! Where throttle state and rules live. One trait, two stores: memory (one process, the embedded
//! default) and Redis (single node or Cluster, shared by every replica). The conformance suite in
//! `backend/tests` holds both to the same answers as sluice-core's transitions.

mod all;
mod changes;
mod error;
pub mod memory;
pub mod redis;

pub use all::{AllOutcome, CheckRequest};
pub use changes::{AuditStamp, ChangeOutcome, RuleChange};
pub use error::StoreError;

use async_trait::async_trait;
use sluice_core::cell::CellArgs;
use sluice_core::wire::StoreHealth;
use sluice_core::{Action, Decision, Lease, Leased, Nanos, Rule};

/// The rules as stored, with the version that identifies this exact set.
#[derive(Debug, Clone, Default)]
pub struct RuleSnapshot {
    /// Increases on every write; `None` when the store holds no rules bookkeeping at all (a fresh
    /// or wiped Redis), which tells a replica holding cached rules to publish them again.
    pub version: Option<u64>,
    /// Every stored rule.
    pub rules: Vec<Rule>,
    /// Every per-key override (each of an action in `rules`).
    pub overrides: Vec<sluice_core::wire::KeyOverride>,
}

/// Recent traffic of one key, batched by each replica and flushed every ≤ 250 ms so the
/// dashboard's live view costs no store round trip per decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// The action.
    pub action: Action,
    /// The key.
    pub key: String,
    /// When the key was last seen, in milliseconds since the epoch.
    pub last_seen_ms: u64,
    /// Requests allowed in this batch.
    pub allowed: u64,
    /// Requests denied in this batch.
    pub denied: u64,
}

/// Decisions: the atomic throttle steps on each key's state, and the reset of that state. The hot
/// path: every metered request reaches exactly one of these methods.
///
/// `at` is the decision time: `None` in production (the store's own clock: Redis `TIME`, or the
/// system clock for memory), `Some` in tests that hold stores to fixed-time tables.
#[async_trait]
pub trait DecisionStore: Send + Sync + 'static {
    /// Decides one request for `key` under `rule`, atomically, with no lease: every request
    /// decided on its own (the RLS path, peeks, tools).
    async fn throttle(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        at: Option<Nanos>,
    ) -> Result<Decision, StoreError> {
        Ok(self
            .throttle_leased(rule, key, quantity, None, at)
            .await?
            .decision)
    }

    /// Decides one request for `key` under `rule`, atomically, and with `lease` (a caller that
    /// can hold one, under an enforced rule: [`sluice_core::leased::offer`]) also debits a lease
    /// grant in the same atomic step, answering the decision of quantity + granted units
    /// ([`sluice_core::leased`]). With `lease: None` it is exactly [`DecisionStore::throttle`].
    async fn throttle_leased(
        &self,
        rule: &Rule,
        key: &str,
        quantity: u64,
        lease: Option<Lease>,
        at: Option<Nanos>,
    ) -> Result<Leased, StoreError>;

    /// Decides all-or-nothing checks ([`sluice_core::all`]): allowed only if every
    /// check allows, and a denied request changes no state. The memory store and a single Redis
    /// node decide them in one atomic step; Redis Cluster reserves each in turn and refunds on a
    /// denial (see [`AllOutcome::unrefunded`]). No leases. At most
    /// [`sluice_core::limits::MAX_CHECKS`] checks (callers validate).
    async fn throttle_all(
        &self,
        checks: &[CheckRequest<'_>],
        at: Option<Nanos>,
    ) -> Result<AllOutcome, StoreError>;

    /// redis-cell `CL.THROTTLE` semantics (gcra), under its own key namespace.
    async fn cell_throttle(
        &self,
        key: &str,
        args: CellArgs,
        at: Option<Nanos>,
    ) -> Result<Decision, StoreError>;

    /// Levels of many keys as of now (quantity-0 peeks: nothing changes).
    async fn peek_many(
        &self,
        rule: &Rule,
        keys: &[String],
        at: Option<Nanos>,
    ) -> Result<Vec<Decision>, StoreError>;

    /// Settles a reservation of `key` under `rule` ([`sluice_core::commit`]): gives back what is
    /// surely still held of reserved − actual, debits actual − reserved without a check, in one
    /// atomic step with the mark of `id` (checked by callers with
    /// [`sluice_core::commit::check_id`]): a commit whose id this key already committed within
    /// [`sluice_core::commit::COMMIT_ID_TTL_MS`] changes nothing and answers the first one's
    /// numbers ([`CommitOutcome::duplicate`]). A first commit also settles the key's budget
    /// record in the same step: the reservation held under `id` is no longer in flight, and a
    /// debit adds to the key's overshoot figures ([`sluice_core::budget`]).
    /// A reservation from before the key's latest reset ([`DecisionStore::reset_key`]) changes
    /// nothing: it answers zeros, not as a duplicate, and marks `id` so a retry is one.
    async fn commit(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        commit: sluice_core::commit::Commit,
        at: Option<Nanos>,
    ) -> Result<CommitOutcome, StoreError>;

    /// Holds an allowed reservation of `units` for `key` under `rule` as in flight under `id` (its
    /// commit's id, checked by callers with [`sluice_core::commit::check_id`]), at store time
    /// `at` (`None`: now), until [`DecisionStore::commit`] of that id removes it or
    /// [`sluice_core::limits::RESERVATION_IN_FLIGHT_MS`] passes ([`sluice_core::budget`]). Only
    /// for throttle requests that carry a `reservation_id`, after their allowed decision: the
    /// plain throttle path never calls it. Returns false when not held (the key already holds
    /// [`sluice_core::limits::MAX_IN_FLIGHT_PER_KEY`] live ones, or the commit already came).
    async fn hold(
        &self,
        rule: &Rule,
        key: &str,
        id: &str,
        units: u64,
        at: Option<Nanos>,
    ) -> Result<bool, StoreError>;

    /// `key`'s cost-budget figures under `rule` at `at` (`None`: now): reservations in flight and
    /// the commits' debits beyond them in the current budget ([`sluice_core::budget`]). Its
    /// `debt` is 0 here: the debt lives in the throttle state, and the key view reads it from
    /// its peek ([`sluice_core::budget::debt`]).
    async fn budget(
        &self,
        rule: &Rule,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<sluice_core::wire::KeyBudget, StoreError>;

    /// Removes every throttle state `key` holds under `action` (one per algorithm) and its
    /// cost-budget records (reservations in flight, overshoot), as if it had never been seen, in
    /// one atomic step at `at` (`None`: now); returns the algorithms whose state was there.
    ///
    /// In the same step it marks the reservations it dropped, so that a later
    /// [`DecisionStore::commit`] of a reservation made before the reset changes nothing (no
    /// refund, no debit; a retry is a duplicate): the reservations held in flight by their ids,
    /// the others by their `reserved_at` ([`sluice_core::budget::before_reset`]). Why: a refund
    /// could only give back units of reservations made since the reset, and a debit would charge
    /// the fresh budget for spending the reset wiped. The marks last
    /// [`sluice_core::commit::COMMIT_ID_TTL_MS`], as a commit id's own.
    async fn reset_key(
        &self,
        action: &Action,
        key: &str,
        at: Option<Nanos>,
    ) -> Result<Vec<sluice_core::Algorithm>, StoreError>;
}

/// What [`DecisionStore::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommitOutcome {
    /// Refunded, debited, overshoot and the level after. For a duplicate: the first commit's
    /// numbers, with the level as of now.
    pub committed: sluice_core::commit::Committed,
    /// The id was already committed: nothing changed.
    pub duplicate: bool,
}

/// Rules and per-key overrides, their version (what every replica polls) and the audit trail of
/// their changes: written by admins, read by every replica's rule cache.
#[async_trait]
pub trait RuleStore: Send + Sync + 'static {
    /// Every rule and the current version.
    async fn load_rules(&self) -> Result<RuleSnapshot, StoreError>;

    /// Creates or replaces a rule; returns the new version.
    async fn put_rule(&self, rule: &Rule) -> Result<u64, StoreError>;

    /// Deletes a rule; returns the new version, or `None` if there was no such rule.
    async fn delete_rule(&self, action: &Action) -> Result<Option<u64>, StoreError>;

    /// The current rules version (cheap; polled by every replica).
    async fn rules_version(&self) -> Result<Option<u64>, StoreError>;

    /// Applies an admin's change to the rules (a rule or a per-key override put or deleted) and
    /// bumps the rules version, and with `audit` also records the change in the audit trail
    /// (keeping the newest [`sluice_core::limits::AUDIT_KEEP`]), all in one atomic step.
    /// Deleting a rule deletes its overrides. A refused change ([`ChangeOutcome::Missing`],
    /// [`ChangeOutcome::NoRule`], [`ChangeOutcome::TooManyOverrides`]) writes nothing.
    /// Republishing cached rules passes no `audit`.
    async fn change_rules(
        &self,
        change: &RuleChange,
        audit: Option<&AuditStamp>,
    ) -> Result<ChangeOutcome, StoreError>;

    /// Records one audit entry that goes with no rules change (a key reset).
    async fn record_audit(&self, entry: &sluice_core::wire::AuditEntry) -> Result<(), StoreError>;

    /// The newest `limit` audit entries, newest first.
    async fn read_audit(
        &self,
        limit: usize,
    ) -> Result<Vec<sluice_core::wire::AuditEntry>, StoreError>;
}

/// Activity and history: what the dashboard shows (recent keys, steps of counts, the most denied
/// keys). Stored with TTLs, written in batches off the hot path; losing some is a gap in a chart,
/// never a wrong decision.
#[async_trait]
pub trait ActivityStore: Send + Sync + 'static {
    /// Records a batch of recent activity.
    async fn record_activity(&self, batch: &[Activity]) -> Result<(), StoreError>;

    /// The most recently active keys of an action, newest first, with their activity.
    async fn recent_activity(
        &self,
        action: &Action,
        limit: usize,
    ) -> Result<Vec<Activity>, StoreError>;

    /// Adds counts to actions' history steps and raises their last-seen times (see
    /// [`crate::history`]). Stored with a TTL (an hour and a margin; last seen a day), so a
    /// `volatile-*` eviction policy may evict them, never the rules.
    async fn record_history(
        &self,
        batch: &[crate::history::HistoryRecord],
    ) -> Result<(), StoreError>;

    /// Applies one action's filter-report counts once per (action, reporter, seq): when `mark.seq`
    /// is above the highest applied for (action, reporter), adds `record` (as `record_history`
    /// does) and raises the mark, in one atomic step; otherwise changes nothing. The marks are
    /// bounded per action ([`crate::history::marks`]): a new reporter may drop the least recently
    /// applied settled record (`Applied { dropped: 1 }`) or find the set full of young ones
    /// (`Full`: nothing done). A record with zero counts and last seen 0 only raises the mark.
    async fn apply_report(
        &self,
        mark: &crate::history::ReportMark,
        record: &crate::history::HistoryRecord,
    ) -> Result<crate::history::marks::ReportApplied, StoreError>;

    /// The stored steps of `action` among the `steps` steps from `first_step_ms`, and when it was
    /// last seen (if within a day of `now_ms`).
    async fn read_history(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> Result<crate::history::StoredHistory, StoreError>;

    /// Adds backend denials per key to the minute buckets top denied reads (each bucket keeps the
    /// [`crate::history::DENIED_KEEP`] keys denied most).
    async fn record_denied(&self, batch: &[crate::history::DeniedRecord])
        -> Result<(), StoreError>;

    /// The `limit` keys of `action` denied most over the last 5 minutes at `now_ms`, most denied
    /// first (ties by key).
    async fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError>;

    /// `key`'s backend denials under `action` per top-denied minute bucket read at `now_ms`,
    /// as (bucket start ms, denials), newest first, buckets without a denial left out (0 also
    /// when the key was trimmed from a bucket as one of a spray's least denied).
    async fn key_denied(
        &self,
        action: &Action,
        key: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, u64)>, StoreError>;

    /// When `key` was last seen under `action`, if it is among the action's recent keys.
    async fn key_last_seen(&self, action: &Action, key: &str) -> Result<Option<u64>, StoreError>;
}

/// The storage behind the decision and admin APIs: the three concerns together (as limitador
/// splits its storage), plus what identifies and probes the store. Code that needs one concern
/// takes that trait; the app holds one `Arc<dyn Store>`.
#[async_trait]
pub trait Store: DecisionStore + RuleStore + ActivityStore {
    /// A short name for logs and `/readyz`: "memory", "redis", "redis-cluster".
    fn kind(&self) -> &'static str;

    /// Whether the store answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;

    /// How the store stands: room left, evictions, settings that let a key spray switch limiting
    /// off. Cheap (no store round trip): stores refresh what they report in the background.
    fn health(&self) -> StoreHealth {
        StoreHealth {
            kind: self.kind().to_owned(),
            ..StoreHealth::default()
        }
    }

    /// Where writes go now, when that can change while running: with Redis Sentinel, the master
    /// the sentinels name (`mymaster at 10.0.0.5:6379`), for `/readyz`. `None` for stores whose
    /// address is configured.
    fn master(&self) -> Option<String> {
        None
    }
}
