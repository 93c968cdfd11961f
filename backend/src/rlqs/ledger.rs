//! Which stream holds which bucket, each bucket's share of its key, and what is paid for it.
//!
//! A share is the token bucket one Envoy enforces for one (action, key) (`Shape` of
//! [`sluice_core::rlqs::shape`]). The ledger keeps, per key, every live share (a closed stream's
//! included until its TTL ends: that Envoy may still enforce it) and pays for them:
//!
//! - **burst at grant**: before a fresh bucket is assigned (it starts full in Envoy) its
//!   `max_tokens` are debited ([`pay::burst`]); a key with less left grants what a lease would,
//!   and with nothing left the bucket is answered `DENY_ALL` and retried every tick;
//! - **refill every tick**: the refill every share could have earned since the last tick is
//!   debited ([`pay::refill`]); what the store cannot pay is owed, and a key owing more than one
//!   tick of refill has its shares' rates halved and pushed;
//! - **post-debit**: allowed usage a stream reports beyond what its share has been paid (Envoy's
//!   no-assignment window) is debited after the fact ([`pay::post_debit`]).
//!
//! Shares split the rule's token bucket equally among the key's holders
//! ([`sluice_core::rlqs::shape::split`]). A share is lowered at once when a holder joins or the
//! rule shrinks; its old rate is still paid for one tick (two if its stream is closed: until its
//! TTL), and a share is raised only while the rates paid for stay within the rule's.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use sluice_core::rlqs::mapping_rules::{Mapped, Mapping};
use sluice_core::rlqs::rebalance::{by_demand_of, slack, smooth, starving, ROTATE_EVERY_TICKS};
use sluice_core::rlqs::shape::{shape_for, Shape};
use sluice_core::rlqs::{ABANDON_AFTER_IDLE_REPORTS, TICK_MS};
use sluice_core::time::NANOS_PER_SEC;
use sluice_core::{Mode, Rule};
use tokio::sync::mpsc;

mod arrivals;
mod claims;
mod fresh;
mod peer;
mod registry;
mod tick;
mod view;

use super::metrics::{Rebalance, RlqsMetrics, ASSIGNMENT_KINDS};
use super::pay;
use super::reader::StreamInfo;
use super::settings::Settings;
use super::shares::Registry;
use crate::log_limit::{LogLimit, LOG_EVERY};
use crate::state::App;

/// What is left of each key's allowance in the report being read (`ledger/claims.rs`). Here, not
/// there, so that this file names nothing of its child's: no import circle.
#[derive(Debug, Default)]
struct Allowances(HashMap<KeyId, u64>);

/// One stream's id, unique in this process.
pub type StreamId = u64;

/// What a bucket is told to enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// Admit everything: unmapped buckets, actions without a rule, shadow rules.
    AllowAll,
    /// Admit nothing: a spent key, a holder without a burst now, or `unmatched: deny_all`.
    DenyAll,
    /// A share of the key.
    TokenBucket(Shape),
    /// Forget the bucket (idle): Envoy stops reporting it until its next request.
    Abandon,
}

impl Assignment {
    /// The metric label (one of [`ASSIGNMENT_KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Assignment::AllowAll => ASSIGNMENT_KINDS[0],
            Assignment::DenyAll => ASSIGNMENT_KINDS[1],
            Assignment::TokenBucket(_) => ASSIGNMENT_KINDS[2],
            Assignment::Abandon => ASSIGNMENT_KINDS[3],
        }
    }
}

/// How a share is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    /// A bucket Envoy holds no token bucket for (new, or after `DENY_ALL`): it starts full.
    First,
    /// A bucket whose token bucket must start full again (a reset): sent after `DENY_ALL` in
    /// the same response, which Envoy applies in order.
    Refill,
}

/// One assignment for one bucket of a stream (sent with the ledger's TTL).
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    /// The bucket, as Envoy sent it.
    pub bucket: BucketId,
    /// What it enforces until the TTL ends.
    pub assignment: Assignment,
}

/// The sluice check a bucket stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId {
    /// The action named by the bucket's `name` entry.
    pub action: String,
    /// The key from its other entries.
    pub key: String,
}

