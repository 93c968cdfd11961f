//! The ledger's side of the shares kept in the store ([`crate::store::rlqs`]): every tick this
//! replica writes, per key it holds, what its shares take of the rule, reads what the other
//! replicas take, and gets its **ceiling**: its holders' part of the rule within what the others
//! hold. The key's local split, grants and raises stay under that ceiling
//! (`KeyEntry::total`), so Σ bursts ≤ capacity and Σ rates ≤ the rule's rate across replicas.
//!
//! A record not paid for [`STALE_MS`] (its replica stopped, or restarted under a new id) is an
//! **orphan**: the sync that sees it first takes it over (one claimer: the store's step is
//! atomic), and this replica then pays its refill, in arrears, from one tick before its last
//! payment until its last share expires ([`crate::rlqs::shares::View::pay_adopted`]), counting it in its own record
//! meanwhile. The index sweep ([`Ledger::sweep_shares`]) finds orphans of keys this replica
//! does not hold.
//!
//! Store down: a failed sync keeps the last ceiling for [`UNKNOWN_AFTER`] ticks; after that the
//! other replicas are unknown, so the ceiling drops to what this replica already holds (no grant
//! or raise beyond it) until a sync succeeds again. A key never synced gets no grant (Envoy keeps
//! its no-assignment behaviour, as when a burst cannot be paid). A failed step marks the store
//! unreachable until the next tick's first step, so an outage costs one timeout per tick.

use std::sync::Arc;
use std::time::Instant;

use sluice_core::rlqs::shape::{shape, Shape};
use sluice_core::{Action, Rule};

use super::{KeyEntry, KeyId, Ledger};
use crate::rlqs::shares::{
    bounded, rate_on, store_failed, Adopted, STALE_MS, SWEEP_LIMIT, UNKNOWN_AFTER,
};
use crate::state::App;
use crate::store::rlqs::{IndexTouch, ShareKey, ShareRecord, ShareSync};

fn share_key(id: &KeyId) -> Option<ShareKey> {
    Some(ShareKey {
        action: Action::parse(&id.action).ok()?,
        key: id.key.clone(),
    })
}

fn key_id(k: &ShareKey) -> KeyId {
    KeyId {
        action: k.action.as_str().to_owned(),
        key: k.key.clone(),
    }
}

/// What the key's local shares take: holders, Σ bursts, Σ rates paid for (on `fill_s`), and the
/// time until the last one expires.
fn held(entry: Option<&KeyEntry>, fill_s: u32, now: Instant) -> (ShareRecord, u64) {
    let mut record = ShareRecord {
        fill_interval_s: fill_s,
        ..ShareRecord::default()
    };
    let mut last = 0u64;
    for share in entry.into_iter().flat_map(|e| e.shares.values()) {
        record.holders = record.holders.saturating_add(1);
        let paid = Shape {
            max_tokens: share.held.map_or(0, |h| h.max_tokens),
            tokens_per_fill: share.counted_tpf,
            fill_interval_s: share.held.map_or(fill_s, |h| h.fill_interval_s),
        };
        record.burst = record.burst.saturating_add(paid.max_tokens);
        record.tokens_per_fill = record.tokens_per_fill.saturating_add(rate_on(paid, fill_s));
        let left = share.expires.saturating_duration_since(now).as_millis();
        last = last.max(u64::try_from(left).unwrap_or(u64::MAX));
    }
    (record, last)
}

impl Ledger {
    /// Keys synced with the store that this replica holds no share of (orphans it pays, or a
    /// record to delete): the tick syncs them beside its own keys.
    pub(super) fn synced_elsewhere(&self) -> Vec<KeyId> {
        self.registry
            .views
            .keys()
            .map(key_id)
            .filter(|id| !self.keys.contains_key(id))
            .collect()
    }

    /// Once per tick: marks the keys this replica holds in the store's index, and syncs up to
    /// [`SWEEP_LIMIT`] keys nobody synced lately, taking over their orphans.
    pub(super) async fn sweep_shares(&mut self, app: &App, now: Instant) {
        let mut held: Vec<ShareKey> = self.keys.keys().filter_map(share_key).collect();
        held.extend(self.registry.adopting().cloned());
        let empty = std::mem::take(&mut self.registry.empty);
        let touch = IndexTouch {
            held: &held,
            empty: &empty,
            stale_ms: STALE_MS,
            limit: SWEEP_LIMIT,
        };
        let stale = match bounded(app, app.store.touch_share_keys(&touch)).await {
            Ok(stale) => stale,
            Err(e) => {
                store_failed("the shares index could not be read", &e);
                self.registry.empty.extend(empty);
                self.registry.unreachable = true;
                return;
            }
        };
        self.registry.unreachable = false;
        for k in stale.keys {
            let id = key_id(&k);
            if self.keys.contains_key(&id) || self.registry.views.contains_key(&k) {
                continue;
            }
            match super::rule_in_force(app, &id) {
                Some(rule) => self.sync_shares(app, &id, &rule, now).await,
                None => self.registry.empty.push(k),
            }
        }
    }

