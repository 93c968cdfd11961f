//! The Redis store's history keys and scripts ([`HistoryKeys`]), apart from the trait that
//! serves history (`../history.rs`), so that `mod.rs` holds them without importing the trait's file.

use redis::Script;
use sluice_core::Action;

use crate::history::report::UNKNOWN_ACTION_LABEL;

/// The keys and scripts of history and top denied.
pub(crate) struct HistoryKeys {
    pub(crate) prefix: String,
    pub(crate) record: Script,
    pub(crate) read: Script,
    pub(crate) denied_record: Script,
    pub(crate) denied_top: Script,
    pub(crate) denied_key: Script,
}

impl HistoryKeys {
    /// Keys under `prefix` (checked at connect: no `{` or `}`).
    pub(crate) fn new(prefix: &str) -> HistoryKeys {
        HistoryKeys {
            prefix: prefix.to_owned(),
            record: Script::new(include_str!("../../../../lua/history_record.lua")),
            read: Script::new(include_str!("../../../../lua/history_read.lua")),
            denied_record: Script::new(include_str!("../../../../lua/denied_record.lua")),
            denied_top: Script::new(include_str!("../../../../lua/denied_top.lua")),
            denied_key: Script::new(include_str!("../../../../lua/denied_key.lua")),
        }
    }

    pub(crate) fn history_tag(&self, action: &Action) -> String {
        format!("{{{}:history:{}}}", self.prefix, action.as_str())
    }

    /// The hash tag of a report mark's set: the action's history tag, or (`shared`: an action
    /// without a rule) the one tag all such actions share.
    pub(crate) fn marks_tag(&self, action: &Action, shared: bool) -> String {
        if shared {
            format!("{{{}:history:{UNKNOWN_ACTION_LABEL}}}", self.prefix)
        } else {
            self.history_tag(action)
        }
    }

    /// The hash of the 10-minute block starting at `block_ms`.
    pub(crate) fn block(&self, action: &Action, block_ms: u64) -> String {
        format!("{}:{block_ms}", self.history_tag(action))
    }

    /// The last-seen key of an action.
    pub(crate) fn seen(&self, action: &Action) -> String {
        format!("{}:seen", self.history_tag(action))
    }

    /// The report marks of an action (or of the shared set): the hash of seqs and the zset of
    /// times, in one slot.
    pub(crate) fn report_marks(&self, action: &Action, shared: bool) -> (String, String) {
        let tag = self.marks_tag(action, shared);
        (format!("{tag}:reporters"), format!("{tag}:reporters:at"))
    }

    /// The zset of one top-denied bucket.
    pub(crate) fn denied(&self, action: &Action, bucket_ms: u64) -> String {
        format!("{{{}:denied:{}}}:{bucket_ms}", self.prefix, action.as_str())
    }
}
