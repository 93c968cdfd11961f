//! One key's standing on every action (`GET /v1/keys`) and the keys denied most
//! (`GET /v1/top-denied`). Nothing here consumes anything: states are quantity-0 peeks.

use sluice_core::time::ceil_millis;
use sluice_core::wire::{
    ActionTopDenied, DeniedKey, DeniedMinute, KeyActionState, KeyView, TopDeniedBody,
    TOP_DENIED_KEYS, TOP_DENIED_SPAN_MS,
};
use sluice_core::{Decision, Nanos, Params, Rule};

use crate::store::{ActivityStore, BudgetStore, DecisionStore, HistoryStore, StoreError};

/// Nanoseconds until a request of quantity 1 would pass, from a quantity-0 peek; `None` if one
/// would pass now.
///
/// Exact for the meters (gcra, leaky_bucket, token_bucket: the peek's `reset_after` is the
/// funnel's level in drain time, and one request needs T of room) and for fixed_window (the
/// window's end). For sliding_log and sliding_window the peek does not say when the oldest
/// counted request stops counting, so this is the time until the key is fresh again: an upper
/// bound, never a wait shorter than the real one.
pub fn retry_after_one(params: Params, peek: &Decision) -> Option<Nanos> {
    match params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => {
            let wait = peek
                .reset_after
                .saturating_add(m.interval.max(1))
                .saturating_sub(m.tolerance());
            (wait > 0).then_some(wait)
        }
        Params::FixedWindow(_) | Params::SlidingLog(_) | Params::SlidingWindow(_) => {
            (peek.remaining == 0).then_some(peek.reset_after.max(1))
        }
    }
}

/// Where `key` stands under one rule, as of now.
async fn key_state<S>(
    store: &S,
    rule: &Rule,
    key: &str,
    now_ms: u64,
) -> Result<KeyActionState, StoreError>
where
    S: DecisionStore + ActivityStore + HistoryStore + BudgetStore + ?Sized,
{
    let keys = [key.to_owned()];
    let (peeks, last_seen_ms, denied, budget) = futures::future::try_join4(
        store.peek_many(rule, &keys),
        store.key_last_seen(rule.action(), key),
        store.key_denied(rule.action(), key, now_ms),
        store.budget(rule, key),
    )
    .await?;
    let mut denied_minutes: Vec<DeniedMinute> = denied
        .into_iter()
        .map(|(at_ms, denied)| DeniedMinute { at_ms, denied })
        .collect();
    denied_minutes.sort_by_key(|m| m.at_ms);
    let peek = peeks
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::Corrupt("a peek of one key answered none".into()))?;
    // The debt is the state's own: what commits carried above the capacity, still owed.
    let budget = sluice_core::wire::KeyBudget {
        debt: sluice_core::budget::debt(&rule.params(), &peek),
        ..budget
    };
    Ok(KeyActionState {
        action: rule.action().as_str().to_owned(),
        algorithm: rule.algorithm(),
        mode: rule.mode(),
        capacity: rule.capacity(),
        level: peek.level,
        remaining: peek.remaining,
        retry_after_ms: retry_after_one(rule.params(), &peek).map(ceil_millis),
        reset_after_ms: ceil_millis(peek.reset_after),
        last_seen_ms,
        overridden: false,
        denied_minutes,
        budget,
    })
}

/// `key` under every rule (sorted by action), read at `now_ms`.
pub async fn key_view<S>(
    store: &S,
    rules: &[Rule],
    key: &str,
    now_ms: u64,
) -> Result<KeyView, StoreError>
where
    S: DecisionStore + ActivityStore + HistoryStore + BudgetStore + ?Sized,
{
    let reads = rules
        .iter()
        .map(|r| key_state(store, r, key, now_ms))
        .collect();
    let mut actions = crate::fanout::per_rule(reads).await?;
    actions.sort_by(|a, b| a.action.cmp(&b.action));
    Ok(KeyView {
        key: key.to_owned(),
        at_ms: now_ms,
        actions,
    })
}

/// The keys denied most per action over the last 5 minutes at `now_ms`; actions without any
/// denial are left out.
pub async fn top_denied(
    store: &dyn HistoryStore,
    rules: &[Rule],
    now_ms: u64,
) -> Result<TopDeniedBody, StoreError> {
    let reads = rules.iter().map(|rule| async move {
        let keys = store
            .top_denied(rule.action(), now_ms, TOP_DENIED_KEYS)
            .await?;
        Ok::<_, StoreError>(ActionTopDenied {
            action: rule.action().as_str().to_owned(),
            keys: keys
                .into_iter()
                .take(TOP_DENIED_KEYS)
                .map(|(key, denied)| DeniedKey { key, denied })
                .collect(),
        })
    });
    let mut actions: Vec<ActionTopDenied> = crate::fanout::per_rule(reads.collect())
        .await?
        .into_iter()
        .filter(|a| !a.keys.is_empty())
        .collect();
    actions.sort_by(|a, b| a.action.cmp(&b.action));
    Ok(TopDeniedBody {
        at_ms: now_ms,
        span_ms: TOP_DENIED_SPAN_MS,
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;
    const B: Nanos = 1_700_000_040 * S;

    fn rule(json: &str) -> Rule {
        Rule::from_json_str(json).expect("valid rule")
    }

    /// Against core itself: for each algorithm, after some traffic, the computed wait is the
    /// real one (meters, fixed_window) or not shorter than it (sliding ones): a quantity-1
    /// request at `now + wait` passes, and (exact ones) one just before is refused.
    #[test]
    fn the_wait_matches_what_a_request_would_meet() {
        let rules = [
            r#"{"action":"a","algorithm":"gcra","capacity":3,"rate":{"count":3,"period":"3s"}}"#,
            r#"{"action":"a","algorithm":"leaky_bucket","capacity":3,"rate":{"count":3,"period":"3s"}}"#,
            r#"{"action":"a","algorithm":"token_bucket","capacity":3,"rate":{"count":3,"period":"3s"}}"#,
            r#"{"action":"a","algorithm":"fixed_window","capacity":3,"window":"3s"}"#,
            r#"{"action":"a","algorithm":"sliding_log","capacity":3,"window":"3s"}"#,
            r#"{"action":"a","algorithm":"sliding_window","capacity":3,"window":"3s"}"#,
        ];
        for json in rules {
            let params = rule(json).params();
            let exact = !matches!(params, Params::SlidingLog(_) | Params::SlidingWindow(_));
            for hits in 0..=4u64 {
                let mut state = sluice_core::State::default();
                for i in 0..hits {
                    state = params.decide(&state, B + i * S / 10, 1).1;
                }
                let now = B + S / 2;
                let (peek, _) = params.decide(&state, now, 0);
                let (real, _) = params.decide(&state, now, 1);
                match retry_after_one(params, &peek) {
                    None => assert!(real.allowed, "{json} after {hits}: none, but refused"),
                    Some(wait) => {
                        assert!(!real.allowed, "{json} after {hits}: {wait} ns, but allowed");
                        let (later, _) = params.decide(&state, now + wait, 1);
                        assert!(later.allowed, "{json} after {hits}: refused at +{wait}");
                        if exact {
                            assert_eq!(Some(wait), real.retry_after, "{json} after {hits}");
                        } else {
                            assert!(wait >= real.retry_after.unwrap_or(0), "{json}");
                        }
                    }
                }
            }
        }
    }
}
