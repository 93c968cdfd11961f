//! The store steps that pay for shares, each an ordinary decision or commit through the paths
//! every other way in uses ([`crate::decide`]), so metrics, activity and debt mean the same.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sluice_core::commit::Commit;
use sluice_core::lease::grant_units;
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::Rule;

use crate::deadline::DecideError;
use crate::decide::{decide, reservation::commit};
use crate::state::App;

/// Debits up to `want` units of `key` for a fresh bucket's burst: all of them if the key has
/// them; else what a lease would be granted from what is left ([`grant_units`]: at most half);
/// 0 when that is nothing. Returns the units debited.
pub async fn burst(app: &App, rule: &Arc<Rule>, key: &str, want: u64) -> Result<u64, DecideError> {
    all_or_less(app, rule, key, want, |left| grant_units(want, left)).await
}

/// Debits up to `want` units of refill: all if the key has them, else what is left. Returns
/// the units debited.
pub async fn refill(app: &App, rule: &Arc<Rule>, key: &str, want: u64) -> Result<u64, DecideError> {
    all_or_less(app, rule, key, want, |left| left.min(want)).await
}

/// What is left is read first (a peek: no decision recorded), then one decision of `want`, or
/// of `less(left)` when fewer are left (nothing when that is 0). So a tick that finds the key a
/// little short (its refill and the store's clock a few milliseconds apart) records one allowed
/// decision of what was paid, not a denial beside it on every tick. Should another way in take
/// units between the peek and the decision, the decision is denied, and one more of
/// `less(remaining)` follows. Each debit is an ordinary decision ([`decide`]). Returns the units
/// debited.
async fn all_or_less(
    app: &App,
    rule: &Arc<Rule>,
    key: &str,
    want: u64,
    less: impl Fn(u64) -> u64,
) -> Result<u64, DecideError> {
    if want == 0 {
        return Ok(0);
    }
    let left = app
        .store_call(app.store.throttle(rule, key, 0))
        .await?
        .remaining;
    let ask = if left >= want { want } else { less(left) };
    if ask == 0 {
        return Ok(0);
    }
    let first = decide(app, rule, key, ask, None, Instant::now()).await?;
    if first.allowed {
        return Ok(ask);
    }
    let less = less(first.remaining).min(ask);
    if less == 0 {
        return Ok(0);
    }
    let second = decide(app, rule, key, less, None, Instant::now()).await?;
    Ok(if second.allowed { less } else { 0 })
}

static POST_DEBITS: AtomicU64 = AtomicU64::new(0);

/// Debits `units` Envoy already admitted beyond what was paid, never denied (a commit of
/// `actual > reserved`: what does not fit is carried as debt, [`sluice_core::commit`]).
pub async fn post_debit(
    app: &App,
    rule: &Arc<Rule>,
    key: &str,
    units: u64,
) -> Result<(), DecideError> {
    let now_ms = crate::clock::now_ms();
    let seq = POST_DEBITS.fetch_add(1, Ordering::Relaxed);
    let id = format!("rlqs-{}-{now_ms}-{seq}", std::process::id());
    let of = Commit {
        reserved: 0,
        actual: units,
        reserved_at: now_ms.saturating_mul(NANOS_PER_MILLI),
    };
    commit(app, rule, key, &id, of, None).await?;
    Ok(())
}
