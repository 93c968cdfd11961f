//! The ledger read, never changed: per (action, key) held over RLQS, the rule's whole token
//! bucket and each holder's share of it, what was paid and used, and the sums
//! ([`Ledger::view`], `GET /v1/rlqs/shares`, asked through [`crate::rlqs::reader`]), and the
//! domain each stream's Envoy is bound to, kept only to be shown.

use std::time::Instant;

use sluice_core::wire::{
    RlqsBucket, RlqsHolder, RlqsKeyShares, RlqsSharesBody, RLQS_SHARES_MAX_HOLDERS,
    RLQS_SHARES_MAX_KEYS,
};

use super::{KeyEntry, KeyId, Ledger, StreamId, NANO};
use crate::rlqs::reader::SharesFilter;

fn units(nano: u128) -> u64 {
    u64::try_from(nano / NANO).unwrap_or(u64::MAX)
}

impl Ledger {
    /// Notes the domain `stream` is bound to (its first report's), for the view.
    pub fn bind_domain(&mut self, stream: StreamId, domain: String) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.info.domain = Some(domain);
        }
    }

    /// The keys `filter` admits, at most [`RLQS_SHARES_MAX_KEYS`] (by action, then key), each
    /// with at most [`RLQS_SHARES_MAX_HOLDERS`] holders (by stream) and the sums of all of
    /// them. `at_ms` is the wall clock to stamp it with; TTLs are counted from `now`.
    pub fn view(&self, filter: &SharesFilter, now: Instant, at_ms: u64) -> RlqsSharesBody {
        let streams = self.streams.values().filter(|s| s.open).count();
        let mut body = RlqsSharesBody {
            at_ms,
            streams: u64::try_from(streams).unwrap_or(u64::MAX),
            ..RlqsSharesBody::default()
        };
        for (id, entry) in self
            .keys
            .iter()
            .filter(|(id, _)| filter.admits(&id.action, &id.key))
        {
            body.keys_total += 1;
            if body.keys.len() >= RLQS_SHARES_MAX_KEYS {
                body.truncated = true;
                continue;
            }
            body.keys.push(self.key_shares(id, entry, now));
        }
        body
    }

    fn key_shares(&self, id: &KeyId, entry: &KeyEntry, now: Instant) -> RlqsKeyShares {
        let mut out = RlqsKeyShares {
            action: id.action.clone(),
            key: id.key.clone(),
            total: RlqsBucket::from(entry.total()),
            holders_total: u64::try_from(entry.shares.len()).unwrap_or(u64::MAX),
            ..RlqsKeyShares::default()
        };
        for ((stream, _), share) in &entry.shares {
            let paid = units(share.paid_nano);
            if let Some(held) = share.held {
                out.sum.max_tokens += u64::from(held.max_tokens);
                out.sum.tokens_per_fill += u64::from(held.tokens_per_fill);
            }
            out.sum.paid = out.sum.paid.saturating_add(paid);
            out.sum.allowed = out.sum.allowed.saturating_add(share.used);
            if out.holders.len() >= RLQS_SHARES_MAX_HOLDERS {
                out.holders_truncated = true;
                continue;
            }
            let info = self.streams.get(stream);
            let ttl = share.expires.saturating_duration_since(now);
            out.holders.push(RlqsHolder {
                stream: *stream,
                peer: info.and_then(|s| s.info.peer).map(|p| p.to_string()),
                domain: info.and_then(|s| s.info.domain.clone()),
                open: info.is_some_and(|s| s.open),
                share: share.held.map(RlqsBucket::from),
                paid,
                allowed: share.used,
                post_debited: share.post_debited,
                ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
    use sluice_core::rlqs::shape::Shape;
    use sluice_core::wire::RlqsSum;
    use sluice_core::Rule;
    use tokio::sync::mpsc;

    use std::net::SocketAddr;

    use super::super::Share;
    use super::*;
    use crate::rlqs::metrics::RlqsMetrics;
    use crate::rlqs::reader::StreamInfo;
    use crate::rlqs::settings::Settings;

    fn rule() -> Arc<Rule> {
        let json = r#"{"action":"user","algorithm":"token_bucket","capacity":20,"rate":{"count":10,"period":"1s"}}"#;
        Arc::new(serde_json::from_str(json).unwrap())
    }

    fn share(held: Option<Shape>, paid: u64, used: u64, expires: Instant) -> Share {
        Share {
            bucket: BucketId::default(),
            held,
            counted_tpf: held.map_or(0, |h| h.tokens_per_fill),
            counted_until: expires,
            expires,
            paid_nano: u128::from(paid) * NANO,
            used,
            post_debited: 0,
            idle_reports: 0,
            demand: None,
            peer: 0,
        }
    }

    fn half() -> Shape {
        Shape {
            max_tokens: 10,
            tokens_per_fill: 5,
            fill_interval_s: 1,
        }
    }

    /// Two streams holding alice (one denied), one holding bob; stream 2 closed.
    fn ledger(now: Instant) -> Ledger {
        let mut ledger = Ledger::new(&Settings::default(), RlqsMetrics::default());
        for (stream, port) in [(1, 4001), (2, 4002)] {
            let (tx, _rx) = mpsc::channel(1);
            let info = StreamInfo {
                peer: Some(SocketAddr::from(([127, 0, 0, 1], port))),
                domain: None,
            };
            ledger.open(stream, info, tx);
        }
        ledger.bind_domain(1, "edge".into());
        if let Some(s) = ledger.streams.get_mut(&2) {
            s.open = false;
        }
        let ttl = now + Duration::from_millis(7_500);
        let alice = BTreeMap::from([
            ((1, "a".to_owned()), share(Some(half()), 14, 9, ttl)),
            ((2, "a".to_owned()), share(None, 0, 2, ttl)),
        ]);
        let bob = BTreeMap::from([((1, "b".to_owned()), share(Some(half()), 10, 0, ttl))]);
        for (key, shares) in [("alice", alice), ("bob", bob)] {
            let id = KeyId {
                action: "user".into(),
                key: key.into(),
            };
            let entry = KeyEntry {
                shares,
                ..KeyEntry::new(rule())
            };
            ledger.keys.insert(id, entry);
        }
        ledger
    }

    #[test]
    fn a_key_shows_the_rules_bucket_each_holder_and_the_sums() {
        let now = Instant::now();
        let ledger = ledger(now);
        let filter = SharesFilter {
            action: None,
            key: Some("alice".into()),
        };
        let body = ledger.view(&filter, now, 42);
        assert_eq!((body.at_ms, body.streams, body.keys_total), (42, 1, 1));
        assert!(!body.truncated);
        let alice = &body.keys[0];
        assert_eq!(
            (alice.action.as_str(), alice.key.as_str()),
            ("user", "alice")
        );
        let whole = RlqsBucket {
            max_tokens: 20,
            tokens_per_fill: 10,
            fill_interval_s: 1,
        };
        assert_eq!(alice.total, whole);
        assert_eq!(alice.holders_total, 2);
        let first = &alice.holders[0];
        assert_eq!(first.peer.as_deref(), Some("127.0.0.1:4001"));
        assert_eq!(first.domain.as_deref(), Some("edge"));
        assert!(first.open);
        assert_eq!(first.share, Some(RlqsBucket::from(half())));
        assert_eq!((first.paid, first.allowed, first.ttl_ms), (14, 9, 7_500));
        let second = &alice.holders[1];
        assert!(!second.open, "stream 2 closed");
        assert_eq!(second.share, None, "DENY_ALL holds nothing");
        assert_eq!(second.domain, None);
        let sum = RlqsSum {
            max_tokens: 10,
            tokens_per_fill: 5,
            paid: 14,
            allowed: 11,
        };
        assert_eq!(alice.sum, sum);
    }

    #[test]
    fn filters_match_exactly_and_the_lists_are_bounded() {
        let now = Instant::now();
        let mut ledger = ledger(now);
        let all = ledger.view(&SharesFilter::default(), now, 0);
        let keys: Vec<&str> = all.keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["alice", "bob"]);
        let other = SharesFilter {
            action: Some("use".into()),
            key: None,
        };
        assert_eq!(ledger.view(&other, now, 0).keys_total, 0);

        // Past the caps: the first keys and holders listed, all of them counted and summed.
        let later = now + Duration::from_secs(1);
        let many = RLQS_SHARES_MAX_HOLDERS + 1;
        let shares = (0..many)
            .map(|i| {
                (
                    (i as u64 + 10, "x".to_owned()),
                    share(Some(half()), 1, 1, later),
                )
            })
            .collect();
        let id = KeyId {
            action: "user".into(),
            key: "crowd".into(),
        };
        let entry = KeyEntry {
            shares,
            ..KeyEntry::new(rule())
        };
        ledger.keys.insert(id, entry);
        for i in 0..RLQS_SHARES_MAX_KEYS {
            let id = KeyId {
                action: "zz".into(),
                key: format!("k{i}"),
            };
            let entry = KeyEntry {
                shares: BTreeMap::new(),
                ..KeyEntry::new(rule())
            };
            ledger.keys.insert(id, entry);
        }
        let body = ledger.view(&SharesFilter::default(), now, 0);
        assert!(body.truncated);
        assert_eq!(body.keys.len(), RLQS_SHARES_MAX_KEYS);
        assert_eq!(body.keys_total, (RLQS_SHARES_MAX_KEYS + 3) as u64);
        let crowd = body.keys.iter().find(|k| k.key == "crowd").unwrap();
        assert!(crowd.holders_truncated);
        assert_eq!(crowd.holders.len(), RLQS_SHARES_MAX_HOLDERS);
        assert_eq!(crowd.holders_total, many as u64);
        assert_eq!(crowd.sum.allowed, many as u64);
        assert_eq!(crowd.holders[0].peer, None, "a stream the ledger never saw");
    }
}
