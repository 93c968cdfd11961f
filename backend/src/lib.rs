//! sluice-backend: the decision API (what Envoy's filter calls) and the admin API + dashboard,
//! over a [`store::Store`]: in memory for one process, or Redis / Redis Cluster for many replicas.

pub mod store;
