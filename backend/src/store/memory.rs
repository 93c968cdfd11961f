//! The memory store (under construction).
