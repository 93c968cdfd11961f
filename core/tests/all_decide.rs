//! All-or-nothing checks (several limits on one request) ([`decide_all`]): a table (three limits, the third denies) and
//! properties on random histories of random check sets:
//! - allowed: every enforced check allowed, and the states afterwards are exactly those of
//!   deciding each check in order with [`Params::decide_change`];
//! - denied at j: check j is the first enforced denial of that same sequence, no state changes,
//!   and every other check's decision is a peek of the unchanged state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::json;
use sluice_core::all::{decide_all, Check, Part};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::{Algorithm, Params, Rule, State};

const MS: u64 = NANOS_PER_MILLI;
const T0: u64 = 1_704_067_200_000 * MS;

fn params(algorithm: &str, capacity: u64) -> Params {
    let body = match algorithm {
        "fixed_window" | "sliding_log" | "sliding_window" => {
            json!({"action": "a", "algorithm": algorithm, "capacity": capacity, "window": "1s"})
        }
        _ => {
            json!({"action": "a", "algorithm": algorithm, "rate": {"count": capacity, "period": "1s"}, "capacity": capacity})
        }
    };
    Rule::from_json(&body).expect("valid rule").params()
}

/// Every algorithm's JSON name, from core's list.
fn algorithms() -> [&'static str; 6] {
    Algorithm::ALL.map(Algorithm::name)
}

#[test]
fn the_third_limit_denying_leaves_the_first_two_untouched() {
    for algorithm in algorithms() {
        let p = params(algorithm, 5);
        let tight = params(algorithm, 2);
        let checks = [
            Check {
                params: p,
                enforce: true,
                quantity: 1,
                slot: 0,
                part: Part::AllOrNothing,
            },
            Check {
                params: p,
                enforce: true,
                quantity: 1,
                slot: 1,
                part: Part::AllOrNothing,
            },
            Check {
                params: tight,
                enforce: true,
                quantity: 1,
                slot: 2,
                part: Part::AllOrNothing,
            },
        ];
        let mut states = vec![State::Fresh, State::Fresh, State::Fresh];
        // Two requests pass: each limit has taken 2.
        for _ in 0..2 {
            let d = decide_all(&checks, &states, T0);
            assert!(d.allowed(), "{algorithm}");
            for (slot, change) in d.changes.into_iter().enumerate() {
                states[slot] = change.expect("an admission changes every state");
            }
        }
        let before = states.clone();
        let d = decide_all(&checks, &states, T0);
        assert_eq!(d.denied, Some(2), "{algorithm}");
        assert!(d.changes.iter().all(Option::is_none), "{algorithm}");
        assert!(!d.decisions[2].allowed);
        // The others report what they really have left: 3 of 5.
        assert_eq!(d.decisions[0].remaining, 3, "{algorithm}");
        assert_eq!(d.decisions[1].remaining, 3, "{algorithm}");
        assert_eq!(states, before);
        // A shadow third check never denies.
        let mut shadow = checks;
        shadow[2].enforce = false;
        let d = decide_all(&shadow, &states, T0);
        assert!(d.allowed(), "{algorithm}");
        assert!(!d.decisions[2].allowed);
        assert!(d.changes[2].is_none());
    }
}

#[test]
fn two_checks_on_one_slot_see_each_other() {
    let p = params("fixed_window", 3);
    let checks = [
        Check {
            params: p,
            enforce: true,
            quantity: 2,
            slot: 0,
            part: Part::AllOrNothing,
        },
        Check {
            params: p,
            enforce: true,
            quantity: 2,
            slot: 0,
            part: Part::AllOrNothing,
        },
    ];
    let d = decide_all(&checks, &[State::Fresh], T0);
    assert_eq!(d.denied, Some(1));
    assert!(d.changes[0].is_none());
    let one = [Check {
        params: p,
        enforce: true,
        quantity: 1,
        slot: 0,
        part: Part::AllOrNothing,
    }; 3];
    let d = decide_all(&one, &[State::Fresh], T0);
    assert!(d.allowed());
    assert_eq!(d.decisions[2].remaining, 0);
}

#[derive(Debug, Clone)]
struct Step {
    checks: Vec<(usize, u64, bool)>,
    dt_ms: u64,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop::collection::vec((0usize..3, 0u64..4, prop::bool::weighted(0.85)), 1..6),
        0u64..400,
    )
        .prop_map(|(checks, dt_ms)| Step { checks, dt_ms })
}

