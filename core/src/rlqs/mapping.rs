//! A quota filter bucket id (Envoy's `bucket_id_builder` output: a map of strings) → the sluice
//! check it stands for, (action, key).
//!
//! # The default mapping
//!
//! The entry `name` names the action; the key is the other entries' values in the order of
//! their names, joined as [`crate::descriptor::join`] joins RLS descriptor values (one value as
//! is, several by `|` with `%` and `|` escaped). So `{name: user, user: alice}` meters the same
//! (action `user`, key `alice`) as the sluice filter, RLS or `POST /v1/throttle` would. An id
//! with no `name` entry, or whose `name` is not an action name, is unmapped (answered
//! `ALLOW_ALL`, as RLS answers OK for an action without a rule).
//!
//! | bucket id | action | key |
//! |---|---|---|
//! | `{name: user, user: alice}` | `user` | `alice` |
//! | `{name: user_anonymous, ip: 10.0.0.7}` | `user_anonymous` | `10.0.0.7` |
//! | `{name: reply, user: alice, path: /x}` | `reply` | `/x\|alice` (`path` before `user`) |
//! | `{name: reply_all}` | `reply_all` | `` (one bucket) |
//! | `{user: alice}` | unmapped | |

use crate::descriptor::{join, MAX_ENTRIES};
use crate::rule::{Action, ActionError};

/// The bucket id entry whose value names the action.
pub const NAME_ENTRY: &str = "name";

/// Why a bucket id maps to no check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmapped {
    /// No `name` entry.
    #[error("no `{NAME_ENTRY}` entry names the action")]
    NoName,
    /// The `name` entry is not an action name.
    #[error("`{NAME_ENTRY}` names the action, which {0}")]
    BadName(ActionError),
    /// More entries than an RLS descriptor may carry.
    #[error("at most {MAX_ENTRIES} entries")]
    TooManyEntries,
}

/// The default mapping of one bucket id (entries in any order: a proto map has none).
pub fn map_bucket<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(Action, String), Unmapped> {
    let mut entries: Vec<(&str, &str)> = entries.into_iter().collect();
    if entries.len() > MAX_ENTRIES {
        return Err(Unmapped::TooManyEntries);
    }
    entries.sort_unstable();
    let name = entries
        .iter()
        .find(|(k, _)| *k == NAME_ENTRY)
        .map(|(_, v)| *v)
        .ok_or(Unmapped::NoName)?;
    let action = Action::parse(name).map_err(Unmapped::BadName)?;
    let values: Vec<&str> = entries
        .iter()
        .filter(|(k, _)| *k != NAME_ENTRY)
        .map(|(_, v)| *v)
        .collect();
    Ok((action, join(&values)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> Result<(String, String), Unmapped> {
        map_bucket(entries.iter().copied()).map(|(a, k)| (a.as_str().to_owned(), k))
    }

    fn ok(a: &str, k: &str) -> Result<(String, String), Unmapped> {
        Ok((a.to_owned(), k.to_owned()))
    }

    #[test]
    fn the_documented_examples() {
        assert_eq!(
            map(&[("name", "user"), ("user", "alice")]),
            ok("user", "alice")
        );
        assert_eq!(
            map(&[("ip", "10.0.0.7"), ("name", "user_anonymous")]),
            ok("user_anonymous", "10.0.0.7")
        );
        assert_eq!(
            map(&[("user", "alice"), ("name", "reply"), ("path", "/x")]),
            ok("reply", "/x|alice")
        );
        assert_eq!(map(&[("name", "reply_all")]), ok("reply_all", ""));
        assert_eq!(map(&[("user", "alice")]), Err(Unmapped::NoName));
        assert!(matches!(
            map(&[("name", "a b")]),
            Err(Unmapped::BadName(ActionError::Character(' ')))
        ));
    }

    #[test]
    fn entry_order_does_not_matter_and_values_never_collide() {
        let a = map(&[("name", "r"), ("b", "2"), ("a", "1")]);
        let b = map(&[("a", "1"), ("b", "2"), ("name", "r")]);
        assert_eq!(a, b);
        assert_ne!(
            map(&[("name", "r"), ("a", "x|y"), ("b", "z")]),
            map(&[("name", "r"), ("a", "x"), ("b", "y|z")])
        );
    }

    #[test]
    fn the_same_key_as_an_rls_descriptor() {
        let rls = crate::descriptor::to_check(0, [("generic_key", "reply"), ("user", "alice")])
            .map(|(a, k)| (a.as_str().to_owned(), k));
        assert_eq!(
            map(&[("name", "reply"), ("user", "alice")]),
            rls.map_err(|_| Unmapped::NoName)
        );
    }

    #[test]
    fn too_many_entries_is_unmapped() {
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("k{i}")).collect();
        let mut entries: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
        entries[0] = ("name", "r");
        assert_eq!(map_bucket(entries), Err(Unmapped::TooManyEntries));
    }
}
