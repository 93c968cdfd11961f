//! Reads that go to the store once per rule (the dashboard's levels, history, key view and top
//! denied), run a bounded number at a time.
//!
//! With thousands of rules (an envoyproxy/ratelimit configuration directory loads one per
//! descriptor) running them all at once put 10,000 commands in flight on Redis: past
//! `--max-in-flight` (1024) every other store call failed fast with `overloaded`, decisions, the
//! rules refresh and the activity flush included, and the views answered 503. Here at most
//! [`PER_RULE_READS`] of one view's reads are in flight; the answers keep the rules' order.
//!
//! The views of what is active (`?scope=active`, top denied, the SSE levels) read only the
//! actions in the store's index of touched actions ([`crate::touched_view`]); only `?scope=all` reads
//! every rule.

use std::future::Future;

use futures::{StreamExt, TryStreamExt};

/// Most store reads of one per-rule view in flight at once: far below `--max-in-flight`, so
/// decisions always find room. At 64 (four commands each), a `?scope=all` key view of 10,000
/// rules on Redis queued commands long enough that other calls passed the 100 ms store timeout
/// (the rules refresh among them); at 16 none did in the same run.
pub const PER_RULE_READS: usize = 16;

/// Runs the reads (futures do nothing until polled: collecting them starts none), at most
/// [`PER_RULE_READS`] at a time; the results in the reads' order, or the first error. A `Vec`,
/// not an iterator: a stream over a closure's futures is not `Send` in a spawned task (rustc's
/// higher-ranked lifetime limits), a stream over a `Vec` is.
pub async fn per_rule<T, E, Fut>(reads: Vec<Fut>) -> Result<Vec<T>, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    futures::stream::iter(reads)
        .buffered(PER_RULE_READS)
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn at_most_the_bound_run_at_once_and_the_order_is_kept() {
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let reads = (0..1000)
            .map(|i| {
                let (running, most) = (&running, &most);
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(i * 2)
                }
            })
            .collect();
        let out: Result<Vec<usize>, ()> = per_rule(reads).await;
        let out = out.unwrap();
        assert_eq!(out.len(), 1000);
        assert!(out.iter().enumerate().all(|(i, v)| *v == i * 2));
        let most = most.load(Ordering::SeqCst);
        assert!(most > 1 && most <= PER_RULE_READS, "{most} at once");
        let reads = (0..10)
            .map(|i| async move {
                if i == 3 {
                    Err("no")
                } else {
                    Ok(i)
                }
            })
            .collect();
        let failed: Result<Vec<usize>, &str> = per_rule(reads).await;
        assert_eq!(failed, Err("no"));
    }
}
