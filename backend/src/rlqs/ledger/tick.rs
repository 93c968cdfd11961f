//! The ledger's payment tick ([`Ledger::tick`], every [`TICK_MS`]): expired shares go, rule
//! changes are applied, every key's refill is paid, and shares are raised back within the rule.

use std::time::{Duration, Instant};

use sluice_core::rlqs::shape::Shape;
use sluice_core::rlqs::TICK_MS;

use super::{lower, rule_in_force, Assignment, GrantKind, KeyId, Ledger, Rebalance, ShareId, NANO};
use crate::rlqs::pay;
use crate::state::App;

impl Ledger {
    /// One payment tick: expired shares go, rule changes are applied, every key's refill is
    /// paid (owing more than a tick halves its rates), shares are raised back within the rule
    /// and `DENY_ALL` buckets get a burst when the key has one.
    pub async fn tick(&mut self, app: &App, now: Instant) {
        let started = Instant::now();
        let elapsed = self
            .last_tick
            .map(|t| now.saturating_duration_since(t))
            .unwrap_or_default();
        self.last_tick = Some(now);
        let elapsed_ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sweep_shares(app, now).await;
        let mut ids: Vec<KeyId> = self.keys.keys().cloned().collect();
        ids.extend(self.synced_elsewhere());
        for id in ids {
            self.expire(&id, now);
            let Some(rule) = rule_in_force(app, &id) else {
                self.release(&id);
                self.forget_shares(&id);
                continue;
            };
            if let Some(entry) = self.keys.get_mut(&id) {
                entry.rule = rule.clone();
            }
            self.sync_shares(app, &id, &rule, now).await;
            self.rotate(&id);
            self.lower_to_targets(&id, now);
            let starved = self.pay_refill(app, &id, elapsed_ns, now).await;
            if !starved {
                self.raise(&id, now);
                // A holder whose target has no burst unit (another's turn) stays DENY_ALL.
                let denied: Vec<ShareId> = self
                    .keys
                    .get(&id)
                    .map(|e| {
                        e.shares
                            .iter()
                            .zip(e.targets())
                            .filter(|(_, target)| target.max_tokens > 0)
                            .map(|(share, _)| share)
                            .filter(|(_, s)| s.held.is_none() && s.expires > now)
                            .filter(|((stream, _), _)| {
                                self.streams.get(stream).is_some_and(|s| s.open)
                            })
                            .map(|(k, _)| k.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                for sid in denied {
                    self.grant(app, &id, &sid, GrantKind::First, now).await;
                }
                self.raise_bursts(app, &id, now).await;
            }
        }
        self.flush();
        self.metrics.tick_took(started.elapsed());
        self.metrics
            .set_assignment_age(self.oldest_assignment(now), self.ttl);
        self.metrics.set_arrivals(self.arrivals.len());
    }

    /// The age of the least recently renewed assignment an open stream's Envoy holds (each
    /// share's expiry is its last assignment plus the TTL).
    fn oldest_assignment(&self, now: Instant) -> Duration {
        self.keys
            .values()
            .flat_map(|e| e.shares.iter())
            .filter(|((stream, _), s)| {
                s.held.is_some() && self.streams.get(stream).is_some_and(|st| st.open)
            })
            .map(|(_, s)| {
                self.ttl
                    .saturating_sub(s.expires.saturating_duration_since(now))
            })
            .max()
            .unwrap_or_default()
    }

    /// Drops the shares of `id` whose TTL ended (and closed streams left with no bucket).
    fn expire(&mut self, id: &KeyId, now: Instant) {
        let Some(entry) = self.keys.get_mut(id) else {
            return;
        };
        let gone: Vec<ShareId> = entry
            .shares
            .iter()
            .filter(|(_, s)| s.expires <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for sid in &gone {
            entry.shares.remove(sid);
            if let Some(s) = self.streams.get_mut(&sid.0).filter(|s| !s.open) {
                s.buckets.remove(&sid.1);
                if s.buckets.is_empty() {
                    self.streams.remove(&sid.0);
                }
            }
        }
        if entry.shares.is_empty() {
            self.keys.remove(id);
        }
    }

    /// The key's rule is gone or in shadow: its buckets admit everything.
    fn release(&mut self, id: &KeyId) {
        let Some(entry) = self.keys.remove(id) else {
            return;
        };
        for ((stream, _), share) in entry.shares {
            self.push(stream, share.bucket, Assignment::AllowAll);
        }
    }

    /// Pays the refill the key's shares earned over `elapsed_ns`; true when the key owes more
    /// than one tick of it (its rates were then halved).
    async fn pay_refill(&mut self, app: &App, id: &KeyId, elapsed_ns: u64, now: Instant) -> bool {
        let Some(entry) = self.keys.get_mut(id) else {
            return false;
        };
        let fill = entry.total().fill_interval_s;
        let mut per_tick: u128 = 0;
        for share in entry.shares.values_mut() {
            if now >= share.counted_until {
                share.counted_tpf = share.held.map_or(0, |h| h.tokens_per_fill);
            }
            let counted = Shape {
                max_tokens: 0,
                tokens_per_fill: share.counted_tpf,
                fill_interval_s: share.held.map_or(fill, |h| h.fill_interval_s),
            };
            let earned = counted.refill_nano_units(elapsed_ns);
            share.paid_nano += earned;
            entry.owed_nano += earned;
            per_tick += counted.refill_nano_units(TICK_MS * 1_000_000);
        }
        let want = u64::try_from(entry.owed_nano / NANO).unwrap_or(u64::MAX);
        let rule = entry.rule.clone();
        let paid = match pay::refill(app, &rule, &id.key, want).await {
            Ok(paid) => paid,
            Err(e) => {
                tracing::warn!(action = %id.action, error = %e, "rlqs: a refill could not be paid");
                0
            }
        };
        let Some(entry) = self.keys.get_mut(id) else {
            return false;
        };
        entry.owed_nano = entry.owed_nano.saturating_sub(u128::from(paid) * NANO);
        if entry.owed_nano <= per_tick + NANO {
            return false;
        }
        self.metrics.unpaid(want.saturating_sub(paid));
        let tick = Duration::from_millis(TICK_MS);
        let mut pushes = Vec::new();
        for (sid, share) in entry.shares.iter_mut() {
            let Some(held) = share.held.filter(|h| h.tokens_per_fill > 0) else {
                continue;
            };
            let halved = Shape {
                tokens_per_fill: held.tokens_per_fill / 2,
                ..held
            };
            lower(share, halved, now, tick, &self.streams, sid.0);
            pushes.push((sid.0, share.bucket.clone(), halved));
        }
        self.metrics
            .rebalanced(&id.action, Rebalance::halved, pushes.len());
        for (stream, bucket, shape) in pushes {
            self.push(stream, bucket, Assignment::TokenBucket(shape));
        }
        true
    }

    /// Raises the rates of shares below their target while the rates paid for stay within the
    /// rule's (a lowering elsewhere still in flight keeps the room closed).
    fn raise(&mut self, id: &KeyId, now: Instant) {
        let mut pushes = Vec::new();
        if let Some(entry) = self.keys.get_mut(id) {
            let total = entry.total().tokens_per_fill;
            let targets = entry.targets();
            let mut counted: u32 = entry
                .shares
                .values()
                .map(|s| s.counted_tpf)
                .fold(0, u32::saturating_add);
            for ((sid, share), target) in entry.shares.iter_mut().zip(targets) {
                let Some(held) = share.held else { continue };
                let open = self.streams.get(&sid.0).is_some_and(|s| s.open);
                if !open || held.tokens_per_fill >= target.tokens_per_fill {
                    continue;
                }
                let room = total.saturating_sub(counted);
                let add = (target.tokens_per_fill - held.tokens_per_fill).min(room);
                if add == 0 {
                    continue;
                }
                let raised = Shape {
                    tokens_per_fill: held.tokens_per_fill + add,
                    ..held
                };
                counted = counted
                    .saturating_add(raised.tokens_per_fill.saturating_sub(share.counted_tpf));
                share.counted_tpf = share.counted_tpf.max(raised.tokens_per_fill);
                share.counted_until = share.counted_until.max(now);
                share.held = Some(raised);
                pushes.push((sid.0, share.bucket.clone(), raised));
            }
        }
        self.metrics
            .rebalanced(&id.action, Rebalance::raised, pushes.len());
        for (stream, bucket, shape) in pushes {
            self.push(stream, bucket, Assignment::TokenBucket(shape));
        }
    }
}
