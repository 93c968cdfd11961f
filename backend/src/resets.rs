//! Key resets made on this replica, announced to whatever holds a key's quota outside the store.
//! The RLQS ledger needs them: a reset empties the key's state in the store, but Envoy's quota
//! filter keeps enforcing the (possibly drained) token bucket it was assigned until it is sent a
//! fresh one ([`crate::rlqs`]).

use tokio::sync::broadcast;

/// Most resets waiting for a slow listener; past it the oldest are dropped for it (a burst of
/// resets larger than this is logged by the listener, and its next tick still applies rule
/// changes).
const BACKLOG: usize = 256;

/// One key reset under one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReset {
    /// The action.
    pub action: String,
    /// The key.
    pub key: String,
}

/// Where resets are announced. Cheap to share (one per [`crate::state::App`]).
pub struct Resets {
    tx: broadcast::Sender<KeyReset>,
}

impl Default for Resets {
    fn default() -> Self {
        Resets::new()
    }
}

impl Resets {
    /// Nobody listening yet.
    pub fn new() -> Resets {
        Resets {
            tx: broadcast::channel(BACKLOG).0,
        }
    }

    /// Tells every listener that `key` under `action` was reset (nobody listening is fine).
    pub fn announce(&self, action: &str, key: &str) {
        let _ = self.tx.send(KeyReset {
            action: action.to_owned(),
            key: key.to_owned(),
        });
    }

    /// Listens for resets from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<KeyReset> {
        self.tx.subscribe()
    }
}
