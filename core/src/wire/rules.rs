//! `GET /v1/rules` and the SSE `rules` event.

use serde::{Deserialize, Serialize};

use crate::rule::Rule;

/// Every rule, with the store's version so a client can ignore a stale snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RulesBody {
    /// The store's rules version (0 before any rule was stored); changes on every write.
    #[serde(default)]
    pub version: u64,
    /// Every rule, sorted by action.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<super::RawRule>))]
    pub rules: Vec<Rule>,
    /// Every per-key override, sorted by action then key (absent when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<super::KeyOverride>,
}

/// A [`RulesBody`] read for its version alone (its rules skipped, not built): a client that
/// already holds that version has nothing to do, which with thousands of rules saves parsing
/// megabytes (the dashboard's SSE `rules` event on connect repeats what `GET /v1/rules` gave).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct RulesVersion {
    /// [`RulesBody::version`].
    #[serde(default)]
    pub version: u64,
}