#[derive(Debug, Clone)]
enum Held {
    /// No check: admitted (unmapped, or the mapping file's `unmatched: allow_all`).
    Unmapped,
    /// No check: denied (the mapping file's `unmatched: deny_all`).
    Refused,
    Key(KeyId),
}

struct StreamEntry {
    tx: mpsc::Sender<Vec<Assigned>>,
    open: bool,
    buckets: HashMap<String, Held>,
    info: StreamInfo,
}

/// One stream's bucket of one key.
struct Share {
    bucket: BucketId,
    /// The token bucket Envoy holds; `None` after a `DENY_ALL` (nothing held, nothing paid).
    held: Option<Shape>,
    /// The rate paid for: at least what Envoy may still enforce (a lowering in flight).
    counted_tpf: u32,
    counted_until: Instant,
    expires: Instant,
    /// Units paid for this share (burst and refill), in billionths.
    paid_nano: u128,
    /// Allowed requests reported.
    used: u64,
    post_debited: u64,
    /// Reports in a row with no request.
    idle_reports: u32,
    /// Requests per report (allowed and denied), smoothed: what its rate is weighed by.
    demand: Option<u64>,
    /// Its stream's peer (`ledger/peer.rs`): one peer's holders share one part of the split.
    peer: u64,
}

type ShareId = (StreamId, String);

/// A bucket new to its stream, mapped and counted against the stream's bound, waiting for its
/// first store steps (`ledger/arrivals.rs`).
struct Arrival {
    stream: StreamId,
    canon: String,
    bucket: BucketId,
    id: KeyId,
    seen: Seen,
}

/// What one report says of one bucket.
#[derive(Debug, Clone, Copy)]
struct Seen {
    allowed: u64,
    /// Allowed and denied.
    requests: u64,
    /// No request at all since the last report.
    idle: bool,
}

struct KeyEntry {
    rule: Arc<Rule>,
    shares: BTreeMap<ShareId, Share>,
    /// Refill earned by the shares and not yet paid, in billionths of a unit.
    owed_nano: u128,
    /// What this replica may hold of the rule beside the other replicas (`registry.rs`);
    /// `None` until the first sync with the store.
    ceiling: Option<Shape>,
    /// The other replicas' holders at the last sync: a window rule's burst grows with every
    /// holder, across replicas ([`shape_for`]).
    others_holders: u32,
    /// The whole bucket the ceiling was last synced for: a holder joining a window rule grows
    /// it, and a ceiling synced for fewer holders would hold the burst back ([`shape_for`]).
    synced_whole: Option<Shape>,
    /// With more holders than burst units, whose turn it is ([`by_demand_of`]), and the
    /// ticks since it last moved.
    turn: usize,
    since_turn: u32,
}

impl KeyEntry {
    /// A key with no share yet, its ceiling unknown until the first sync.
    fn new(rule: Arc<Rule>) -> KeyEntry {
        KeyEntry {
            rule,
            shares: BTreeMap::new(),
            owed_nano: 0,
            ceiling: None,
            others_holders: 0,
            synced_whole: None,
            turn: 0,
            since_turn: 0,
        }
    }

    /// The rule's token bucket for every holder of the key, on every replica.
    fn whole(&self) -> Shape {
        let holders = self
            .shares
            .len()
            .saturating_add(usize::try_from(self.others_holders).unwrap_or(usize::MAX));
        shape_for(&self.rule.params(), holders)
    }

    fn total(&self) -> Shape {
        let rule = self.whole();
        match self.ceiling {
            Some(c) => Shape {
                max_tokens: rule.max_tokens.min(c.max_tokens),
                tokens_per_fill: rule.tokens_per_fill.min(c.tokens_per_fill),
                ..rule
            },
            None => rule,
        }
    }

    /// Each holder's target share, by position in `shares`: bursts equal (rotated when the
    /// holders outnumber the units), rates by demand, weighed fairly among peers.
    fn targets(&self) -> Vec<Shape> {
        let peers: Vec<u64> = self.shares.values().map(|s| s.peer).collect();
        by_demand_of(self.total(), &self.demands(), &peers, self.turn)
    }