proptest! {
    #[test]
    fn all_or_nothing_matches_deciding_in_order(
        algorithm in 0usize..6,
        caps in prop::collection::vec(1u64..6, 3),
        steps in prop::collection::vec(step(), 1..40),
    ) {
        let slots: Vec<Params> = caps.iter().map(|&c| params(algorithms()[algorithm], c)).collect();
        let mut states = vec![State::Fresh; 3];
        let mut now = T0;
        for s in steps {
            now += s.dt_ms * MS;
            let checks: Vec<Check> = s.checks.iter().map(|&(slot, quantity, enforce)| Check {
                params: slots[slot], enforce, quantity, slot, part: Part::AllOrNothing,
            }).collect();
            let d = decide_all(&checks, &states, now);
            // The reference: one by one on a copy.
            let mut running = states.clone();
            let mut first_denial = None;
            let mut seen = Vec::new();
            for (i, c) in checks.iter().enumerate() {
                let (decision, change) = c.params.decide_change(&running[c.slot], now, c.quantity);
                seen.push(decision);
                if !decision.allowed && c.enforce {
                    first_denial = Some(i);
                    break;
                }
                if let Some(next) = change {
                    running[c.slot] = next;
                }
            }
            prop_assert_eq!(d.denied, first_denial);
            prop_assert_eq!(d.decisions.len(), checks.len());
            match first_denial {
                None => {
                    prop_assert_eq!(&d.decisions, &seen);
                    for (slot, change) in d.changes.into_iter().enumerate() {
                        if let Some(next) = change {
                            states[slot] = next;
                        }
                    }
                    prop_assert_eq!(&states, &running);
                }
                Some(j) => {
                    prop_assert!(d.changes.iter().all(Option::is_none));
                    prop_assert_eq!(d.decisions[j], seen[j]);
                    for (i, c) in checks.iter().enumerate() {
                        if i != j {
                            let peek = c.params.decide_change(&states[c.slot], now, 0).0;
                            prop_assert_eq!(d.decisions[i], peek);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_check_on_its_own_never_denies_the_request_and_takes_what_is_left() {
    for algorithm in algorithms() {
        let p = params(algorithm, 3);
        let own = |quantity, slot| Check {
            params: p,
            enforce: true,
            quantity,
            slot,
            part: Part::OnItsOwn,
        };
        // 2 of 3 on slot 0; then 5 asked of slot 0 (1 left) and 1 of slot 1.
        let states = vec![State::Fresh; 2];
        let first = decide_all(&[own(2, 0)], &states, T0);
        let after: Vec<State> = vec![first.changes[0].clone().expect("debited"), State::Fresh];
        let d = decide_all(&[own(5, 0), own(1, 1)], &after, T0);
        assert!(
            d.allowed(),
            "{algorithm}: counted on its own, it never denies the request"
        );
        assert!(!d.decisions[0].allowed, "{algorithm}: 5 do not fit in 1");
        assert!(
            d.decisions[1].allowed,
            "{algorithm}: the other check is counted"
        );
        let full = d.changes[0].clone().expect("what was left is taken");
        assert_eq!(
            p.decide_change(&full, T0, 0).0.remaining,
            0,
            "{algorithm}: full after it"
        );
        assert!(
            d.changes[1].is_some(),
            "{algorithm}: the other check debited"
        );
        // All or nothing, the same denial changes nothing anywhere.
        let strict = Check {
            part: Part::AllOrNothing,
            ..own(5, 0)
        };
        let d = decide_all(
            &[
                strict,
                Check {
                    part: Part::AllOrNothing,
                    ..own(1, 1)
                },
            ],
            &after,
            T0,
        );
        assert!(
            !d.allowed() && d.changes.iter().all(Option::is_none),
            "{algorithm}"
        );
    }
}

/// envoyproxy/ratelimit's counting, for every algorithm: a limit of 2 admits 2, a check without
/// debit at exactly 2 passes with nothing remaining, the third unit is over (and counted: a
/// later check is over too), and an oversized debit fills the limit past it.
#[test]
fn past_the_limit_counts_as_the_peer_does() {
    use sluice_core::all::peer_view;
    for algorithm in algorithms() {
        let p = params(algorithm, 2);
        let peer = |quantity| Check {
            params: p,
            enforce: true,
            quantity,
            slot: 0,
            part: Part::PastTheLimit,
        };
        let mut state = vec![State::Fresh];
        let mut step = |quantity: u64| {
            let d = decide_all(&[peer(quantity)], &state, T0);
            assert!(d.allowed(), "{algorithm}: never denies the request");
            if let Some(next) = d.changes[0].clone() {
                state[0] = next;
            }
            let one = d.decisions[0];
            (one.allowed, one.remaining, one.capacity)
        };
        assert_eq!(step(1), (true, 1, 2), "{algorithm}: 1 of 2");
        assert_eq!(step(1), (true, 0, 2), "{algorithm}: 2 of 2");
        assert_eq!(
            step(0),
            (true, 0, 2),
            "{algorithm}: a check at exactly the limit passes"
        );
        assert_eq!(step(1), (false, 0, 2), "{algorithm}: the third is over");
        assert_eq!(
            step(0),
            (false, 0, 2),
            "{algorithm}: and counted: a check is over now"
        );
        // From fresh, a debit of 5 on a limit of 2: over, and the counter is past the limit.
        let mut fresh = vec![State::Fresh];
        let d = decide_all(&[peer(5)], &fresh, T0);
        assert!(
            !d.decisions[0].allowed && d.decisions[0].retry_after.is_none(),
            "{algorithm}: never fits"
        );
        fresh[0] = d.changes[0].clone().expect("takes what is left");
        let again = decide_all(&[peer(0)], &fresh, T0);
        assert!(
            !again.decisions[0].allowed,
            "{algorithm}: past the limit after it"
        );
    }
    // The view itself: one unit kept back, the capacity reported as the limit.
    let d = sluice_core::Decision {
        allowed: true,
        capacity: 3,
        remaining: 1,
        retry_after: None,
        reset_after: 5,
        level: 2.0,
    };
    let v = peer_view(d, 2, 1);
    assert!(v.allowed && v.remaining == 0 && v.capacity == 2);
    let past = peer_view(
        sluice_core::Decision {
            remaining: 0,
            level: 3.0,
            ..d
        },
        2,
        1,
    );
    assert!(!past.allowed && past.retry_after == Some(5));
}
