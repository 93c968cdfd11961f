//! `GET /v1/levels` and the SSE `levels` event: where the most recently active keys stand.

use serde::{Deserialize, Serialize};

use super::StoreHealth;
use crate::rule::Algorithm;

/// `GET /v1/levels` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LevelsBody {
    /// When the levels were read, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub at_ms: u64,
    /// One entry per action (sorted by action).
    #[serde(default)]
    pub actions: Vec<ActionLevels>,
    /// How the store stands (room left, evictions, settings that put limiting at risk).
    #[serde(default)]
    pub store: StoreHealth,
}

/// The levels of one action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActionLevels {
    /// The action.
    pub action: String,
    /// Its rule's algorithm.
    pub algorithm: Algorithm,
    /// Its rule's capacity.
    pub capacity: u64,
    /// Requests allowed per second over the last 2 s, as seen by this replica.
    #[serde(default)]
    pub allowed_per_s: f64,
    /// Requests denied (or shadow-denied) per second over the last 2 s, as seen by this replica.
    #[serde(default)]
    pub denied_per_s: f64,
    /// The most recently active keys, newest first.
    #[serde(default)]
    pub keys: Vec<KeyLevel>,
}

/// The level of one key, as of the snapshot's `at_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyLevel {
    /// The key, exactly as clients sent it (untrusted text: render it as text only).
    pub key: String,
    /// How full the funnel is, in requests (fractional for the continuous algorithms).
    #[serde(default)]
    pub level: f64,
    /// Funnel size.
    #[serde(default)]
    pub capacity: u64,
    /// Requests of quantity 1 that could pass now.
    #[serde(default)]
    pub remaining: u64,
    /// When any replica last saw the key, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub last_seen_ms: u64,
}
