//! What a rule lets through in the long run. Two views need it: the rules table prints it next
//! to a rate, and the what-if plot starts its offered traffic at twice it.

use sluice_core::Params;

/// The long-run rate a rule lets through, in requests per second: `count / period` for a
/// meter, `capacity / window` for a window algorithm.
pub fn per_s(params: &Params) -> f64 {
    match params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => {
            1e9 / m.interval.max(1) as f64
        }
        Params::FixedWindow(w) | Params::SlidingLog(w) | Params::SlidingWindow(w) => {
            w.capacity as f64 * 1000.0 / w.window_ms.max(1) as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_core::Rule;

    fn per_s_of(rule: serde_json::Value) -> f64 {
        per_s(&Rule::from_json(&rule).unwrap().params())
    }

    #[test]
    fn a_meter_passes_count_per_period_and_a_window_capacity_per_window() {
        let meter = json!({"action": "a", "algorithm": "gcra", "capacity": 16,
                           "rate": {"count": 30, "period": "60s"}});
        assert!((per_s_of(meter) - 0.5).abs() < 1e-9);
        let window = json!({"action": "a", "algorithm": "sliding_log", "capacity": 5,
                            "window": "500ms"});
        assert!((per_s_of(window) - 10.0).abs() < 1e-9);
    }
}
