//! The native shared state: the lease table and the denial cache of every worker, as one
//! process-wide map with versions (what proxy-wasm's shared data is to the wasm build).
//!
//! Why sharded: a leased hit reads and conditionally writes its lease slot; with one lock every
//! worker would queue on it. The map is split into [`SHARDS`] shards by a hash of the key, each
//! behind its own mutex held only for one lookup or one write (no allocation under the lock
//! except a new key's insertion), so two workers contend only when their keys share a shard.
//! The keys are the lease and cache slot keys (`lease::table::slot_keys`, `cache::slot_key`),
//! bounded by the configuration's slot counts; [`MAX_KEYS`] bounds the whole map as well, past
//! which a new key is refused (a lease or a cached denial is an optimisation: the request then
//! calls out).
//!
//! Versions follow Envoy's shared-data CAS: never 0, changed by every write, so
//! `set_if(key, value, version)` succeeds only when nobody wrote the key since it was read.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use sluice_filter::host::CasError;

/// Shards of the map (a power of two).
pub const SHARDS: usize = 64;

/// Keys the whole map may hold.
pub const MAX_KEYS: usize = 1 << 20;

#[derive(Debug)]
struct Entry {
    value: Vec<u8>,
    version: u32,
}

/// The process-wide map.
#[derive(Debug)]
pub struct SharedStore {
    shards: Vec<Mutex<HashMap<String, Entry>>>,
    keys: AtomicUsize,
    max_keys: usize,
}

static STORE: OnceLock<SharedStore> = OnceLock::new();

/// The one store of this process.
pub fn store() -> &'static SharedStore {
    STORE.get_or_init(|| SharedStore::new(MAX_KEYS))
}

impl SharedStore {
    /// An empty store holding at most `max_keys` keys.
    pub fn new(max_keys: usize) -> SharedStore {
        SharedStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            keys: AtomicUsize::new(0),
            max_keys,
        }
    }

    fn shard(&self, key: &str) -> Option<std::sync::MutexGuard<'_, HashMap<String, Entry>>> {
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
        let index = usize::try_from(hash).unwrap_or_default() & (SHARDS - 1);
        // A poisoned shard (a panic while it was held, caught at the hook) is still consistent:
        // every write under it is one insert or one assignment.
        self.shards
            .get(index)
            .map(|m| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The value and its version; `None` when absent.
    pub fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        let shard = self.shard(key)?;
        shard.get(key).map(|e| (e.value.clone(), e.version))
    }

    /// Writes unconditionally (refused silently past [`MAX_KEYS`]).
    pub fn set(&self, key: &str, value: &[u8]) {
        let _ = self.write(key, value, None);
    }

    /// Envoy's check-and-set: an existing key is written only if its version is still
    /// `version`; an absent key is inserted whatever `version` says.
    pub fn set_if(&self, key: &str, value: &[u8], version: u32) -> Result<(), CasError> {
        self.write(key, value, Some(version))
    }

    fn write(&self, key: &str, value: &[u8], expected: Option<u32>) -> Result<(), CasError> {
        let Some(mut shard) = self.shard(key) else {
            return Err(CasError::Failed);
        };
        if let Some(entry) = shard.get_mut(key) {
            if expected.is_some_and(|v| v != entry.version) {
                return Err(CasError::Conflict);
            }
            entry.value.clear();
            entry.value.extend_from_slice(value);
            entry.version = entry.version.wrapping_add(1).max(1);
            return Ok(());
        }
        if self.keys.fetch_add(1, Ordering::Relaxed) >= self.max_keys {
            self.keys.fetch_sub(1, Ordering::Relaxed);
            return Err(CasError::Failed);
        }
        shard.insert(
            key.to_owned(),
            Entry {
                value: value.to_vec(),
                version: 1,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_guard_writes() {
        let s = SharedStore::new(8);
        assert_eq!(s.get("a"), None);
        assert_eq!(s.set_if("a", b"1", 0), Ok(()));
        let (v, version) = s.get("a").unwrap();
        assert_eq!(v, b"1");
        assert_ne!(version, 0);
        assert_eq!(s.set_if("a", b"2", version), Ok(()));
        assert_eq!(s.set_if("a", b"3", version), Err(CasError::Conflict));
        assert_eq!(s.get("a").unwrap().0, b"2");
        s.set("a", b"4");
        assert_eq!(s.get("a").unwrap().0, b"4");
    }

    #[test]
    fn bounded() {
        let s = SharedStore::new(2);
        s.set("a", b"1");
        s.set("b", b"1");
        assert_eq!(s.set_if("c", b"1", 0), Err(CasError::Failed));
        assert_eq!(s.get("c"), None);
        // Existing keys still change.
        assert_eq!(s.set_if("a", b"2", 0), Err(CasError::Conflict));
        s.set("a", b"2");
        assert_eq!(s.get("a").unwrap().0, b"2");
    }

    #[test]
    fn workers_agree() {
        let s = std::sync::Arc::new(SharedStore::new(16));
        s.set("n", &0u64.to_le_bytes());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = std::sync::Arc::clone(&s);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        loop {
                            let (v, version) = s.get("n").unwrap();
                            let n = u64::from_le_bytes(v.try_into().unwrap()) + 1;
                            if s.set_if("n", &n.to_le_bytes(), version).is_ok() {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (v, _) = s.get("n").unwrap();
        assert_eq!(u64::from_le_bytes(v.try_into().unwrap()), 4000);
    }
}
