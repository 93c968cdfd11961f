//! The worker's commit queue on its own: ids unique per request, the bound, and what a commit
//! that could not start becomes.

use sluice_core::wire::CommitRequest;

use super::*;
use crate::fake_host::FakeHost;

fn config() -> Config {
    Config::from_json(
        br#"{"backend": {"cluster": "sluice", "protocol": "http"},
        "routes": [{"action": "tokens", "key": {"source": "path"},
          "cost": {"reserve": {"constant": 5}, "actual": {"header": "x-used"}}}]}"#,
    )
    .unwrap()
}

fn commit(id: &str) -> CommitRequest {
    CommitRequest {
        action: "tokens".into(),
        key: "k".into(),
        reserved: 5,
        actual: 2,
        id: id.into(),
        reserved_at_ms: 1,
        timeout_ms: None,
        sent_at_ms: None,
    }
}

#[test]
fn ids_are_the_reporter_and_a_counter_and_valid_commit_ids() {
    let mut commits = Commits::default();
    let reporter = "0123456789abcdef0123456789abcdef";
    let a = commits.next_id(reporter);
    let b = commits.next_id(reporter);
    assert_ne!(a, b);
    assert_eq!(a, format!("{reporter}:1"));
    sluice_core::commit::check_id(&b).unwrap();
}

#[test]
fn the_queue_is_bounded_and_a_commit_that_cannot_start_is_retried() {
    let cfg = config();
    let mut host = FakeHost::request("GET", "/");
    let mut commits = Commits::default();
    for i in 0..MAX_COMMITS + 3 {
        commits.push(&mut host, commit(&format!("id{i}")));
    }
    assert_eq!(commits.queued_or_sent(), MAX_COMMITS);
    assert_eq!(host.counter(Counter::CostCommitsFailed), 3);
    assert_eq!(host.effects.warnings.borrow().len(), 1, "logged once");

    let mut commits = Commits::default();
    commits.push(&mut host, commit("x"));
    host.dispatch_error = Some("NotFound".into());
    for _ in 0..COMMIT_ATTEMPTS {
        commits.send(&mut host, &cfg);
    }
    assert_eq!(commits.queued_or_sent(), 0);
    assert_eq!(host.counter(Counter::CostCommitRetries), 3);
    assert_eq!(host.counter(Counter::CostCommitsFailed), 4);
    assert!(
        !commits.answered(&mut host, 99, Some(b"200")),
        "not a commit's token"
    );
}
