//! Limits that an envoyproxy/ratelimit configuration file owns (`sluice --ratelimit-config`):
//! stored as ordinary rules, so levels, history, top keys and overrides work for them, and
//! marked by their description so the admin API, the dashboard and every replica agree on which
//! rules a file owns (and refuse to edit them: the file is the source of truth).

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
