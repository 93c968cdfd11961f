//! Tests of [`super`] (`metrics.rs`), kept beside it so that file holds only production code.

use super::*;
use crate::store::memory::MemoryStore;
use crate::store::DecisionStore;
use sluice_core::Rule;

fn sample(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .map(|l| l[name.len() + 1..].to_owned())
}

#[test]
fn kept_cluster_debits_are_counted() {
    let metrics = Metrics::new();
    let name = "sluice_all_unrefunded_total";
    assert_eq!(sample(&metrics.encode(), name).as_deref(), Some("0"));
    metrics.unrefunded(2);
    metrics.unrefunded(1);
    assert_eq!(sample(&metrics.encode(), name).as_deref(), Some("3"));
}

#[tokio::test]
async fn store_figures_are_read_at_each_scrape() {
    let clock = crate::store::ManualClock::new(1_000_000_000);
    let store = Arc::new(MemoryStore::with_max_keys(64).with_clock(clock));
    let metrics = Metrics::with_store(store.clone());
    let text = metrics.encode();
    assert_eq!(
        sample(&text, "sluice_store_evictions_total").as_deref(),
        Some("0"),
        "{text}"
    );
    assert_eq!(sample(&text, "sluice_store_keys").as_deref(), Some("0"));
    assert_eq!(
        sample(&text, "sluice_store_max_keys").as_deref(),
        Some("64")
    );
    let rule = Rule::from_json_str(
        r#"{"action":"a","algorithm":"fixed_window","capacity":5,"window":"1h"}"#,
    )
    .expect("rule");
    for i in 0..1_000 {
        store
            .throttle(&rule, &format!("k{i}"), 1)
            .await
            .expect("memory");
    }
    let text = metrics.encode();
    assert_eq!(sample(&text, "sluice_store_keys").as_deref(), Some("64"));
    assert_eq!(
        sample(&text, "sluice_store_evictions_total").as_deref(),
        Some("936"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE sluice_store_evictions counter"),
        "{text}"
    );
}
