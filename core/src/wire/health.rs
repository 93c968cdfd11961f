//! How the store stands, for operators: `/readyz` and the levels snapshot (so the dashboard can
//! say it) carry it. A rate limiter that is quietly running out of room is about to stop
//! limiting; this is where it says so before it happens.

use serde::{Deserialize, Serialize};

/// The store's health as this replica sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoreHealth {
    /// "memory", "redis" or "redis-cluster".
    #[serde(default)]
    pub kind: String,
    /// Settings or conditions that let a key spray switch limiting off, in words an operator can
    /// act on (e.g. Redis `maxmemory-policy noeviction`). Empty when all is well.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Memory store: throttle keys held now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    /// Memory store: the most throttle keys it holds before evicting (`--max-keys`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_keys: Option<u64>,
    /// Throttle keys evicted to stay within memory since this replica started (memory store), or
    /// as Redis counts them (`evicted_keys`).
    #[serde(default)]
    pub evictions: u64,
}

/// `GET /healthz` body: the process answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthBody {
    /// Always `ok`.
    pub status: String,
}

/// `GET /readyz` body when the store answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReadyBody {
    /// Always `ready` (a store that does not answer is a 503 with an `ApiError`).
    pub status: String,
    /// The store's kind ("memory", "redis", "redis-cluster").
    pub store: String,
    /// See [`StoreHealth::warnings`]: ready, but at risk.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Redis Sentinel only: the master the sentinels name now, `<name> at <host:port>` (it
    /// changes on a failover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// What Envoy's quota streams (RLQS) hold on this backend; absent when the gRPC listener is
    /// off. Informative: it never makes the backend unready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlqs: Option<super::RlqsReady>,
}
