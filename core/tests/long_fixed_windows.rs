//! fixed_window takes duration windows up to 365 days (envoyproxy/ratelimit's `month` = 30 days and
//! `year` = 365 days, epoch-aligned); every other algorithm's window or period stays at most 7.

use serde_json::json;
use sluice_core::time::NANOS_PER_SEC as S;
use sluice_core::{Rule, State};

fn field(rule: serde_json::Value) -> Result<(), String> {
    Rule::from_json(&rule).map(|_| ()).map_err(|e| e.field)
}

#[test]
fn only_fixed_window_takes_windows_beyond_seven_days() {
    let fw =
        |w: &str| json!({"action": "a", "algorithm": "fixed_window", "capacity": 5, "window": w});
    for w in ["7d", "8d", "30d", "365d", "8760h"] {
        assert_eq!(field(fw(w)), Ok(()), "{w}");
    }
    assert_eq!(field(fw("366d")), Err("window".to_owned()));
    for algorithm in ["sliding_log", "sliding_window"] {
        let rule =
            |w: &str| json!({"action": "a", "algorithm": algorithm, "capacity": 5, "window": w});
        assert_eq!(field(rule("7d")), Ok(()));
        assert_eq!(field(rule("8d")), Err("window".to_owned()), "{algorithm}");
        assert_eq!(field(rule("30d")), Err("window".to_owned()), "{algorithm}");
    }
    for algorithm in ["gcra", "leaky_bucket", "token_bucket"] {
        let rule = |p: &str| json!({"action": "a", "algorithm": algorithm, "capacity": 5, "rate": {"count": 5, "period": p}});
        assert_eq!(field(rule("7d")), Ok(()));
        assert_eq!(
            field(rule("8d")),
            Err("rate.period".to_owned()),
            "{algorithm}"
        );
        assert_eq!(
            field(rule("365d")),
            Err("rate.period".to_owned()),
            "{algorithm}"
        );
    }
}

/// (offset from the edge in ns, quantity, (allowed, remaining, retry_after, reset_after)).
type Row = (i64, u64, (bool, u64, Option<u64>, u64));

/// Decisions at fixed times around the edges of a 30-day and a 365-day window: (offset from the
/// edge in ns, quantity) -> (allowed, remaining, retry_after, reset_after).
#[test]
fn decisions_near_30_and_365_day_edges() {
    // 2026-12-03T00:00Z = 693 × 30 days; 2026-12-18T00:00Z = 57 × 365 days.
    for (days, edge_s) in [(30u64, 1_796_256_000u64), (365, 1_797_552_000)] {
        let w = days * 86_400 * S;
        let edge = edge_s * S;
        assert_eq!(edge % w, 0);
        let rule = Rule::from_json(&json!({
            "action": "a", "algorithm": "fixed_window", "capacity": 2, "window": format!("{days}d")
        }))
        .expect("valid");
        let params = rule.params();
        let mut state = State::default();
        let rows: [Row; 6] = [
            (-2_500_000_001, 1, (true, 1, None, 2_500_000_001)),
            (-999_999, 1, (true, 0, None, 999_999)),
            (-1, 1, (false, 0, Some(1), 1)),
            (0, 2, (true, 0, None, w)),
            (
                123_456_789,
                1,
                (false, 0, Some(w - 123_456_789), w - 123_456_789),
            ),
            (w as i64 - 1, 3, (false, 0, None, 1)),
        ];
        for (offset, quantity, want) in rows {
            let now = edge.checked_add_signed(offset).expect("time");
            let (d, next) = params.decide(&state, now, quantity);
            assert_eq!(
                (d.allowed, d.remaining, d.retry_after, d.reset_after),
                want,
                "{days}d at edge{offset:+}"
            );
            state = next;
        }
    }
}
