//! The configuration in force on this replica, its rules published to the store, and the reload
//! when a file changes.
//!
//! Every replica reads the same files (a ConfigMap, a volume), matches descriptors locally, and
//! publishes the rules the files imply to the store: a rule that differs is put, an owned rule
//! the files no longer imply is deleted, each with an audit entry (`who: ratelimit-config`), which
//! bumps the rules version every replica polls. Publishing is idempotent (equal rules are not
//! written), so replicas reading the same files agree without coordination; the store, not a
//! replica, stays the one source of the rules the decisions use, so levels, history, top keys
//! and overrides work for these limits as for any rule.
//!
//! The watcher reads the files every [`POLL`] and compares a digest of names and contents (no
//! inotify: a ConfigMap update swaps a symlink, which a digest sees and a file watch often does
//! not). A change that does not load is refused at ERROR, naming every file and field, and the
//! last good configuration stays in force; the same bad content is not reported again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluice_core::wire::ratelimit::file_owner;
use sluice_core::wire::{RatelimitConfigBody, RatelimitLimit};
use sluice_core::Rule;
use tokio::sync::watch;

use super::config::ConfigError;
use super::load::{self, Loaded, MergeDomains};
use super::matcher::Limit;
use crate::clock::now_ms;
use crate::rules::RuleCache;
use crate::store::{AuditStamp, RuleChange, RuleStore, StoreError};

/// How often the files are read: a change is in force within one poll plus one publish.
pub const POLL: Duration = Duration::from_millis(200);

/// Who the audit trail names for changes a file made.
pub const AUDIT_WHO: &str = "ratelimit-config";

/// The configuration in force on this replica.
pub struct Live {
    path: PathBuf,
    merge: MergeDomains,
    tx: watch::Sender<Arc<Loaded>>,
    /// Why the newest change was refused (empty when the files in force are the newest).
    refused: watch::Sender<Vec<String>>,
}

/// Why the configuration could not be put in force at start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The files do not load; every refusal, one per line.
    #[error("--ratelimit-config refused:\n{}", list(.0))]
    Invalid(Vec<ConfigError>),
    /// Its rules could not be published.
    #[error("cannot publish the ratelimit config's rules to the store: {0}")]
    Store(#[from] StoreError),
}

