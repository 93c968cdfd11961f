//! The model of the RLQS shares view (`app/rlqs.rs`): per key held over Envoy's quota filter
//! (RLQS, docs/rlqs.md), the rule's whole token bucket and each Envoy's share of it, from
//! `GET /v1/rlqs/shares`. Shown under a looked-up key in the Keys view, and for every key held
//! in the Live view.
//!
//! Keys, domains and addresses are untrusted text: kept as they are, rendered as text only.

use sluice_core::wire::{RlqsBucket, RlqsHolder, RlqsKeyShares, RlqsSharesBody};

use crate::format::duration_label;
use crate::scope::more_text;

/// How often the view reads the ledger while it shows (shares change on Envoy's 5 s reports
/// and sluice's 1 s tick).
pub const RLQS_REFRESH_MS: u64 = 2000;

/// `"20 burst · 10 per 1s"`.
pub fn bucket_text(b: &RlqsBucket) -> String {
    format!(
        "{} burst · {} per {}",
        b.max_tokens,
        b.tokens_per_fill,
        duration_label(f64::from(b.fill_interval_s))
    )
}

/// One Envoy's row.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderRow {
    /// The stream id (the row's identity while it lives).
    pub stream: u64,
    /// `"127.0.0.1:41234"`, or `"unknown address"`.
    pub envoy: String,
    /// `"domain sluice"`, or `"no domain yet"`.
    pub domain: String,
    /// `"open"` or `"closed (held until its TTL)"`.
    pub state: String,
    /// Whether its stream is open.
    pub open: bool,
    /// `"10 burst · 5 per 1s"`, or `"DENY_ALL (nothing left)"`.
    pub share_text: String,
    /// Its burst (0 when it holds none).
    pub max_tokens: u32,
    /// Its rate per fill (0 when it holds none).
    pub tokens_per_fill: u32,
    /// Its rate over the rule's, 0..=1: the drawn bar.
    pub fill: f64,
    /// `"9 allowed · 14 paid"`, with what was post-debited when any.
    pub used_text: String,
    /// `"7.5s"`.
    pub ttl_text: String,
}

/// One key's card.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCard {
    /// The action.
    pub action: String,
    /// The key.
    pub key: String,
    /// The rule's whole bucket: `"20 burst · 10 per 1s"`.
    pub total_text: String,
    /// What the shares add up to, against the whole: `"10 of 20 burst · 5 of 10 per 1s held by 2
    /// Envoys"`.
    pub sum_text: String,
    /// The rows, by stream.
    pub holders: Vec<HolderRow>,
    /// `"and 3 more Envoys"` past the backend's cap, else empty.
    pub more: String,
}

fn holder_row(h: &RlqsHolder, total: &RlqsBucket) -> HolderRow {
    let (share_text, max_tokens, tokens_per_fill) = match &h.share {
        Some(s) => (bucket_text(s), s.max_tokens, s.tokens_per_fill),
        None => ("DENY_ALL (nothing left)".to_owned(), 0, 0),
    };
    let fill = if total.tokens_per_fill == 0 {
        0.0
    } else {
        (f64::from(tokens_per_fill) / f64::from(total.tokens_per_fill)).min(1.0)
    };
    let mut used_text = format!("{} allowed · {} paid", h.allowed, h.paid);
    if h.post_debited > 0 {
        used_text += &format!(" · {} post-debited", h.post_debited);
    }
    HolderRow {
        stream: h.stream,
        envoy: h
            .peer
            .clone()
            .unwrap_or_else(|| "unknown address".to_owned()),
        domain: h
            .domain
            .as_ref()
            .map_or_else(|| "no domain yet".to_owned(), |d| format!("domain {d}")),
        state: if h.open {
            "open".to_owned()
        } else {
            "closed (held until its TTL)".to_owned()
        },
        open: h.open,
        share_text,
        max_tokens,
        tokens_per_fill,
        fill,
        used_text,
        ttl_text: duration_label(h.ttl_ms as f64 / 1000.0),
    }
}

