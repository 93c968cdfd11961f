//! History and top denied in Redis. Per action, everything shares one hash tag, so each script
//! touches one Cluster slot:
//!
//! - history: one hash per 10-minute block, `{<prefix>:history:<action>}:<block_ms>`, field = a
//!   step's index in the block (0–59), value = its counts `"a l d c p f"` (allowed, leased,
//!   denied, cached_denied, passed_unchecked, failed), TTL an hour + 10 min. Small hashes keep
//!   Redis's compact encoding, and an hour is read with 7 HGETALLs: with one key per step, 20
//!   actions × 360 lookups kept Redis busy ~35 ms per read (measured), past the command timeout;
//! - last seen: string `{<prefix>:history:<action>}:seen` (ms), TTL a day;
//! - report marks: per action, hash `{<prefix>:history:<action>}:reporters` (reporter -> the
//!   highest filter report seq applied) and zset `{<prefix>:history:<action>}:reporters:at`
//!   (reporter -> when last applied, ms), at most `MAX_REPORTERS_PER_ACTION` members, TTL a day
//!   from the last write (see `ReportMark` and `history::marks`); actions without a rule share
//!   one pair, `{<prefix>:history:(unknown)}:reporters[:at]`, by `<action>/<reporter>` (no action
//!   is named `(unknown)`: parentheses are not allowed in action names);
//! - top denied: zset `{<prefix>:denied:<action>}:<minute_ms>`, key -> denials, at most
//!   [`DENIED_KEEP`] members, TTL 7 min.
//!
//! Every one of them carries a TTL, so a `volatile-*` eviction policy may evict them (a chart
//! loses a step; decisions are unaffected), never the rules.

use std::collections::BTreeMap;

use async_trait::async_trait;
use redis::ScriptInvocation;
use sluice_core::limits::{MAX_REPORTERS_PER_ACTION, REPORT_MARK_SETTLE_MS};
use sluice_core::wire::HISTORY_STEP_MS;
use sluice_core::Action;

use super::errors::parse_u64;
use super::RedisStore;
use crate::history::marks::{member, ReportApplied};
use crate::history::{
    denied_bucket, denied_buckets, last_seen_within_span, rank_denied, DeniedRecord, HistoryRecord,
    ReportMark, StoredHistory, Tally, DENIED_KEEP, DENIED_TTL_MS, HISTORY_TTL_MS,
    LAST_SEEN_SPAN_MS, REPORT_MARK_TTL_MS,
};
use crate::store::{HistoryStore, StoreError};

pub(super) mod keys;

/// Width of one stored history block: 60 steps.
const BLOCK_MS: u64 = 60 * HISTORY_STEP_MS;

/// The block holding the step starting at `step_ms`, and the step's index in it.
fn block_of(step_ms: u64) -> (u64, u64) {
    let block = step_ms - step_ms % BLOCK_MS;
    (block, (step_ms - block) / HISTORY_STEP_MS)
}

/// Parses a stored step's counts `"a l d c p f"`.
fn parse_counts(text: &str, key: &str) -> Result<Tally, StoreError> {
    let mut counts = [0u64; 6];
    let mut parts = text.split(' ');
    for slot in &mut counts {
        *slot = parse_u64(parts.next().unwrap_or(""), key)?;
    }
    if parts.next().is_some() {
        return Err(StoreError::Corrupt(format!(
            "{key} holds {text:?}, not six counts"
        )));
    }
    Ok(Tally::from_values(counts))
}

impl RedisStore {
    /// `history_record.lua` for one record (its two keys and ten arguments).
    fn record_invocation(&self, r: &HistoryRecord) -> ScriptInvocation<'_> {
        self.record_invocation_in(&self.history.history_tag(&r.action), r)
    }

    /// [`Self::record_invocation`] with the record's keys under the hash tag `tag`.
    fn record_invocation_in(&self, tag: &str, r: &HistoryRecord) -> ScriptInvocation<'_> {
        let (block, index) = block_of(r.step_ms);
        let mut invocation = self.history.record.key(format!("{tag}:{block}"));
        invocation
            .key(format!("{tag}:seen"))
            .arg(HISTORY_TTL_MS)
            .arg(LAST_SEEN_SPAN_MS)
            .arg(r.last_seen_ms)
            .arg(index);
        // What to add less what to take back, signed: the script keeps each count at zero or
        // more.
        for (add, back) in r.tally.values().into_iter().zip(r.withdrawn.values()) {
            invocation.arg(i128::from(add) - i128::from(back));
        }
        invocation
    }
}

#[async_trait]
impl HistoryStore for RedisStore {
    /// See [`crate::store::HistoryStore::record_history`]: one script per record, pipelined under one
    /// permit and one timeout.
    async fn record_history(&self, batch: &[HistoryRecord]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let calls = batch.iter().map(|r| {
            let mut conn = self.conn.clone();
            let invocation = self.record_invocation(r);
            async move { invocation.invoke_async::<i64>(&mut conn).await }
        });
        self.batch("history", "history_record", calls).await
    }