    /// Each holder's demand, by position in `shares`.
    fn demands(&self) -> Vec<u64> {
        self.shares
            .values()
            .map(|s| s.demand.unwrap_or(0))
            .collect()
    }

    /// The rates the shares hold now.
    fn held_rates(&self) -> u64 {
        self.shares
            .values()
            .filter_map(|s| s.held)
            .map(|h| u64::from(h.tokens_per_fill))
            .sum()
    }

    fn counted_except(&self, id: &ShareId) -> u32 {
        self.shares
            .iter()
            .filter(|(k, _)| *k != id)
            .map(|(_, s)| s.counted_tpf)
            .fold(0u32, u32::saturating_add)
    }
}

/// The RLQS state of this process.
pub struct Ledger {
    ttl: Duration,
    max_buckets: usize,
    mapping: Mapping,
    metrics: RlqsMetrics,
    streams: HashMap<StreamId, StreamEntry>,
    keys: BTreeMap<KeyId, KeyEntry>,
    outbox: HashMap<StreamId, Vec<Assigned>>,
    last_tick: Option<Instant>,
    /// The shares of every replica, kept in the store.
    registry: Registry,
    /// New buckets waiting for their first store steps, oldest first: at most the streams'
    /// bucket bounds (each is in its stream's bucket map already).
    arrivals: VecDeque<Arrival>,
}

/// Per process: a sprayed stream could put every report's new buckets past the bound.
static OVER_BOUND: std::sync::LazyLock<LogLimit> =
    std::sync::LazyLock::new(|| LogLimit::new(LOG_EVERY));

/// Logs a bucket left unanswered at the per-stream bound, at most one line per [`LOG_EVERY`].
fn over_bound(max_buckets: usize) {
    if let Some(count) = OVER_BOUND.admit("over_bound") {
        tracing::warn!(count, max_buckets,
            "rlqs: buckets past a stream's bound (--rlqs-max-buckets) got no assignment: Envoy applies its no_assignment_behavior ({count} since the last line)");
    }
}

/// A bucket id as one map key: its entries sorted, NUL-separated.
fn canonical(bucket: &BucketId) -> String {
    let mut entries: Vec<(&String, &String)> = bucket.bucket.iter().collect();
    entries.sort_unstable();
    let mut out = String::new();
    for (k, v) in entries {
        out.push_str(k);
        out.push('\0');
        out.push_str(v);
        out.push('\0');
    }
    out
}

fn rule_in_force(app: &App, id: &KeyId) -> Option<Arc<Rule>> {
    app.rules
        .current()
        .rule_for(&id.action, &id.key)
        .filter(|r| r.mode() == Mode::Enforce)
        .cloned()
}

const NANO: u128 = NANOS_PER_SEC as u128;

impl Ledger {
    /// An empty ledger: assignments live `settings.ttl_s`, a stream holds at most
    /// `settings.max_buckets`, bucket ids map by `settings.mapping`.
    pub fn new(settings: &Settings, metrics: RlqsMetrics) -> Ledger {
        Ledger {
            ttl: settings.ttl(),
            max_buckets: settings.max_buckets,
            mapping: settings.mapping.clone(),
            metrics,
            streams: HashMap::new(),
            keys: BTreeMap::new(),
            outbox: HashMap::new(),
            last_tick: None,
            registry: Registry::default(),
            arrivals: VecDeque::new(),
        }
    }

    /// A stream opened (from `info`'s Envoy); its assignments go to `tx`.
    pub fn open(&mut self, stream: StreamId, info: StreamInfo, tx: mpsc::Sender<Vec<Assigned>>) {
        let entry = StreamEntry {
            tx,
            open: true,
            buckets: HashMap::new(),
            info,
        };
        self.streams.insert(stream, entry);
        self.set_sizes();
    }

