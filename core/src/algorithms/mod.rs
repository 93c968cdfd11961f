//! The six throttle algorithms as pure transitions `(params, state, now, quantity) -> (decision,
//! state)`.
//!
//! Shared conventions, which the Redis Lua twins follow to the letter:
//! - a denial never changes state (the returned state equals the input);
//! - quantity 0 never changes state (it peeks: the decision reports the level as of `now`);
//! - a quantity above the capacity is denied with no `retry_after`: it can never pass;
//! - time that runs backwards (a clock step) is treated as no time passing.
//!
//! gcra, leaky_bucket and token_bucket are the same meter seen three ways (a theoretical arrival
//! time, a level that leaks, tokens that refill): with the same capacity and rate they admit exactly
//! the same requests. They differ in what they store and how naturally they report a level.

pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;
