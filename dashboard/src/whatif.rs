//! The models behind the what-if plot (`app/whatif.rs`), in two steps with one job each:
//! [`simulation`] runs sluice-core's algorithms over a request pattern and counts what passed;
//! [`chart`] lays that count out as SVG geometry. The simulation never thinks about pixels and
//! the chart never calls an algorithm.

pub mod chart;
pub mod simulation;
