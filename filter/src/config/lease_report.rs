//! The plugin configuration's `lease` and `report` sections: the lease table (units the backend
//! debited in advance, spent here with no callout) and the counts the filter reports to the
//! backend on a timer (what only the filter knows). Both are on by default and change nothing for
//! a rule without `lease`: the rule is the opt-in.

use serde::Deserialize;

use super::{FieldError, Protocol};

/// The lease table (see `lease.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseConfig {
    /// Whether callouts ask for a lease (`ThrottleRequest.lease`) and leased units are spent
    /// locally. HTTP callouts only: the gRPC callout never asks for one.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Number of shared-data slots: the table's memory bound (each slot holds the lease of one
    /// (action, key); a key may live in one of two slots).
    #[serde(default = "default_slots")]
    pub slots: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            enabled: true,
            slots: default_slots(),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_slots() -> u64 {
    65_536
}

/// The counts report (`POST /v1/report`, see `report.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportConfig {
    /// Whether reports are sent at all.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Cluster the report goes to. Default: `backend.cluster` with `protocol: http`; with
    /// `protocol: grpc_stream` the report goes as an exchange (`via_exchange`); with
    /// `protocol: grpc` (whose cluster is the gRPC listener, where `/v1/report` is not served)
    /// reports are sent only when this names the decision listener's cluster.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Set by validation: reports go as unary exchanges to `backend.cluster` (`protocol:
    /// grpc_stream` with no `cluster` of their own).
    #[serde(skip)]
    pub via_exchange: bool,
    /// Path of the report endpoint.
    #[serde(default = "default_path")]
    pub path: String,
    /// How often each worker sends what it counted (when anything is non-zero), in ms.
    #[serde(default = "default_period_ms")]
    pub period_ms: u64,
    /// Timeout of one report callout, in ms; a report that times out is added to the next one.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            enabled: true,
            cluster: None,
            via_exchange: false,
            path: default_path(),
            period_ms: default_period_ms(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

fn default_path() -> String {
    "/v1/report".to_owned()
}
fn default_period_ms() -> u64 {
    1000
}
fn default_timeout_ms() -> u64 {
    1000
}

impl LeaseConfig {
    pub(super) fn validate(&self) -> Result<(), FieldError> {
        if !(1..=16_777_216).contains(&self.slots) {
            return Err(FieldError::new(
                "lease.slots",
                format!("must be 1 to 16777216; got {}", self.slots),
            ));
        }
        Ok(())
    }
}

impl ReportConfig {
    /// Checks the fields and resolves the cluster: `None` afterwards means reports are off.
    pub(super) fn validate(
        &mut self,
        backend_cluster: &str,
        protocol: Protocol,
    ) -> Result<(), FieldError> {
        if !self.path.starts_with('/') {
            return Err(FieldError::new(
                "report.path",
                format!("must start with /; got {:?}", self.path),
            ));
        }
        if !(100..=3_600_000).contains(&self.period_ms) {
            return Err(FieldError::new(
                "report.period_ms",
                format!(
                    "must be 100 to 3600000 milliseconds; got {}",
                    self.period_ms
                ),
            ));
        }
        if !(1..=60_000).contains(&self.timeout_ms) {
            return Err(FieldError::new(
                "report.timeout_ms",
                format!("must be 1 to 60000 milliseconds; got {}", self.timeout_ms),
            ));
        }
        if let Some(cluster) = &self.cluster {
            if cluster.is_empty() {
                return Err(FieldError::new(
                    "report.cluster",
                    "must name an Envoy cluster",
                ));
            }
        }
        if self.cluster.is_none() && protocol == Protocol::Http {
            self.cluster = Some(backend_cluster.to_owned());
        }
        self.via_exchange = self.cluster.is_none() && protocol == Protocol::GrpcStream;
        if !self.enabled {
            self.cluster = None;
            self.via_exchange = false;
        }
        Ok(())
    }
}