    /// Syncs this replica's record of `id` (see the module doc): sets the key's ceiling, takes
    /// over orphans and pays the refill of those it holds.
    pub(super) async fn sync_shares(
        &mut self,
        app: &App,
        id: &KeyId,
        rule: &Arc<Rule>,
        now: Instant,
    ) {
        let Some(sk) = share_key(id) else {
            return;
        };
        if !self.registry.views.contains_key(&sk) && !self.registry.unreachable {
            // Indexed before its first record is written: a record nobody can find would
            // never be taken over.
            let touch = IndexTouch {
                held: std::slice::from_ref(&sk),
                empty: &[],
                stale_ms: STALE_MS,
                limit: 0,
            };
            if let Err(e) = bounded(app, app.store.touch_share_keys(&touch)).await {
                store_failed("the shares index could not be written", &e);
            }
        }
        // The rule's bucket for every holder on every replica (the others as of the last sync):
        // a window rule's burst grows with the holders (`shape_for`).
        let whole = match self.keys.get_mut(id) {
            Some(entry) => {
                entry.rule = rule.clone();
                entry.whole()
            }
            None => shape(&rule.params()),
        };
        let fill_s = whole.fill_interval_s;
        let (mut mine, mut expires_in) = held(self.keys.get(id), fill_s, now);
        let view = self.registry.views.entry(sk.clone()).or_default();
        let (b, n, last) = view.adopted_total(fill_s);
        mine.burst = mine.burst.saturating_add(b);
        mine.tokens_per_fill = mine.tokens_per_fill.saturating_add(n);
        if let Some(store_now) = view.store_now(now) {
            expires_in = expires_in.max(last.saturating_sub(store_now));
        }
        let sync = ShareSync {
            instance: &self.registry.instance,
            rule: whole,
            mine,
            expires_in_ms: expires_in,
            stale_ms: STALE_MS,
        };
        // A store that failed this tick is not asked again until the next one: an outage costs
        // one timeout per tick, not one per key.
        let result = if self.registry.unreachable {
            Err(None)
        } else {
            bounded(app, app.store.sync_shares(&sk, &sync))
                .await
                .map_err(Some)
        };
        let view = self.registry.views.entry(sk.clone()).or_default();
        let ceiling = match result {
            Ok(got) => {
                view.failures = 0;
                view.synced = Some((got.now_ms, now));
                self.metrics.taken_over(got.orphans.len() as u64);
                for o in got.orphans {
                    tracing::info!(action = %id.action, from = %o.instance,
                        tokens_per_fill = o.record.tokens_per_fill,
                        "rlqs: took over the shares of a replica that stopped paying");
                    view.adopted.push(Adopted::new(o));
                }
                let paid = view.pay_adopted(app, rule, &id.key, got.now_ms).await;
                self.metrics.taken_over_units(paid);
                let (b, n, _) = view.adopted_total(fill_s);
                if let Some(entry) = self.keys.get_mut(id) {
                    entry.others_holders = got.others.holders;
                }
                if view.adopted.is_empty() && !self.keys.contains_key(id) {
                    // Nothing held here any more (the sync deleted this replica's record).
                    self.registry.views.remove(&sk);
                    if got.live == 0 {
                        self.registry.empty.push(sk);
                    }
                }
                Shape {
                    max_tokens: got.ceiling.max_tokens.saturating_sub(b),
                    tokens_per_fill: got.ceiling.tokens_per_fill.saturating_sub(n),
                    fill_interval_s: fill_s,
                }
            }
            Err(e) => {
                view.failures = view.failures.saturating_add(1);
                if let Some(e) = e {
                    store_failed("a key's shares could not be synced with the store", &e);
                    self.registry.unreachable = true;
                }
                match self.keys.get(id).and_then(|e| e.ceiling) {
                    // Never synced: still unknown (no grant: `sync_if_unknown`).
                    None => return,
                    Some(known) if view.failures <= UNKNOWN_AFTER => known,
                    // Synced too long ago: the other replicas are unknown; hold no more than
                    // is held already.
                    Some(known) => {
                        let (local, _) = held(self.keys.get(id), fill_s, now);
                        Shape {
                            max_tokens: known.max_tokens.min(local.burst),
                            tokens_per_fill: known.tokens_per_fill.min(local.tokens_per_fill),
                            fill_interval_s: fill_s,
                        }
                    }
                }
            }
        };
        if let Some(entry) = self.keys.get_mut(id) {
            entry.ceiling = Some(ceiling);
            entry.synced_whole = Some(whole);
        }
    }

    /// Before a key's first grant on this replica, or when a holder joining changed its whole
    /// bucket (a window rule's burst grows with the holders): its ceiling from the store. False
    /// while it is unknown (the store failed): no grant then, so Envoy keeps its no-assignment
    /// behaviour (as when a burst cannot be paid) and the tick retries.
    pub(super) async fn sync_if_unknown(&mut self, app: &App, id: &KeyId, now: Instant) -> bool {
        let Some(rule) = self
            .keys
            .get(id)
            .filter(|e| e.ceiling.is_none() || e.synced_whole != Some(e.whole()))
            .map(|e| e.rule.clone())
        else {
            return true;
        };
        self.sync_shares(app, id, &rule, now).await;
        self.keys.get(id).is_some_and(|e| e.ceiling.is_some())
    }

    /// Forgets the view of a key whose rule is gone (its records expire in the store).
    pub(super) fn forget_shares(&mut self, id: &KeyId) {
        let Some(sk) = share_key(id) else {
            return;
        };
        if self.registry.views.remove(&sk).is_some() {
            self.registry.empty.push(sk);
        }
    }
}
