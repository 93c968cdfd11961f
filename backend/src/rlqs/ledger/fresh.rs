//! Fresh tokens for buckets Envoy already holds: a reset's refill, and a burst raised back
//! within the rule. Envoy keeps a replaced token bucket's fill fraction (docs/rlqs-design.md),
//! so neither happens by resending a bigger bucket alone, and both are paid before they are sent.

use std::time::Instant;

use sluice_core::rlqs::shape::Shape;

use super::{Assignment, GrantKind, KeyId, Ledger, Rebalance, ShareId, NANO};
use crate::resets::KeyReset;
use crate::rlqs::pay;
use crate::state::App;

impl Ledger {
    /// A key was reset on this replica: every open stream holding it gets a fresh, full share
    /// (its burst debited from the now empty state), pushed at once.
    pub async fn reset(&mut self, app: &App, reset: KeyReset, now: Instant) {
        let id = KeyId {
            action: reset.action,
            key: reset.key,
        };
        let Some(entry) = self.keys.get(&id) else {
            return;
        };
        let open: Vec<ShareId> = entry
            .shares
            .keys()
            .filter(|(stream, _)| self.streams.get(stream).is_some_and(|s| s.open))
            .cloned()
            .collect();
        for sid in open {
            self.grant(app, &id, &sid, GrantKind::Refill, now).await;
        }
        self.flush();
    }

    /// Raises the bursts of `id`'s open shares below their target (a grant from a key with
    /// little left, or a rule or override grown) by what the store pays for now. Envoy's
    /// replacement keeps the fill fraction, so it adds at most the difference: that is what is
    /// debited.
    pub(super) async fn raise_bursts(&mut self, app: &App, id: &KeyId, now: Instant) {
        let Some(entry) = self.keys.get(id) else {
            return;
        };
        let rule = entry.rule.clone();
        let short: Vec<(ShareId, u64)> = entry
            .shares
            .iter()
            .zip(entry.targets())
            .filter(|(((stream, _), share), _)| {
                share.expires > now && self.streams.get(stream).is_some_and(|s| s.open)
            })
            .filter_map(|((sid, share), target)| {
                let held = share.held?;
                (held.fill_interval_s == target.fill_interval_s
                    && held.max_tokens < target.max_tokens)
                    .then(|| (sid.clone(), u64::from(target.max_tokens - held.max_tokens)))
            })
            .collect();
        for (sid, want) in short {
            let units = match pay::refill(app, &rule, &id.key, want).await {
                Ok(units) => units,
                Err(e) => {
                    tracing::warn!(action = %id.action, error = %e, "rlqs: a burst raise could not be paid");
                    return;
                }
            };
            if units == 0 {
                return;
            }
            let Some(share) = self.keys.get_mut(id).and_then(|e| e.shares.get_mut(&sid)) else {
                continue;
            };
            let Some(held) = share.held else {
                continue;
            };
            let raised = Shape {
                max_tokens: held
                    .max_tokens
                    .saturating_add(u32::try_from(units).unwrap_or(u32::MAX)),
                ..held
            };
            share.held = Some(raised);
            share.paid_nano += u128::from(units) * NANO;
            let bucket = share.bucket.clone();
            self.metrics.rebalanced(&id.action, Rebalance::raised, 1);
            self.push(sid.0, bucket, Assignment::TokenBucket(raised));
        }
    }
}
