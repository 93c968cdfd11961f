//! The Redis store (under construction).