fn card(k: &RlqsKeyShares) -> KeyCard {
    let envoys = if k.holders_total == 1 {
        "1 Envoy".to_owned()
    } else {
        format!("{} Envoys", k.holders_total)
    };
    KeyCard {
        action: k.action.clone(),
        key: k.key.clone(),
        total_text: bucket_text(&k.total),
        sum_text: format!(
            "{} of {} burst · {} of {} per {} held by {envoys}",
            k.sum.max_tokens,
            k.total.max_tokens,
            k.sum.tokens_per_fill,
            k.total.tokens_per_fill,
            duration_label(f64::from(k.total.fill_interval_s))
        ),
        holders: k.holders.iter().map(|h| holder_row(h, &k.total)).collect(),
        more: more_text(
            usize::try_from(k.holders_total)
                .unwrap_or(usize::MAX)
                .saturating_sub(k.holders.len()),
            "Envoys",
        ),
    }
}

/// The cards, in the backend's order (by action, then key).
pub fn cards(body: &RlqsSharesBody) -> Vec<KeyCard> {
    body.keys.iter().map(card).collect()
}

/// Under the cards: `"and 12 more keys"` past the backend's cap, else empty.
pub fn more_keys(body: &RlqsSharesBody) -> String {
    let total = usize::try_from(body.keys_total).unwrap_or(usize::MAX);
    more_text(total.saturating_sub(body.keys.len()), "keys held over RLQS")
}

/// `GET /v1/rlqs/shares`, for one key (any text, percent-encoded whole) or for all.
pub fn shares_url(key: Option<&str>) -> String {
    match key {
        Some(k) => format!(
            "/v1/rlqs/shares?key={}",
            crate::overrides::percent_encode(k)
        ),
        None => "/v1/rlqs/shares".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::wire::RlqsSum;

    fn body() -> RlqsSharesBody {
        let total = RlqsBucket {
            max_tokens: 20,
            tokens_per_fill: 10,
            fill_interval_s: 1,
        };
        let half = RlqsBucket {
            max_tokens: 10,
            tokens_per_fill: 5,
            fill_interval_s: 1,
        };
        RlqsSharesBody {
            at_ms: 1,
            streams: 2,
            keys_total: 3,
            truncated: true,
            keys: vec![RlqsKeyShares {
                action: "user".into(),
                key: "<b>alice</b>".into(),
                total,
                holders: vec![
                    RlqsHolder {
                        stream: 1,
                        peer: Some("127.0.0.1:4001".into()),
                        domain: Some("sluice".into()),
                        open: true,
                        share: Some(half),
                        paid: 14,
                        allowed: 9,
                        post_debited: 2,
                        ttl_ms: 7_500,
                    },
                    RlqsHolder {
                        stream: 2,
                        open: false,
                        ttl_ms: 3_000,
                        ..RlqsHolder::default()
                    },
                ],
                holders_total: 5,
                holders_truncated: true,
                sum: RlqsSum {
                    max_tokens: 10,
                    tokens_per_fill: 5,
                    paid: 14,
                    allowed: 9,
                },
            }],
        }
    }

    #[test]
    fn a_key_reads_its_whole_bucket_each_share_and_the_sum() {
        let cards = cards(&body());
        let c = &cards[0];
        assert_eq!(c.key, "<b>alice</b>", "kept as text");
        assert_eq!(c.total_text, "20 burst · 10 per 1s");
        assert_eq!(
            c.sum_text,
            "10 of 20 burst · 5 of 10 per 1s held by 5 Envoys"
        );
        assert_eq!(c.more, "and 3 more Envoys");
        let first = &c.holders[0];
        assert_eq!(first.envoy, "127.0.0.1:4001");
        assert_eq!(first.domain, "domain sluice");
        assert_eq!(first.state, "open");
        assert_eq!(first.share_text, "10 burst · 5 per 1s");
        assert_eq!(first.fill, 0.5);
        assert_eq!(first.used_text, "9 allowed · 14 paid · 2 post-debited");
        assert_eq!(first.ttl_text, "7.5s");
        let second = &c.holders[1];
        assert_eq!(second.share_text, "DENY_ALL (nothing left)");
        assert_eq!((second.max_tokens, second.fill), (0, 0.0));
        assert_eq!(second.envoy, "unknown address");
        assert_eq!(second.state, "closed (held until its TTL)");
        assert_eq!(more_keys(&body()), "and 2 more keys held over RLQS");
    }

    #[test]
    fn any_key_is_asked_for_whole() {
        assert_eq!(shares_url(None), "/v1/rlqs/shares");
        assert_eq!(shares_url(Some("a b&c")), "/v1/rlqs/shares?key=a%20b%26c");
    }
}
