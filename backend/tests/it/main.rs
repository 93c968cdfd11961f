//! The backend's integration tests, as one test binary so the whole stack is linked once.
//!
//! Each module is one concern; `support` starts real redis-server processes and Clusters,
//! `harness` runs the HTTP application in-process, `store_suite` is the storage conformance suite
//! shared by the memory store, a redis-server and a Redis Cluster.

// clippy.toml lets #[test] functions unwrap, expect and panic, but not the helpers beside them
// (harness, support, store_suite), so this test crate's root allows them: a panic here is the
// failure report. The backend's own code denies all three (backend/Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod debt_suite;
mod grpc_rig;
mod harness;
mod history_suite;
mod store_suite;
mod support;
mod tls_rig;
mod tls_support;

mod admin_api;
mod admin_hardening;
mod admin_replicas;
mod all;
mod calendar;
mod cluster;
mod cluster_ready;
mod commit;
mod concurrency;
mod conformance;
mod content_type;
mod deadline;
mod exchange;
mod fixes;
mod grpc_listener;
mod hardening;
mod http_all;
mod http_binary;
mod http_cell_redis;
mod http_cluster;
mod http_decision;
mod http_history;
mod http_store_failure;
mod key_spray_memory;
mod lease;
mod overrides_audit;
mod preload;
mod ratelimit_budget;
mod ratelimit_config;
mod ratelimit_http;
mod ratelimit_peer;
mod redis_sizing;
mod redis_tls;
mod report_bound;
mod report_log;
mod rlqs;
mod rlqs_fair;
mod rlqs_memory;
mod rlqs_shares;
mod rlqs_view;
mod rls;
mod rls_history;
mod scope;
mod sentinel;
mod tls_binary;
mod tls_listeners;
