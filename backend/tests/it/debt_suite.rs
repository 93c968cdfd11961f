//! The cost-budget debt case of the storage conformance suite, on the memory store and Redis
//! (conformance.rs) and a Redis Cluster (`store_suite::whole_suite`): a commit's debit that does
//! not fit is carried, so after a run whose commits overshot, the key's standing (the key view's
//! `remaining` and `budget.debt`, read from a peek as `history::view` reads them) and the next
//! decisions see exactly the budget less what was used, and nothing is left until the limit has
//! paid the debt back. Every commit's answer is also core's on the state core reached (the Lua
//! twin held to `sluice_core::commit`).

use sluice_backend::store::{ManualClock, Store};
use sluice_core::budget::debt;
use sluice_core::commit::{commit, Commit, Committed};
use sluice_core::{Nanos, Rule, State};

use crate::store_suite::{rule, ALGORITHMS, B};

const MS: u64 = 1_000_000;

/// The key's (remaining, debt) at `at`, as the key view reads them.
async fn standing(store: &dyn Store, clock: &ManualClock, r: &Rule, at: Nanos) -> (u64, u64) {
    clock.set(at);
    let peeks = store.peek_many(r, &["k".to_owned()]).await.expect("peek");
    (peeks[0].remaining, debt(&r.params(), &peeks[0]))
}

/// Whether a request of `q` on the key is allowed at `at` (a denial writes nothing).
async fn admits(store: &dyn Store, clock: &ManualClock, r: &Rule, q: u64, at: Nanos) -> bool {
    clock.set(at);
    store.throttle(r, "k", q).await.expect("throttle").allowed
}

/// Commits `c` under `id` at `at`, checks the answer is core's on `state`, and moves `state` on.
async fn settle(
    store: &dyn Store,
    clock: &ManualClock,
    r: &Rule,
    id: &str,
    c: Commit,
    at: Nanos,
    state: &mut State,
) -> Committed {
    let (want, next) = commit(&r.params(), state, at, c);
    clock.set(at);
    if let Some(next) = next {
        *state = next;
    }
    // As the decision that reserved would have: a commit refunds at most what was recorded.
    let held = store.record_reservation(r, "k", id, c.reserved).await;
    assert!(held.expect("record"), "{id} ({})", store.kind());
    let got = store.commit(r, "k", id, c).await.expect("commit");
    assert!(!got.duplicate, "{id} ({})", store.kind());
    assert_eq!(
        got.committed,
        want,
        "{id} ({}): the store is core's",
        store.kind()
    );
    got.committed
}

/// The issue's run, scaled by 1/10: a budget of 1,000 units, 20 reservations of 50 fill it, four
/// commits come first with 89 units beyond their reservations (none fits: the budget is full),
/// then 16 commits of 30 give 320 back. 769 units used: exactly 231 are left (dropping the 89 as
/// overshoot used to leave 320). Then a reservation of those 231 uses 300: 69 owed, nothing left
/// until the limit has paid them back (a meter after 69 units' drain, a window at its end).
pub async fn budget_debt(store: &dyn Store, clock: &ManualClock) {
    for algorithm in ALGORITHMS {
        let meter = matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket");
        let limit = if meter {
            r#""rate":{"count":1000,"period":"60s"}"#
        } else {
            r#""window":"60s""#
        };
        let r = rule(&format!(
            r#"{{"action":"debt-{algorithm}","algorithm":"{algorithm}","capacity":1000,{limit}}}"#
        ));
        let params = r.params();
        let name = format!("{algorithm} ({})", store.kind());
        // 1.5 s into a minute (B is aligned to the minute): one 60 s window holds the run.
        let t = B + 1_500 * MS;
        let mut state = State::Fresh;
        for _ in 0..20 {
            assert!(admits(store, clock, &r, 50, t).await, "{name}");
            state = params.decide(&state, t, 50).1;
        }
        assert_eq!(standing(store, clock, &r, t).await, (0, 0), "{name}: full");
        let actuals = [80u64, 75, 70, 64].into_iter().chain([30; 16]);
        let mut used = 0;
        let mut overshoot = 0;
        for (i, actual) in actuals.enumerate() {
            let c = Commit {
                reserved: 50,
                actual,
                reserved_at: t,
            };
            let done = settle(store, clock, &r, &format!("w1-{i}"), c, t, &mut state).await;
            used += actual;
            overshoot += done.overshoot;
        }
        assert_eq!((used, overshoot), (769, 89), "{name}");
        assert_eq!(
            standing(store, clock, &r, t).await,
            (231, 0),
            "{name}: budget − used"
        );
        // The next decisions see the same: 232 refused, 231 admitted, then nothing is left.
        assert!(!admits(store, clock, &r, 232, t).await, "{name}");
        assert!(admits(store, clock, &r, 231, t).await, "{name}");
        state = params.decide(&state, t, 231).1;
        assert_eq!(standing(store, clock, &r, t).await, (0, 0), "{name}");
        // That reservation uses 300: 69 beyond the budget, carried as debt.
        let c = Commit {
            reserved: 231,
            actual: 300,
            reserved_at: t,
        };
        let done = settle(store, clock, &r, "w2", c, t, &mut state).await;
        assert_eq!(
            (done.debited, done.overshoot, done.level),
            (69, 69, 1069.0),
            "{name}"
        );
        assert_eq!(
            standing(store, clock, &r, t).await,
            (0, 69),
            "{name}: in debt"
        );
        assert!(
            !admits(store, clock, &r, 1, t).await,
            "{name}: nothing left"
        );
        // A retry changes nothing; the budget record sums the overshoot.
        clock.set(t);
        let again = store.commit(&r, "k", "w2", c).await.expect("retry");
        assert!(again.duplicate, "{name}");
        assert_eq!(
            standing(store, clock, &r, t).await,
            (0, 69),
            "{name}: after a retry"
        );
        clock.set(t);
        let figures = store.budget(&r, "k").await.expect("budget");
        assert_eq!((figures.overshoot, figures.debited), (158, 158), "{name}");
        // Paid back.
        if meter {
            // 60 ms per unit: 69 units drain in 4,140 ms; one more unit's drain for a request.
            let paid = t + 4_140 * MS;
            assert_eq!(
                standing(store, clock, &r, paid - MS).await,
                (0, 1),
                "{name}"
            );
            assert_eq!(standing(store, clock, &r, paid).await, (0, 0), "{name}");
            assert!(!admits(store, clock, &r, 1, paid).await, "{name}");
            assert_eq!(
                standing(store, clock, &r, paid + 60 * MS).await,
                (1, 0),
                "{name}"
            );
            assert!(admits(store, clock, &r, 1, paid + 60 * MS).await, "{name}");
        } else {
            let minute = B + 60_000 * MS;
            assert_eq!(
                standing(store, clock, &r, minute - MS).await,
                (0, 69),
                "{name}: owed until the window ends"
            );
            let (at, want) = match algorithm {
                // The next window starts from 0; a log's entries (all at t) expire together.
                "fixed_window" => (minute, (1000, 0)),
                "sliding_log" => (t + 60_000 * MS, (1000, 0)),
                // Half the next window: 1,069 × 1/2 still weighs (534.5, counted as 535).
                _ => (minute + 30_000 * MS, (465, 0)),
            };
            assert_eq!(
                standing(store, clock, &r, at).await,
                want,
                "{name}: paid back"
            );
            assert!(admits(store, clock, &r, want.0, at).await, "{name}");
            assert!(!admits(store, clock, &r, 1, at).await, "{name}");
        }
    }
}
