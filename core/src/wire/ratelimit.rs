//! Limits that an envoyproxy/ratelimit configuration file owns (`sluice --ratelimit-config`):
//! stored as ordinary rules, so levels, history, top keys and overrides work for them, and
//! marked by their description so the admin API, the dashboard and every replica agree on which
//! rules a file owns (and refuse to edit them: the file is the source of truth).

use serde::{Deserialize, Serialize};

/// The start of the description of every rule a ratelimit configuration owns; the file's path
/// follows, then [`OWNER_SEPARATOR`] and the descriptor path in the peer's notation
/// (`domain.key_value.key`).
pub const FILE_OWNED_PREFIX: &str = "from ratelimit config ";

/// Between the file's path and the descriptor path in an owned rule's description.
pub const OWNER_SEPARATOR: &str = " | ";

/// Actions of file-owned rules start with this (`rl:<domain>.<path>`); the admin API refuses
/// to create rules under it, so a file's rules and an admin's never share an action.
pub const FILE_OWNED_ACTION_PREFIX: &str = "rl:";

/// The description of a rule owned by `file` for the descriptor path `path`.
pub fn owned_description(file: &str, path: &str) -> String {
    format!("{FILE_OWNED_PREFIX}{file}{OWNER_SEPARATOR}{path}")
}

/// The file that owns a rule with this description, if a ratelimit configuration owns it.
pub fn file_owner(description: &str) -> Option<&str> {
    let rest = description.strip_prefix(FILE_OWNED_PREFIX)?;
    Some(
        rest.rsplit_once(OWNER_SEPARATOR)
            .map_or(rest, |(file, _)| file),
    )
}

/// `GET /v1/ratelimit-config`: the envoyproxy/ratelimit configuration in force and whether the
/// newest change of its files was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RatelimitConfigBody {
    /// `--ratelimit-config`; null when none is served.
    pub path: Option<String>,
    /// The files in force, sorted.
    pub files: Vec<String>,
    /// Every limit in force, in file order.
    pub limits: Vec<RatelimitLimit>,
    /// Why the newest change of the files was refused, one `file: field: reason` each; empty when
    /// the files in force are the newest. While not empty, the previous files stay in force.
    pub refused: Vec<String>,
}

/// One `rate_limit` of a ratelimit configuration, as it is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RatelimitLimit {
    /// The descriptor path in the peer's notation: `domain.key_value.key`.
    pub path: String,
    /// The sluice rule counting it (its levels, history and overrides are under this action);
    /// null for `unlimited` and `requests_per_unit: 0`, which keep no state.
    pub action: Option<String>,
    /// `second` ... `week`; null when unlimited.
    pub unit: Option<String>,
    /// Null when unlimited.
    pub requests_per_unit: Option<u32>,
    /// `unlimited: true`.
    pub unlimited: bool,
    /// `name` (empty when unset).
    pub name: String,
    /// The names it replaces.
    pub replaces: Vec<String>,
    /// `shadow_mode`.
    pub shadow_mode: bool,
    /// `quota_mode`.
    pub quota_mode: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_round_trips() {
        let d = owned_description("/etc/rl/config.yaml", "edge.remote_address");
        assert_eq!(file_owner(&d), Some("/etc/rl/config.yaml"));
        assert_eq!(file_owner("replies per user"), None);
    }
}
