//! Filter report sequence records are bounded per action (`history::marks`): `POST /v1/report`
//! accepts any reporter id, so a client minting ids must not grow the store without bound. At
//! fixed times, through the report path itself (`history::report::ingest`, whose metrics the
//! test reads), on the memory store, a redis-server and a Redis Cluster: the cap's reporters fill
//! an action's set; a new reporter while all are young (a spray of minted ids keeping them so) is
//! applied, its counts in the history, the oldest record shed (counted); once they are settled, N
//! more reporters drop exactly the N oldest (counted), the cap's records remain; a dropped
//! reporter's next report is applied once, and a copy of it is recognised. Actions without a
//! rule share one set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_backend::history::attempts::Attempts;
use sluice_backend::history::edge::Edge;
use sluice_backend::history::pending::HistoryPending;
use sluice_backend::history::report::{ingest, Ingested, Sinks, UncheckedWarnings};
use sluice_backend::history::step_start;
use sluice_backend::metrics::Metrics;
use sluice_backend::rules::RuleSet;
use sluice_backend::store::memory::MemoryStore;
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};
use sluice_backend::store::Store;
use sluice_core::limits::{MAX_REPORTERS_PER_ACTION, REPORT_MARK_SETTLE_MS};
use sluice_core::wire::FilterReport;
use sluice_core::Action;

use crate::store_suite::rule;
use crate::support::{RedisCluster, RedisServer};

/// A fixed time (ms), far from the epoch.
const T0: u64 = 1_800_000_000_000;
/// Reporters beyond the cap.
const N: u64 = 37;

/// A reporter id as the filter draws them: 128 bits in hex (so their order is their number's).
fn reporter(i: u64) -> String {
    format!("{i:032x}")
}

fn report(reporter: &str, seq: u64, actions: &[&str]) -> FilterReport {
    let actions: Vec<serde_json::Value> = actions
        .iter()
        .map(|a| serde_json::json!({"action": a, "leased": 1}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "actions": actions, "reporter": reporter, "seq": seq
    }))
    .expect("a report")
}

