//! The `sluice` binary logs requests that passed unchecked (from the filters' reports) at WARN,
//! at most once per action per 10 s, so failures show in the backend's own log.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

#[tokio::test]
async fn passed_unchecked_is_a_warning_once_per_action_per_ten_seconds() {
    let (dir, rules) = support::write_temp_file(
        "sluice-report-log",
        "",
        "rules.yaml",
        "- {action: post, algorithm: gcra, capacity: 5, rate: {count: 5, period: 1m}}\n",
    );
    let (decision, admin) = (support::free_port(), support::free_port());
    let (mut child, stderr) = support::spawn_logged(
        Command::new(BIN)
            .args(["--decision-listen", &format!("127.0.0.1:{decision}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--grpc-listen", "off"])
            .args(["--admin-token", "report-log-token-0123456789"])
            .arg("--rules")
            .arg(&rules),
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let url = format!("http://127.0.0.1:{decision}/v1/report");
    let deadline = Instant::now() + Duration::from_secs(10);
    while http
        .get(format!("http://127.0.0.1:{decision}/healthz"))
        .send()
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "sluice did not start");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let report = |action: &str, passed: u64| json!({"actions": [{"action": action, "failed_timeout": passed, "passed_unchecked": passed}]});
    for (action, passed) in [("post", 3), ("post", 2), ("ghost", 1), ("post", 0)] {
        let r = http
            .post(&url)
            .json(&report(action, passed))
            .send()
            .await
            .expect("report");
        assert_eq!(r.status().as_u16(), 204);
    }
    // The log is written as the reports are taken; give the pipe a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let text = stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains("requests passed unchecked"))
            .map(str::to_owned)
            .collect();
        if lines.len() >= 2 || Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        lines.len(),
        2,
        "one line for post, one for ghost: {lines:#?}"
    );
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(
        lines[0].contains("action=\"post\"") || lines[0].contains("action=post"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("passed_unchecked=3"), "{}", lines[0]);
    assert!(lines[1].contains("(unknown)"), "{}", lines[1]);
}
