//! The models behind the what-if plot (`app/whatif.rs`), in two steps with one job each:
//! [`simulation`] runs sluice-core's algorithms over a request pattern and counts what passed;
//! [`chart`] lays that count out as SVG geometry. The simulation never thinks about pixels and
//! the chart never calls an algorithm.

pub mod chart;
pub mod simulation;

/// Rules for the what-if tests, written as an operator would write them.
#[cfg(test)]
mod fixtures {
    use serde_json::json;
    use sluice_core::{Params, Rule};

    use super::simulation::{
        auto_horizon_ns, default_offered_per_s, simulate, Pattern, Simulation,
    };

    /// The parameters of a rule given in its JSON form.
    pub fn params(rule: serde_json::Value) -> Params {
        Rule::from_json(&rule).unwrap().params()
    }

    /// A gcra rule: `capacity`, `count` per `period`.
    pub fn gcra(capacity: u64, count: u64, period: &str) -> Params {
        params(
            json!({"action": "a", "algorithm": "gcra", "capacity": capacity,
                      "rate": {"count": count, "period": period}}),
        )
    }

    /// A rule whose default plot offers more requests than [`super::simulation::MAX_EVENTS`]
    /// (10,000 per second for the default span), and that plot.
    pub fn over_the_event_budget() -> (Params, Simulation) {
        let p = params(
            json!({"action": "a", "algorithm": "sliding_log", "capacity": 10000, "window": "1s"}),
        );
        let sim = simulate(
            &p,
            Pattern::Steady,
            default_offered_per_s(&p),
            auto_horizon_ns(&p),
        );
        (p, sim)
    }
}