    /// See [`crate::store::HistoryStore::apply_report`]: `history_record.lua` with the action's
    /// marks (hash and zset) as its third and fourth keys, in the action's slot, so the check,
    /// the bound, the raise and the add are one step. A shared mark (an action without a rule)
    /// lives in the shared tag, and so do the record's keys then: its record adds nothing, so
    /// they are never written.
    async fn apply_report(
        &self,
        mark: &ReportMark,
        record: &HistoryRecord,
    ) -> Result<ReportApplied, StoreError> {
        let (seqs, times) = self.history.report_marks(&record.action, mark.shared);
        let mut invocation = if mark.shared {
            let tag = self.history.marks_tag(&record.action, true);
            self.record_invocation_in(&tag, record)
        } else {
            self.record_invocation(record)
        };
        invocation
            .key(&seqs)
            .key(&times)
            .arg(mark.seq)
            .arg(REPORT_MARK_TTL_MS)
            .arg(member(record.action.as_str(), &mark.reporter, mark.shared))
            .arg(mark.now_ms)
            .arg(MAX_REPORTERS_PER_ACTION)
            .arg(REPORT_MARK_SETTLE_MS);
        let (code, dropped, shed): (i64, u64, u64) =
            self.script(&seqs, "history_record", &invocation).await?;
        match code {
            1 => Ok(ReportApplied::Applied { dropped, shed }),
            0 => Ok(ReportApplied::Copy),
            other => Err(StoreError::Script {
                script: "history_record",
                message: format!("unexpected reply code {other}"),
            }),
        }
    }

    /// See [`crate::store::HistoryStore::read_history`]: one script.
    async fn read_history(
        &self,
        action: &Action,
        first_step_ms: u64,
        steps: usize,
        now_ms: u64,
    ) -> Result<StoredHistory, StoreError> {
        let seen = self.history.seen(action);
        let end = first_step_ms.saturating_add(steps as u64 * HISTORY_STEP_MS);
        let first_block = block_of(first_step_ms).0;
        let blocks: Vec<u64> = (0..)
            .map(|i| first_block + i * BLOCK_MS)
            .take_while(|b| *b < end)
            .collect();
        let mut invocation = self.history.read.prepare_invoke();
        for b in &blocks {
            invocation.key(self.history.block(action, *b));
        }
        invocation.key(&seen);
        let (last, held): (String, Vec<Vec<String>>) =
            self.script(&seen, "history_read", &invocation).await?;
        let mut out = StoredHistory {
            steps: Vec::new(),
            last_seen_ms: last_seen_within_span(parse_u64(&last, &seen)?, now_ms),
        };
        for (block, fields) in blocks.iter().zip(&held) {
            let key = self.history.block(action, *block);
            for pair in fields.chunks(2) {
                let [index, counts] = pair else {
                    return Err(StoreError::Corrupt(format!("{key}: odd HGETALL reply")));
                };
                let step_ms = block + parse_u64(index, &key)? * HISTORY_STEP_MS;
                if (first_step_ms..end).contains(&step_ms) {
                    out.steps.push((step_ms, parse_counts(counts, &key)?));
                }
            }
        }
        Ok(out)
    }

    /// See [`crate::store::HistoryStore::record_denied`]: one script per (action, bucket).
    async fn record_denied(&self, batch: &[DeniedRecord]) -> Result<(), StoreError> {
        let mut by_bucket: BTreeMap<(&Action, u64), Vec<&DeniedRecord>> = BTreeMap::new();
        for r in batch.iter().filter(|r| r.denied > 0) {
            by_bucket
                .entry((&r.action, denied_bucket(r.at_ms)))
                .or_default()
                .push(r);
        }
        if by_bucket.is_empty() {
            return Ok(());
        }
        let calls = by_bucket.into_iter().map(|((action, bucket), rows)| {
            let mut conn = self.conn.clone();
            let mut invocation = self
                .history
                .denied_record
                .key(self.history.denied(action, bucket));
            invocation.arg(DENIED_KEEP).arg(DENIED_TTL_MS);
            for r in rows {
                invocation.arg(&r.key).arg(r.denied);
            }
            async move { invocation.invoke_async::<i64>(&mut conn).await }
        });
        self.batch("denied", "denied_record", calls).await
    }

    /// See [`crate::store::HistoryStore::top_denied`]: one script over the buckets.
    async fn top_denied(
        &self,
        action: &Action,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let keys: Vec<String> = denied_buckets(now_ms)
            .into_iter()
            .map(|b| self.history.denied(action, b))
            .collect();
        let first = keys.first().cloned().unwrap_or_default();
        let mut invocation = self.history.denied_top.prepare_invoke();
        for k in &keys {
            invocation.key(k);
        }
        let flat: Vec<String> = self.script(&first, "denied_top", &invocation).await?;
        let mut rows = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks(2) {
            let [key, n] = pair else {
                return Err(StoreError::Corrupt(format!(
                    "{first}: odd top-denied reply"
                )));
            };
            rows.push((key.clone(), parse_u64(n, &first)?));
        }
        Ok(rank_denied(rows, limit))
    }

    /// See [`crate::store::HistoryStore::key_denied`]: one script over the action's buckets.
    async fn key_denied(
        &self,
        action: &Action,
        key: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, u64)>, StoreError> {
        let buckets = denied_buckets(now_ms);
        let keys: Vec<String> = buckets
            .iter()
            .map(|b| self.history.denied(action, *b))
            .collect();
        let first = keys.first().cloned().unwrap_or_default();
        let mut invocation = self.history.denied_key.prepare_invoke();
        for k in &keys {
            invocation.key(k);
        }
        invocation.arg(key);
        let counts: Vec<String> = self.script(&first, "denied_key", &invocation).await?;
        let mut out = Vec::new();
        for (bucket, n) in buckets.iter().zip(&counts) {
            let n = parse_u64(n, &first)?;
            if n > 0 {
                out.push((*bucket, n));
            }
        }
        Ok(out)
    }
}
