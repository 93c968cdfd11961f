//! What one RLQS bucket costs the server, measured (issue 39): a child process opens one quota
//! stream and reports 50,000 users' buckets of one rule; its resident set's growth over the
//! buckets is printed per bucket (docs/rlqs.md states it). The figure includes everything a
//! bucket brings with it: the stream's bucket map, the key's share and payment state, the shares
//! record view and the memory store's state for the key.

use std::process::Command;
use std::time::Duration;

use sluice_backend::StoreChoice;

use super::rlqs::{actions, bucket, usage, Quota, Rig};

const BUCKETS: usize = 50_000;
const BATCH: usize = 5_000;
/// A loose ceiling: a bucket costing more than this would make the default bound (100,000 per
/// stream) cost more than ~400 MB per stream.
const MOST_BYTES_PER_BUCKET: u64 = 4_096;
const CHILD_ENV: &str = "SLUICE_TEST_RLQS_RSS_CHILD";

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

#[tokio::test]
#[ignore = "run in a child process by rlqs_bucket_memory_is_measured"]
async fn rlqs_bucket_memory_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        println!("not measured: run by rlqs_bucket_memory_is_measured in its own process");
        return;
    }
    let rig = Rig::start(StoreChoice::Memory).await;
    rig.put_rule(
        serde_json::json!({"action": "user", "algorithm": "token_bucket",
        "capacity": 20, "rate": {"count": 10, "period": "1s"}}),
    )
    .await;
    let mut q = Quota::open(&rig).await;
    // Warm up the stream and the runtime with one batch's worth of other buckets' messages.
    q.report(
        "edge",
        vec![usage(bucket(&[("name", "user"), ("user", "warm")]), 0)],
    )
    .await;
    q.next().await.unwrap();
    let base = rss_bytes();
    let mut answered = 0;
    for start in (0..BUCKETS).step_by(BATCH) {
        let usages = (start..start + BATCH)
            .map(|i| {
                usage(
                    bucket(&[("name", "user"), ("user", &format!("user-{i:08}"))]),
                    1,
                )
            })
            .collect();
        q.report("edge", usages).await;
        while answered < start + BATCH {
            let r = q.next_within(Duration::from_secs(60)).await.unwrap();
            answered += actions(&r).len();
        }
    }
    let grown = rss_bytes().saturating_sub(base);
    let per = grown / BUCKETS as u64;
    println!("RLQS RSS +{grown} bytes for {BUCKETS} buckets: {per} bytes per bucket");
    assert!(per <= MOST_BYTES_PER_BUCKET, "{per} bytes per bucket");
    rig.stop().await;
}

#[test]
fn rlqs_bucket_memory_is_measured() {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "rlqs_memory::rlqs_bucket_memory_child",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("re-run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test:\n{stdout}"
    );
    eprintln!(
        "{}",
        stdout
            .lines()
            .filter(|l| l.contains("RLQS RSS"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
