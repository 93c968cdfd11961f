//! The memory store's activity state ([`ActivityLog`]), apart from the trait that serves it
//! (`../activity.rs`), so that `mod.rs` holds it without importing the trait's file.

use std::collections::HashMap;
use std::sync::Mutex;

use sluice_core::Action;

use crate::store::Activity;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub(crate) last_seen_ms: u64,
    pub(crate) allowed: u64,
    pub(crate) denied: u64,
}

/// Per action: key → last seen and cumulative counts, at most `keep` keys.
pub(crate) struct ActivityLog {
    pub(crate) keep: usize,
    pub(crate) actions: Mutex<HashMap<Action, HashMap<String, Counts>>>,
}

impl ActivityLog {
    /// A log keeping the newest `keep` keys of each action.
    pub(crate) fn new(keep: usize) -> ActivityLog {
        ActivityLog {
            keep,
            actions: Mutex::new(HashMap::new()),
        }
    }

    /// Adds a batch: last seen is the newest seen, counts add up.
    pub(crate) fn record(&self, batch: &[Activity]) {
        let mut actions = self
            .actions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for item in batch {
            let keys = actions.entry(item.action.clone()).or_default();
            let counts = keys.entry(item.key.clone()).or_default();
            counts.last_seen_ms = counts.last_seen_ms.max(item.last_seen_ms);
            counts.allowed += item.allowed;
            counts.denied += item.denied;
        }
        for keys in actions.values_mut() {
            if keys.len() > self.keep {
                let mut newest: Vec<(String, Counts)> = keys.drain().collect();
                sort_newest_first(&mut newest);
                newest.truncate(self.keep);
                keys.extend(newest);
            }
        }
    }

    /// The newest `limit` keys of `action`, newest first (ties: key descending, as Redis does).
    pub(crate) fn recent(&self, action: &Action, limit: usize) -> Vec<Activity> {
        let actions = self
            .actions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(keys) = actions.get(action) else {
            return Vec::new();
        };
        let mut rows: Vec<(String, Counts)> = keys.iter().map(|(k, c)| (k.clone(), *c)).collect();
        sort_newest_first(&mut rows);
        rows.into_iter()
            .take(limit)
            .map(|(key, c)| Activity {
                action: action.clone(),
                key,
                last_seen_ms: c.last_seen_ms,
                allowed: c.allowed,
                denied: c.denied,
            })
            .collect()
    }
}

impl ActivityLog {
    /// When `key` was last seen under `action`, if it is among the kept keys.
    pub(crate) fn last_seen(&self, action: &Action, key: &str) -> Option<u64> {
        let actions = self
            .actions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        actions
            .get(action)
            .and_then(|keys| keys.get(key))
            .map(|c| c.last_seen_ms)
    }
}

pub(crate) fn sort_newest_first(rows: &mut [(String, Counts)]) {
    rows.sort_by(|a, b| {
        b.1.last_seen_ms
            .cmp(&a.1.last_seen_ms)
            .then_with(|| b.0.cmp(&a.0))
    });
}