/// The value of the counter `name{action="<action>"}` in the metrics text (0 when absent).
fn counter(metrics: &Metrics, name: &str, action: &str) -> u64 {
    let text = metrics.encode();
    let line = format!("{name}{{action=\"{action}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |v| v.trim().parse().expect("a count"))
}

/// The whole case on one store.
pub async fn report_records_are_bounded(store: &dyn Store) {
    let rules = RuleSet {
        rules: BTreeMap::from([(
            "rb".to_owned(),
            Arc::new(rule(
                r#"{"action":"rb","algorithm":"gcra","capacity":1,"rate":{"count":1,"period":"1s"}}"#,
            )),
        )]),
        ..RuleSet::default()
    };
    let metrics = Metrics::new();
    let pending = HistoryPending::new();
    let warnings = UncheckedWarnings::new();
    let edge = Edge::new();
    let attempts = Attempts::new();
    let touched = sluice_backend::touched::TouchedPending::default();
    let sinks = Sinks {
        rules: &rules,
        metrics: &metrics,
        pending: &pending,
        warnings: &warnings,
        edge: &edge,
        attempts: &attempts,
        touched: &touched,
    };
    let send = |r: FilterReport, at: u64| async move {
        ingest(&r, sinks, store, at, Instant::now()).await
    };
    let applied = |known: usize, unknown: usize| Ingested {
        known,
        unknown,
        copies: 0,
        withdrawn: 0,
    };
    let copy = Ingested {
        known: 1,
        unknown: 0,
        copies: 1,
        withdrawn: 0,
    };
    let cap = MAX_REPORTERS_PER_ACTION as u64;
    let kind = store.kind();
    // The cap's reporters, 1 ms apart: the set is full.
    for i in 0..cap {
        let got = send(report(&reporter(i), 1, &["rb"]), T0 + i).await;
        assert_eq!(got.expect("applied"), applied(1, 0), "{i} ({kind})");
    }
    // All applied within the settle span (minted ids kept young): a new reporter (a restarted
    // Envoy's worker) is applied all the same, its counts in the history; the least recently
    // applied record (reporter 0) is shed, counted. The reporters held go on.
    let young = T0 + cap;
    let leased_at = |at: u64| async move {
        let action = Action::parse("rb").expect("an action");
        let stored = store
            .read_history(&action, step_start(at), 1, at)
            .await
            .expect("history");
        stored.steps.iter().map(|(_, t)| t.leased).sum::<u64>()
    };
    let before = leased_at(young).await;
    let got = send(report("restarted", 1, &["rb"]), young).await;
    assert_eq!(got.expect("applied"), applied(1, 0), "({kind})");
    assert_eq!(
        leased_at(young).await,
        before + 1,
        "in the history ({kind})"
    );
    assert_eq!(counter(&metrics, "sluice_report_marks_shed_total", "rb"), 1);
    assert_eq!(
        counter(&metrics, "sluice_report_marks_dropped_total", "rb"),
        0
    );
    let again = send(report("restarted", 1, &["rb"]), young).await;
    assert_eq!(again.expect("a copy"), copy, "({kind})");
    let again = send(report(&reporter(cap - 1), 1, &["rb"]), young).await;
    assert_eq!(again.expect("a copy"), copy, "({kind})");
    // N new reporters once the oldest are settled: exactly the N oldest (reporters 1..=N) go,
    // one each.
    let settled = T0 + REPORT_MARK_SETTLE_MS + N;
    for j in 0..N {
        let got = send(report(&format!("new{j}"), 1, &["rb"]), settled).await;
        assert_eq!(got.expect("applied"), applied(1, 0), "new{j} ({kind})");
    }
    assert_eq!(
        counter(&metrics, "sluice_report_marks_dropped_total", "rb"),
        N,
        "({kind})"
    );
    // Exactly the cap's records remain: every later reporter's copy is recognised (a copy
    // changes nothing), and so is every new one's.
    for i in N + 1..cap {
        let got = send(report(&reporter(i), 1, &["rb"]), settled).await;
        assert_eq!(got.expect("a copy"), copy, "{i} kept ({kind})");
    }
    for j in 0..N {
        let got = send(report(&format!("new{j}"), 1, &["rb"]), settled).await;
        assert_eq!(got.expect("a copy"), copy, "new{j} kept ({kind})");
    }
    // A shed reporter: its next report (seq 2) is a new reporter's, applied once (making room
    // by dropping the next oldest, reporter N + 1), and its copy is recognised.
    let back = T0 + REPORT_MARK_SETTLE_MS + N + 1;
    let got = send(report(&reporter(0), 2, &["rb"]), back).await;
    assert_eq!(got.expect("applied"), applied(1, 0), "({kind})");
    let got = send(report(&reporter(0), 2, &["rb"]), back + 1).await;
    assert_eq!(got.expect("a copy"), copy, "({kind})");
    assert_eq!(
        counter(&metrics, "sluice_report_marks_dropped_total", "rb"),
        N + 1,
        "({kind})"
    );
    // Actions without a rule share one set, by action and reporter: each is applied once.
    let ghosts = report("g1", 1, &["ghost1", "ghost2"]);
    assert_eq!(send(ghosts.clone(), back).await.expect("ok"), applied(0, 2));
    let again = send(ghosts, back).await.expect("ok");
    assert_eq!((again.unknown, again.copies), (2, 2), "({kind})");
}

#[tokio::test]
async fn memory_report_records_are_bounded() {
    report_records_are_bounded(&MemoryStore::new()).await;
}

#[tokio::test]
async fn redis_report_records_are_bounded_in_the_actions_slot() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(RedisConfig::new(RedisTarget::Single(redis.url())))
        .await
        .expect("connect");
    report_records_are_bounded(&store).await;
    let cli = |args: &[&str]| redis.cli(args).trim().to_owned();
    let (seqs, times) = (
        "{sluice:history:rb}:reporters",
        "{sluice:history:rb}:reporters:at",
    );
    let cap = MAX_REPORTERS_PER_ACTION.to_string();
    assert_eq!(cli(&["HLEN", seqs]), cap);
    assert_eq!(cli(&["ZCARD", times]), cap);
    // The oldest went (reporter 0 came back; 1..=N + 1 did not), the newest stayed.
    assert_eq!(cli(&["HGET", seqs, &reporter(0)]), "2");
    for i in 1..=N + 1 {
        assert_eq!(cli(&["HEXISTS", seqs, &reporter(i)]), "0", "{i}");
    }
    assert_eq!(cli(&["HEXISTS", seqs, &reporter(N + 2)]), "1");
    // Actions without a rule live in the shared set, not under their own names; every key has
    // a TTL of a day.
    assert_eq!(cli(&["HLEN", "{sluice:history:(unknown)}:reporters"]), "2");
    assert_eq!(cli(&["KEYS", "*ghost*"]), "");
    for key in [seqs, times] {
        let ttl: u64 = cli(&["PTTL", key]).parse().expect("a PTTL");
        assert!(ttl > 86_000_000 && ttl <= 86_400_000, "{key}: {ttl}");
    }
    // What a full set costs (the figure docs/storage.md states): both keys, their own bytes.
    let bytes: u64 = [seqs, times]
        .iter()
        .map(|k| {
            cli(&["MEMORY", "USAGE", k, "SAMPLES", "0"])
                .parse::<u64>()
                .expect("bytes")
        })
        .sum();
    let per = bytes / MAX_REPORTERS_PER_ACTION as u64;
    println!(
        "a full set of {} report records (32-hex reporter ids): {bytes} bytes, {per} per record",
        MAX_REPORTERS_PER_ACTION
    );
    // Measured 221 (redis-server 7.0.15): a bound of 256 per record, 4 MiB per full set.
    assert!(per <= 256, "{per} bytes per record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_report_records_are_bounded() {
    let cluster = RedisCluster::start();
    let mut config = RedisConfig::new(RedisTarget::Cluster(cluster.urls()));
    config.timeout = std::time::Duration::from_secs(5);
    let store = RedisStore::connect(config).await.expect("connect");
    report_records_are_bounded(&store).await;
}