    /// A stream closed: its shares stay paid for until their TTL ends (the Envoy may still
    /// enforce them, disconnected), then go.
    pub fn close(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.open = false;
            s.buckets.retain(|_, h| matches!(h, Held::Key(_)));
            if s.buckets.is_empty() {
                self.streams.remove(&stream);
            }
        }
        self.set_sizes();
    }

    fn set_sizes(&self) {
        let open = self.streams.values().filter(|s| s.open).count();
        let buckets = self.streams.values().map(|s| s.buckets.len()).sum();
        self.metrics.set_sizes(open, buckets);
    }

    fn push(&mut self, stream: StreamId, bucket: BucketId, assignment: Assignment) {
        self.outbox
            .entry(stream)
            .or_default()
            .push(Assigned { bucket, assignment });
    }

    /// Sends what the last step assigned to each open stream.
    fn flush(&mut self) {
        for (stream, assigned) in self.outbox.drain() {
            let Some(s) = self.streams.get(&stream).filter(|s| s.open) else {
                continue;
            };
            for a in &assigned {
                self.metrics.assigned(a.assignment.kind());
            }
            if s.tx.try_send(assigned).is_err() {
                tracing::debug!(
                    stream,
                    "rlqs: a stream's assignments were dropped (stream full or gone)"
                );
            }
        }
        self.set_sizes();
    }

    /// One usage report of `stream`: renews the buckets it holds (post-debiting usage beyond
    /// what was paid) and sends those renewals at once; maps new buckets and queues them for
    /// their first store steps ([`Ledger::work_arrivals`]: a bounded number now, the rest on
    /// the task's next turns), so a report naming thousands of new buckets never holds back
    /// the renewals of existing ones past their TTL.
    pub async fn report(
        &mut self,
        app: &App,
        stream: StreamId,
        usages: Vec<BucketQuotaUsage>,
        now: Instant,
    ) {
        let mut allowances = Allowances::default();
        for usage in usages {
            let Some(bucket) = usage.bucket_id else {
                continue;
            };
            let canon = canonical(&bucket);
            let Some(s) = self.streams.get_mut(&stream) else {
                return;
            };
            let (held, new) = match s.buckets.get(&canon) {
                Some(h) => (h.clone(), false),
                None if s.buckets.len() >= self.max_buckets => {
                    // No answer: Envoy keeps the listener's no_assignment_behavior for it
                    // (fail open or closed as the operator chose), and nothing is kept here.
                    self.metrics.over_bound();
                    over_bound(self.max_buckets);
                    continue;
                }
                None => {
                    let entries = bucket.bucket.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                    let h = match self.mapping.map(entries) {
                        Mapped::Check(action, key) => Held::Key(KeyId {
                            action: action.as_str().to_owned(),
                            key,
                        }),
                        Mapped::AllowAll => Held::Unmapped,
                        Mapped::DenyAll => Held::Refused,
                    };
                    s.buckets.insert(canon.clone(), h.clone());
                    (h, true)
                }
            };
            match held {
                Held::Unmapped => self.push(stream, bucket, Assignment::AllowAll),
                Held::Refused => self.push(stream, bucket, Assignment::DenyAll),
                Held::Key(id) => {
                    let seen = self.claimed(
                        app,
                        &id,
                        &(stream, canon.clone()),
                        (usage.num_requests_allowed, usage.num_requests_denied),
                        &mut allowances,
                    );
                    if new {
                        self.arrivals.push_back(Arrival {
                            stream,
                            canon,
                            bucket,
                            id,
                            seen,
                        });
                    } else {
                        self.report_share(app, (stream, canon), bucket, id, seen, now)
                            .await
                    }
                }
            }
        }
        self.flush();
        self.work_arrivals(app, now).await;
    }

    async fn report_share(
        &mut self,
        app: &App,
        sid: ShareId,
        bucket: BucketId,
        id: KeyId,
        seen: Seen,
        now: Instant,
    ) {
        let Some(rule) = rule_in_force(app, &id) else {
            if let Some(entry) = self.keys.get_mut(&id) {
                entry.shares.remove(&sid);
            }
            self.push(sid.0, bucket, Assignment::AllowAll);
            return;
        };
        let ttl = self.ttl;
        let peer = self.peer_of(sid.0);
        let entry = self
            .keys
            .entry(id.clone())
            .or_insert_with(|| KeyEntry::new(rule.clone()));
        entry.rule = rule.clone();
        let joined = !entry.shares.contains_key(&sid);
        let share = entry.shares.entry(sid.clone()).or_insert_with(|| Share {
            bucket: bucket.clone(),
            held: None,
            counted_tpf: 0,
            counted_until: now,
            expires: now + ttl,
            paid_nano: 0,
            used: 0,
            post_debited: 0,
            idle_reports: 0,
            demand: None,
            peer,
        });
        share.expires = now + ttl;
        // `seen` was capped when the report was read (`ledger/claims.rs`).
        share.used = share.used.saturating_add(seen.allowed);
        share.demand = Some(smooth(share.demand, seen.requests));
        share.idle_reports = if seen.idle {
            share.idle_reports.saturating_add(1)
        } else {
            0
        };
        let abandon = share.idle_reports >= ABANDON_AFTER_IDLE_REPORTS;
        let paid = u64::try_from(share.paid_nano / NANO).unwrap_or(u64::MAX);
        let excess = share
            .used
            .saturating_sub(paid)
            .saturating_sub(share.post_debited);
        if excess > 0 {
            match pay::post_debit(app, &rule, &id.key, excess).await {
                Ok(()) => {
                    share.post_debited += excess;
                    self.metrics.post_debited(excess);
                }
                Err(e) => {
                    tracing::warn!(action = %id.action, error = %e, "rlqs: a post-debit failed")
                }
            }
        }
        if abandon {
            self.abandon(&id, &sid, bucket);
            return;
        }
        if joined {
            // A window rule's whole bucket grows with its holders: the ceiling is synced for
            // the new count before anyone is lowered or granted.
            self.sync_if_unknown(app, &id, now).await;
            self.lower_to_targets(&id, now);
        }
        let Some(entry) = self.keys.get(&id) else {
            return;
        };
        match entry.shares.get(&sid).and_then(|s| s.held) {
            Some(held) => self.push(sid.0, bucket, Assignment::TokenBucket(held)),
            None => self.grant(app, &id, &sid, GrantKind::First, now).await,
        }
    }

    /// Forgets an idle bucket: its share goes (the key's other holders are raised on the next
    /// tick) and Envoy is told to drop it.
    fn abandon(&mut self, id: &KeyId, sid: &ShareId, bucket: BucketId) {
        if let Some(entry) = self.keys.get_mut(id) {
            entry.shares.remove(sid);
            if entry.shares.is_empty() {
                self.keys.remove(id);
            }
        }
        if let Some(s) = self.streams.get_mut(&sid.0) {
            s.buckets.remove(&sid.1);
        }
        self.push(sid.0, bucket, Assignment::Abandon);
    }

    /// A fresh bucket's share: its burst debited, its rate within what the others leave. With
    /// [`GrantKind::Refill`] the bucket Envoy holds is replaced by a full one (`DENY_ALL` then
    /// the token bucket, in one response: a plain replacement keeps the old fill fraction).
    async fn grant(&mut self, app: &App, id: &KeyId, sid: &ShareId, kind: GrantKind, now: Instant) {
        if !self.sync_if_unknown(app, id, now).await {
            return;
        }
        let Some(entry) = self.keys.get(id) else {
            return;
        };
        let Some(index) = entry.shares.keys().position(|k| k == sid) else {
            return;
        };
        let total = entry.total();
        let Some(target) = entry.targets().get(index).copied() else {
            return;
        };
        let room = total
            .tokens_per_fill
            .saturating_sub(entry.counted_except(sid));
        let rule = entry.rule.clone();
        let units = match pay::burst(app, &rule, &id.key, u64::from(target.max_tokens)).await {
            Ok(units) => units,
            Err(e) => {
                // No answer: Envoy keeps its no-assignment behaviour; retried next report.
                tracing::warn!(action = %id.action, error = %e, "rlqs: a burst could not be paid");
                return;
            }
        };
        let Some(share) = self.keys.get_mut(id).and_then(|e| e.shares.get_mut(sid)) else {
            return;
        };
        let bucket = share.bucket.clone();
        if units == 0 {
            share.held = None;
            self.push(sid.0, bucket, Assignment::DenyAll);
            return;
        }
        let granted = Shape {
            max_tokens: u32::try_from(units).unwrap_or(u32::MAX),
            tokens_per_fill: target.tokens_per_fill.min(room),
            fill_interval_s: target.fill_interval_s,
        };
        share.held = Some(granted);
        share.counted_tpf = share.counted_tpf.max(granted.tokens_per_fill);
        share.counted_until = share.counted_until.max(now);
        share.paid_nano += u128::from(units) * NANO;
        if kind == GrantKind::Refill {
            self.push(sid.0, bucket.clone(), Assignment::DenyAll);
        }
        self.push(sid.0, bucket, Assignment::TokenBucket(granted));
    }

    /// Lowers every share of `id` above its target (a holder joined, the rule shrank, demand
    /// moved to another holder by more than the slack) and pushes it; the old rate stays paid
    /// for until the lowering has surely landed.
    fn lower_to_targets(&mut self, id: &KeyId, now: Instant) {
        let tick = Duration::from_millis(TICK_MS);
        let mut pushes = Vec::new();
        let mut denies = Vec::new();
        if let Some(entry) = self.keys.get_mut(id) {
            let targets = entry.targets();
            let slack = slack(entry.total(), entry.held_rates());
            for ((sid, share), target) in entry.shares.iter_mut().zip(targets) {
                let Some(held) = share.held else { continue };
                if target.max_tokens == 0 {
                    // Its burst unit went to another holder's turn: nothing held, its rate
                    // still paid until the DENY_ALL has landed.
                    let open = self.streams.get(&sid.0).is_some_and(|s| s.open);
                    share.counted_until = if open { now + tick } else { share.expires };
                    if open {
                        share.held = None;
                        denies.push((sid.0, share.bucket.clone()));
                    }
                    continue;
                }
                if held.tokens_per_fill <= target.tokens_per_fill.saturating_add(slack)
                    && held.max_tokens <= target.max_tokens
                    && held.fill_interval_s == target.fill_interval_s
                {
                    continue;
                }
                let lowered = Shape {
                    max_tokens: held.max_tokens.min(target.max_tokens).max(1),
                    tokens_per_fill: held.tokens_per_fill.min(target.tokens_per_fill),
                    fill_interval_s: target.fill_interval_s,
                };
                lower(share, lowered, now, tick, &self.streams, sid.0);
                pushes.push((sid.0, share.bucket.clone(), lowered));
            }
        }
        self.metrics.rebalanced(
            &id.action,
            Rebalance::lowered,
            pushes.len().saturating_add(denies.len()),
        );
        for (stream, bucket, shape) in pushes {
            self.push(stream, bucket, Assignment::TokenBucket(shape));
        }
        for (stream, bucket) in denies {
            self.push(stream, bucket, Assignment::DenyAll);
        }
    }

    /// With more holders than burst units, moves the units on to the next holders with demand
    /// every [`ROTATE_EVERY_TICKS`] ticks while one of them has none.
    fn rotate(&mut self, id: &KeyId) {
        let Some(entry) = self.keys.get_mut(id) else {
            return;
        };
        let demands = entry.demands();
        if !starving(&entry.targets(), &demands) {
            entry.since_turn = 0;
            return;
        }
        entry.since_turn = entry.since_turn.saturating_add(1);
        if entry.since_turn >= ROTATE_EVERY_TICKS {
            entry.since_turn = 0;
            let units = usize::try_from(entry.total().max_tokens).unwrap_or(usize::MAX);
            entry.turn = entry.turn.wrapping_add(units.max(1));
        }
    }
}

/// Sets a share's lower token bucket, still paying its old rate for one tick (an open stream's
/// push lands well within it), or until its TTL if its stream is closed (the Envoy never hears).
fn lower(
    share: &mut Share,
    lowered: Shape,
    now: Instant,
    tick: Duration,
    streams: &HashMap<StreamId, StreamEntry>,
    stream: StreamId,
) {
    let open = streams.get(&stream).is_some_and(|s| s.open);
    share.counted_until = if open { now + tick } else { share.expires };
    if !open {
        // The Envoy cannot hear of it: its bucket stays as it was until its TTL.
        return;
    }
    share.held = Some(lowered);
}