/// Refusals one per line, indented.
pub fn list(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(|e| format!("  {e}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Live {
    /// The configuration in force (a cheap `Arc` clone).
    pub fn current(&self) -> Arc<Loaded> {
        self.tx.borrow().clone()
    }

    /// `--ratelimit-config`'s path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `GET /v1/ratelimit-config`'s body.
    pub fn body(&self) -> RatelimitConfigBody {
        let loaded = self.current();
        RatelimitConfigBody {
            path: Some(self.path.display().to_string()),
            files: loaded
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect(),
            limits: loaded.limits.iter().map(|l| wire_limit(l)).collect(),
            refused: self.refused.borrow().clone(),
        }
    }
}

fn wire_limit(limit: &Limit) -> RatelimitLimit {
    let per_unit = limit.per_unit();
    RatelimitLimit {
        path: limit.path.clone(),
        action: limit.action.clone(),
        unit: per_unit.map(|(u, _)| u.to_string()),
        requests_per_unit: per_unit.map(|(_, n)| n),
        unlimited: per_unit.is_none(),
        name: limit.name.clone(),
        replaces: limit.replaces.clone(),
        shadow_mode: limit.shadow_mode,
        quota_mode: limit.quota_mode,
    }
}

/// Loads `path`, publishes its rules and returns the configuration in force.
pub async fn start(
    path: &Path,
    merge: MergeDomains,
    store: &dyn RuleStore,
    cache: &RuleCache,
) -> Result<Arc<Live>, StartError> {
    let loaded = load::load(path, merge).map_err(StartError::Invalid)?;
    let changed = publish(store, cache, path, &loaded).await?;
    tracing::info!(
        path = %path.display(),
        files = loaded.files.len(),
        domains = loaded.domains.len(),
        rules = loaded.rules.len(),
        changed,
        "ratelimit config loaded (envoyproxy/ratelimit format)"
    );
    let (tx, _) = watch::channel(Arc::new(loaded));
    let (refused, _) = watch::channel(Vec::new());
    Ok(Arc::new(Live {
        path: path.to_owned(),
        merge,
        tx,
        refused,
    }))
}

/// Whether a rule is owned by a file under `path`.
fn owned_by(rule: &Rule, path: &Path) -> bool {
    file_owner(rule.description()).is_some_and(|f| Path::new(f).starts_with(path))
}

/// Makes the store's rules what the files imply: puts each differing rule, deletes owned rules
/// no longer implied, each audited; reloads the cache after any write. Returns how many changed.
pub async fn publish(
    store: &dyn RuleStore,
    cache: &RuleCache,
    path: &Path,
    loaded: &Loaded,
) -> Result<usize, StoreError> {
    // The store's newest rules first: another replica reading the same files may have published
    // them already, and then there is nothing to write (or to audit twice).
    cache.reload(store).await?;
    let current = cache.current();
    let stamp = AuditStamp {
        at_ms: now_ms(),
        who: AUDIT_WHO.to_owned(),
    };
    let mut changes = Vec::new();
    for rule in &loaded.rules {
        if current.rules.get(rule.action().as_str()).map(|r| &**r) != Some(rule) {
            changes.push(RuleChange::PutRule(rule.clone()));
        }
    }
    let implied: std::collections::HashSet<&str> =
        loaded.rules.iter().map(|r| r.action().as_str()).collect();
    for rule in current.rules.values() {
        if !implied.contains(rule.action().as_str()) && owned_by(rule, path) {
            changes.push(RuleChange::DeleteRule(rule.action().clone()));
        }
    }
    for change in &changes {
        store.change_rules(change, Some(&stamp)).await?;
    }
    if !changes.is_empty() {
        cache.reload(store).await?;
    }
    Ok(changes.len())
}

/// Reads the files every [`POLL`] until `stop`; puts a changed configuration in force (see the
/// module docs).
pub async fn watch_loop(
    live: Arc<Live>,
    store: Arc<dyn RuleStore>,
    cache: Arc<RuleCache>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = crate::clock::ticker(POLL);
    // The digest last refused, so one bad edit is reported once; and whether the last good
    // configuration still waits to be published (the store was down).
    let mut refused: Option<[u8; 32]> = None;
    let mut unpublished = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let files = match load::read(&live.path) {
            Ok(f) => f,
            Err(e) => {
                let digest = load::fingerprint(&[(e.file.clone(), e.to_string())]);
                if refused != Some(digest) {
                    tracing::error!(error = %e, "ratelimit config: cannot read the files; keeping the last good configuration");
                    refused = Some(digest);
                    live.refused.send_replace(vec![e.to_string()]);
                }
                continue;
            }
        };
        let digest = load::fingerprint(&files);
        let current = live.current();
        if digest == current.fingerprint {
            if unpublished {
                unpublished = publish_logged(&live, store.as_ref(), &cache, &current).await;
            }
            continue;
        }
        if refused == Some(digest) {
            continue;
        }
        match load::build(&files, live.merge) {
            Ok(loaded) => {
                refused = None;
                live.refused.send_replace(Vec::new());
                // Rules first, then the matcher: a new or changed limit is never matched before
                // its rule is in the cache (a store down only delays the rules).
                unpublished = publish_logged(&live, store.as_ref(), &cache, &loaded).await;
                tracing::info!(
                    path = %live.path.display(),
                    files = loaded.files.len(),
                    domains = loaded.domains.len(),
                    rules = loaded.rules.len(),
                    "ratelimit config changed: reloaded"
                );
                live.tx.send_replace(Arc::new(loaded));
            }
            Err(errors) => {
                refused = Some(digest);
                live.refused
                    .send_replace(errors.iter().map(ToString::to_string).collect());
                for e in &errors {
                    tracing::error!(file = %e.file.display(), field = %e.error.field, reason = %e.error.reason, "ratelimit config refused: {e}");
                }
                tracing::error!(
                    path = %live.path.display(),
                    errors = errors.len(),
                    "ratelimit config change refused ({} error(s) above); keeping the last good configuration",
                    errors.len()
                );
            }
        }
    }
}

/// Publishes; on failure logs and returns true (retry on the next poll).
async fn publish_logged(
    live: &Live,
    store: &dyn RuleStore,
    cache: &RuleCache,
    loaded: &Loaded,
) -> bool {
    match publish(store, cache, &live.path, loaded).await {
        Ok(changed) => {
            if changed > 0 {
                tracing::info!(changed, "ratelimit config: rules published");
            }
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "ratelimit config: cannot publish the rules to the store; matching with the new files, retrying the publish");
            true
        }
    }
}
