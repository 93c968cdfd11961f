//! Redis key layout. Everything for one (action, subject) shares one hash tag, so each script
//! touches a single Cluster slot:
//!
//! - throttle state: `<prefix>:{<action>:<subject>}:<algorithm>`
//! - `cl.throttle` state: `<prefix>:cell:{<subject>}`
//! - rules: hash `{<prefix>:rules}`, action -> rule JSON, with the version in its field `#version`
//!   (older releases kept the version in `{<prefix>:rules}:version`, same slot: migrated on load)
//! - activity: `{<prefix>:activity:<action>}:recent` (zset) and `...:counts` (hash)
//! - RLQS shares of (action, subject), one record per replica: `<prefix>:{<action>:<subject>}:rlqs`
//!   (hash, beside the state: same slot); the keys holding some: `{<prefix>:rlqs}:keys` (zset)
//!
//! A subject is any string. One over 128 bytes, or containing `{` or `}` (which would move the
//! hash tag), or starting with `h:` (which could collide with a digest) is stored as `h:` + the
//! hex SHA-256 of it. A `:` in an action is written `%3A` (actions cannot contain `%`), so the
//! first `:` in a tag always ends the action and no two (action, subject) pairs share a key.

use std::borrow::Cow;

use sha2::{Digest, Sha256};
use sluice_core::{Action, Algorithm};

/// Longest subject stored verbatim.
pub use sluice_core::limits::MAX_LITERAL_KEY_BYTES as MAX_RAW_SUBJECT;

/// Builds every key sluice writes, under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// Keys under `prefix` (which must not contain `{` or `}`; checked at connect).
    pub(crate) fn new(prefix: &str) -> KeyLayout {
        KeyLayout {
            prefix: prefix.to_owned(),
        }
    }

    /// Throttle state of `subject` under a rule for `action` with `algorithm`.
    pub(crate) fn state(&self, action: &Action, algorithm: Algorithm, subject: &str) -> String {
        format!("{}:{}", self.tagged(action, subject), algorithm.name())
    }

    /// `<prefix>:{<action>:<subject>}`: what every key of one (action, subject) starts with.
    fn tagged(&self, action: &Action, subject: &str) -> String {
        format!(
            "{}:{{{}:{}}}",
            self.prefix,
            action.as_str().replace(':', "%3A"),
            stored_subject(subject)
        )
    }

    /// The RLQS share records of (`action`, `subject`): the state's hash tag, so one slot with
    /// it (`rlqs` is no algorithm's name, so no state key is named so).
    pub(crate) fn rlqs_shares(&self, action: &Action, subject: &str) -> String {
        format!("{}:rlqs", self.tagged(action, subject))
    }

    /// The index of keys holding RLQS share records (one key, one slot).
    pub(crate) fn rlqs_index(&self) -> String {
        format!("{{{}:rlqs}}:keys", self.prefix)
    }

    /// `cl.throttle` state of `subject`.
    pub(crate) fn cell(&self, subject: &str) -> String {
        format!("{}:cell:{{{}}}", self.prefix, stored_subject(subject))
    }

    /// The rules hash (which holds the version in a field) and the separate version key of older
    /// releases, migrated and deleted by `load_rules` (same slot).
    pub(crate) fn rules(&self) -> [String; 2] {
        let tag = format!("{{{}:rules}}", self.prefix);
        [tag.clone(), format!("{tag}:version")]
    }

    /// The index of touched actions (a zset action → last touched ms; one key, one slot).
    pub(crate) fn touched(&self) -> String {
        format!("{{{}:touched}}", self.prefix)
    }

    /// The recent-keys zset and the counts hash of `action` (same slot).
    pub(crate) fn activity(&self, action: &Action) -> [String; 2] {
        let tag = format!("{{{}:activity:{}}}", self.prefix, action.as_str());
        [format!("{tag}:recent"), format!("{tag}:counts")]
    }
}

/// The subject as it appears in a key: verbatim when short and safe, else `h:` + SHA-256 hex.
pub(crate) fn stored_subject(subject: &str) -> Cow<'_, str> {
    let unsafe_chars = subject.contains('{') || subject.contains('}') || subject.starts_with("h:");
    if subject.len() > MAX_RAW_SUBJECT || unsafe_chars {
        Cow::Owned(format!(
            "h:{}",
            hex::encode(Sha256::digest(subject.as_bytes()))
        ))
    } else {
        Cow::Borrowed(subject)
    }
}

/// Activity of an action vanishes after this long without traffic. Activity keys carry a TTL like
/// throttle state, so a `volatile-*` policy may evict them (the dashboard's recent keys of that
/// action start over; decisions are unaffected); there is one pair per action, each bounded to
/// [`ACTIVITY_KEEP`] keys.
pub const ACTIVITY_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// The index of touched actions expires as a whole after this long without a touch: a year and a
/// day, as long as the longest state a rule may keep (a fixed window of a year, within
/// [`sluice_core::limits::MAX_FIXED_WINDOW_SPAN_MS`]), so an action whose keys hold state stays
/// in it.
pub const TOUCHED_TTL_MS: u64 = sluice_core::limits::MAX_FIXED_WINDOW_SPAN_MS + 24 * 60 * 60 * 1000;

/// The field of the rules hash that holds the rules version. Kept inside the hash (not in a key
/// of its own) so that losing the hash, by a stray `DEL` or eviction, loses the version too: the
/// replicas then see no version and publish their cached rules again. No action can be named so
/// (actions are `[A-Za-z0-9_.:-]`).
pub const VERSION_FIELD: &str = "#version";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::action;

    #[test]
    fn short_subjects_are_verbatim_and_tagged() {
        let k = KeyLayout::new("sluice");
        assert_eq!(
            k.state(&action("reply"), Algorithm::Gcra, "laoqian"),
            "sluice:{reply:laoqian}:gcra"
        );
        assert_eq!(k.cell("k"), "sluice:cell:{k}");
    }

    #[test]
    fn long_braced_and_digest_like_subjects_are_hashed() {
        let long = "x".repeat(MAX_RAW_SUBJECT + 1);
        for s in [long.as_str(), "a{b", "a}b", "h:abc"] {
            let stored = stored_subject(s);
            assert!(
                stored.starts_with("h:") && stored.len() == 66,
                "{s} -> {stored}"
            );
        }
        assert_eq!(
            stored_subject(&"x".repeat(MAX_RAW_SUBJECT)),
            "x".repeat(MAX_RAW_SUBJECT)
        );
    }

    #[test]
    fn colons_in_actions_cannot_collide_with_subjects() {
        let k = KeyLayout::new("sluice");
        let a = k.state(&action("a:b"), Algorithm::Gcra, "c");
        let b = k.state(&action("a"), Algorithm::Gcra, "b:c");
        assert_ne!(a, b);
    }
}
