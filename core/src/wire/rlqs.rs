//! The RLQS server's ledger as operators see it: `GET /v1/rlqs/shares` (per (action, key) held
//! over Envoy's Rate Limit Quota Service, the rule's whole token bucket and each Envoy's share of
//! it) and the RLQS line of `GET /readyz`. Read-only: looking changes no share.
//!
//! Behind the admin token: a share names an Envoy's address and the key it limits.

use serde::{Deserialize, Serialize};

/// Most (action, key) entries one `GET /v1/rlqs/shares` lists (sorted by action, then key);
/// past it the body says `truncated` and `keys_total` counts them all. Narrow with `action` or
/// `key`.
pub const RLQS_SHARES_MAX_KEYS: usize = 200;

/// Most holders one key lists (by stream id); past it the key says `holders_truncated`. Its
/// `sum` and `holders_total` still count every holder.
pub const RLQS_SHARES_MAX_HOLDERS: usize = 64;

/// A token bucket as Envoy's quota filter enforces it (`envoy.type.v3.TokenBucket`): the rule's
/// whole bucket for a key, or one Envoy's share of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RlqsBucket {
    /// The burst, and what a fresh bucket starts with.
    pub max_tokens: u32,
    /// Tokens added every `fill_interval_s`.
    pub tokens_per_fill: u32,
    /// Seconds between two fills (whole seconds, at least 1).
    pub fill_interval_s: u32,
}

impl From<crate::rlqs::shape::Shape> for RlqsBucket {
    fn from(s: crate::rlqs::shape::Shape) -> RlqsBucket {
        RlqsBucket {
            max_tokens: s.max_tokens,
            tokens_per_fill: s.tokens_per_fill,
            fill_interval_s: s.fill_interval_s,
        }
    }
}

/// One Envoy's hold on one key: one quota filter bucket of one RLQS stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RlqsHolder {
    /// The stream's id in this backend process (not stable across restarts).
    pub stream: u64,
    /// The Envoy's address as the gRPC listener saw it (`ip:port`); null if unknown.
    #[serde(default)]
    pub peer: Option<String>,
    /// The quota filter's domain the stream is bound to (its first report's); null before it.
    #[serde(default)]
    pub domain: Option<String>,
    /// Whether the stream is open. A closed stream's share stays (and stays paid) until its TTL
    /// ends: that Envoy may still enforce it, disconnected.
    pub open: bool,
    /// The token bucket this Envoy enforces; null when it holds none (answered `DENY_ALL`: the
    /// key had nothing left when its burst was due).
    #[serde(default)]
    pub share: Option<RlqsBucket>,
    /// Units paid from the key's state for this share so far (its burst and refills).
    pub paid: u64,
    /// Requests this Envoy reported allowed in this bucket so far.
    pub allowed: u64,
    /// Of those, units debited after the fact (allowed beyond what was paid: Envoy's
    /// no-assignment window).
    #[serde(default)]
    pub post_debited: u64,
    /// Milliseconds until the assignment's TTL ends (renewed by each report).
    pub ttl_ms: u64,
}

/// The holders' shares of one key added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RlqsSum {
    /// Σ `max_tokens` of the shares held (at most the rule's bucket's).
    pub max_tokens: u64,
    /// Σ `tokens_per_fill` of the shares held (at most the rule's bucket's).
    pub tokens_per_fill: u64,
    /// Σ units paid.
    pub paid: u64,
    /// Σ requests reported allowed.
    pub allowed: u64,
}

/// One (action, key) held over RLQS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RlqsKeyShares {
    /// The action (the bucket id's `name`).
    pub action: String,
    /// The key (untrusted text: render it as text only).
    pub key: String,
    /// The rule's whole token bucket for the key: what all Envoys together may hold.
    pub total: RlqsBucket,
    /// The Envoys holding the key, by stream id; at most [`RLQS_SHARES_MAX_HOLDERS`].
    pub holders: Vec<RlqsHolder>,
    /// How many hold it (all of them, listed or not).
    pub holders_total: u64,
    /// Whether `holders` leaves some out.
    #[serde(default)]
    pub holders_truncated: bool,
    /// Every holder's share added up.
    pub sum: RlqsSum,
}

/// `GET /v1/rlqs/shares` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RlqsSharesBody {
    /// When the ledger was read, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// RLQS streams open on this backend now.
    pub streams: u64,
    /// Keys matching the filters (all of them, listed or not).
    pub keys_total: u64,
    /// Whether `keys` leaves some out ([`RLQS_SHARES_MAX_KEYS`]).
    #[serde(default)]
    pub truncated: bool,
    /// The keys held, sorted by action then key; at most [`RLQS_SHARES_MAX_KEYS`].
    pub keys: Vec<RlqsKeyShares>,
}

/// The RLQS line of `GET /readyz`: what this backend's quota streams hold. Informative only:
/// readiness is the store's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RlqsReady {
    /// RLQS streams open now (one per Envoy per quota filter domain).
    pub streams: u64,
    /// Quota filter buckets the streams hold (closed streams' shares until their TTL included).
    pub buckets: u64,
}
