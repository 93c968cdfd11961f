//! What a save would change, before it is made: a rule that loosens or tightens by more than
//! [`CONFIRM_FACTOR`] in capacity or long-run rate asks the operator to confirm (a typo of one
//! zero is the usual way a limit disappears or a whole site starts getting 429s).

use sluice_core::Rule;

use crate::format::{per_second, short_number};
use crate::sustained;

/// A change by more than this factor (either way) asks for confirmation.
pub const CONFIRM_FACTOR: f64 = 10.0;

/// One change that needs a second look, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct BigChange {
    /// `capacity` or `rate`.
    pub what: &'static str,
    /// `"capacity 16 → 200: 12.5× looser"`.
    pub text: String,
}

/// The changes from `before` (the saved rule) to `after` (the edited one) by more than
/// [`CONFIRM_FACTOR`] in capacity or in the long-run rate (count per period for a meter,
/// capacity per window for a window algorithm). Empty when nothing changes that much.
pub fn big_changes(before: &Rule, after: &Rule) -> Vec<BigChange> {
    let mut changes = Vec::new();
    let capacity = (before.capacity() as f64, after.capacity() as f64);
    if let Some(text) = describe(capacity, short_number) {
        changes.push(BigChange {
            what: "capacity",
            text: format!("capacity {text}"),
        });
    }
    let rate = (
        sustained::per_s(&before.params()),
        sustained::per_s(&after.params()),
    );
    if let Some(text) = describe(rate, per_second) {
        changes.push(BigChange {
            what: "rate",
            text: format!("rate {text}"),
        });
    }
    changes
}

fn describe((before, after): (f64, f64), show: impl Fn(f64) -> String) -> Option<String> {
    if !(before > 0.0 && after > 0.0) {
        return None;
    }
    let (factor, way) = if after > before {
        (after / before, "looser")
    } else {
        (before / after, "tighter")
    };
    (factor > CONFIRM_FACTOR).then(|| {
        format!(
            "{} → {}: {}× {way}",
            show(before),
            show(after),
            short_number(factor)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gcra(capacity: u64, count: u64, period: &str) -> Rule {
        Rule::from_json(
            &json!({"action": "a", "algorithm": "gcra", "capacity": capacity,
            "rate": {"count": count, "period": period}}),
        )
        .unwrap()
    }

    #[test]
    fn ten_times_is_fine_more_asks() {
        let base = gcra(16, 30, "60s");
        assert!(big_changes(&base, &gcra(160, 300, "60s")).is_empty());
        assert!(big_changes(&base, &gcra(2, 3, "60s")).is_empty());
        assert!(big_changes(&base, &base).is_empty());
        let looser = big_changes(&base, &gcra(200, 30, "60s"));
        assert_eq!(looser.len(), 1);
        assert_eq!(looser[0].what, "capacity");
        assert_eq!(looser[0].text, "capacity 16 → 200: 12.5× looser");
        let tighter = big_changes(&base, &gcra(16, 30, "1h"));
        assert_eq!(tighter[0].what, "rate");
        assert_eq!(tighter[0].text, "rate 0.5/s → 0.0083/s: 60× tighter");
    }

    #[test]
    fn a_change_of_algorithm_compares_long_run_rates() {
        let window = Rule::from_json(
            &json!({"action": "a", "algorithm": "fixed_window", "capacity": 600, "window": "1s"}),
        )
        .unwrap();
        // 0.5/s → 600/s, and capacity 16 → 600.
        let what: Vec<_> = big_changes(&gcra(16, 30, "60s"), &window)
            .into_iter()
            .map(|c| c.what)
            .collect();
        assert_eq!(what, ["capacity", "rate"]);
    }
}
