//! sluice-core: the one definition of sluice's rules, decisions and throttle algorithms.
//!
//! Everything here is pure: no I/O, no clock, no async. Time is passed in as integer nanoseconds
//! since the Unix epoch ([`Nanos`]), so the same code runs in the backend, inside the proxy-wasm
//! filter and in the dashboard's what-if plot, and is tested at fixed times. The Redis Lua scripts
//! in the backend are twins of the transitions in [`algorithms`] and are tested against them.

pub mod algorithms;
pub mod all;
pub mod budget;
pub mod calendar;
pub mod cell;
pub mod commit;
pub mod decision;
pub mod descriptor;
pub mod duration;
#[cfg(feature = "exchange")]
pub mod exchange;
pub mod field_error;
pub mod headers;
pub mod lease;
pub mod leased;
pub mod limits;
pub mod params;
pub mod rlqs;
pub mod rls_commit;
pub mod rule;
pub mod state;
pub mod time;
pub mod wire;

pub use calendar::{Calendar, CalendarUnit, Zone};
pub use decision::Decision;
pub use duration::Span;
pub use field_error::FieldError;
pub use lease::{Lease, LeaseGrant};
pub use leased::Leased;
pub use params::{MeterParams, Params, WindowParams};
pub use rule::{Action, ActionError, Algorithm, Limit, Mode, Rate, Rule};
pub use state::State;
pub use time::Nanos;
