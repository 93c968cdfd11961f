//! The `sluice` binary itself: `--help`, a generated token printed once, `--rules` imported at
//! start, the memory-store warning, graceful exit on SIGTERM, a bad rules file refused naming
//! its line, rule and field, and a bad Redis setting refused naming its flag.
#![cfg(test)]

use crate::support;

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

#[test]
fn help_reads_like_a_real_tool() {
    let out = Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run sluice --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "Usage: sluice",
        "--decision-listen <ADDR>",
        "[env: SLUICE_DECISION_LISTEN=]",
        "[default: 127.0.0.1:8081]",
        "--admin-listen <ADDR>",
        "--grpc-listen <ADDR|off>",
        "[env: SLUICE_GRPC_LISTEN=]",
        "[default: 127.0.0.1:8082]",
        "Envoy's rate limit service",
        "--rls-listen <ADDR|off>",
        "--redis-url <URL>",
        "--redis-cluster <URL,URL>",
        "--redis-timeout-ms <MS>",
        "--max-in-flight <N>",
        "--key-prefix <PREFIX>",
        "--rules <FILE>",
        "--admin-token <TOKEN>",
        "--dashboard-dir <DIR>",
        "--log-format <FORMAT>",
        "Examples:",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let version = Command::new(BIN)
        .arg("--version")
        .output()
        .expect("run sluice --version");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("sluice "));
}

struct Running {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    /// Starts the binary with `args`; the gRPC listener is off unless `args` name it (parallel
    /// tests would all want its default port).
    fn start(args: &[&str]) -> Running {
        let names_grpc = args
            .iter()
            .any(|a| a.starts_with("--grpc-listen") || a.starts_with("--rls-listen"));
        let mut command = Command::new(BIN);
        if !names_grpc {
            command.env("SLUICE_GRPC_LISTEN", "off");
        }
        let (child, stderr) = support::spawn_logged(
            command
                .args(args)
                .env_remove("SLUICE_RLS_LISTEN")
                .env_remove("SLUICE_ADMIN_TOKEN"),
        );
        Running { child, stderr }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not exit within {within:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_binary_imports_rules_prints_a_token_once_and_stops_on_sigterm() {
    let (dir, rules) = support::write_temp_file(
        "sluice-bin",
        "",
        "rules.yaml",
        "rules:\n  - action: post\n    algorithm: gcra\n    capacity: 5\n    rate: { count: 10, period: 1m }\n  - action: login\n    algorithm: sliding_log\n    capacity: 5\n    window: 1m\n",
    );
    let (dport, aport) = (support::free_port(), support::free_port());
    let decision = format!("127.0.0.1:{dport}");
    let admin = format!("127.0.0.1:{aport}");
    let mut sluice = Running::start(&[
        "--decision-listen",
        &decision,
        "--admin-listen",
        &admin,
        "--rules",
        rules.to_str().expect("utf-8"),
        "--dashboard-dir",
        dir.to_str().expect("utf-8"),
    ]);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(r) = http.get(format!("http://{admin}/readyz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "sluice not ready; stderr:\n{}",
            sluice.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stderr = sluice.stderr();
    assert!(
        stderr.contains("memory store: state is per process; use --redis-url for many replicas"),
        "{stderr}"
    );
    let token = stderr
        .lines()
        .map(str::trim)
        .find(|l| l.len() == 64 && l.chars().all(|c| c.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("a generated 64-hex-digit token on stderr:\n{stderr}"))
        .to_owned();
    assert_eq!(
        stderr.matches(&token).count(),
        1,
        "the token is printed exactly once"
    );

    let rules: serde_json::Value = http
        .get(format!("http://{admin}/v1/rules"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("rules")
        .json()
        .await
        .expect("json");
    let actions: Vec<&str> = rules["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert_eq!(actions, ["login", "post"]);
    let decision_answer: serde_json::Value = http
        .post(format!("http://{decision}/v1/throttle"))
        .json(&serde_json::json!({"action": "post", "key": "u"}))
        .send()
        .await
        .expect("throttle")
        .json()
        .await
        .expect("json");
    assert_eq!(decision_answer["allowed"], true);

    let pid = sluice.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(killed.success());
    let status = sluice.wait_exit(Duration::from_secs(10));
    assert!(
        status.success(),
        "graceful exit on SIGTERM; stderr:\n{}",
        sluice.stderr()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_rules_file_stops_the_start_naming_the_rule_and_field() {
    let (dir, rules) = support::write_temp_file(
        "sluice-badrules",
        "",
        "rules.json",
        r#"[{"action": "ok", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1s"}},
            {"action": "broken", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "fortnight"}}]"#,
    );
    let mut sluice = Running::start(&[
        "--decision-listen",
        &format!("127.0.0.1:{}", support::free_port()),
        "--admin-listen",
        &format!("127.0.0.1:{}", support::free_port()),
        "--admin-token",
        "a-token-long-enough-1234",
        "--rules",
        rules.to_str().expect("utf-8"),
    ]);
    let status = sluice.wait_exit(Duration::from_secs(10));
    assert!(!status.success());
    let stderr = sluice.stderr();
    assert!(
        stderr.contains(", line 2: rule #2 (broken): rate.period: "),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_redis_setting_stops_the_start_in_one_line_naming_the_flag() {
    // Nothing listens on the Redis port: an attempt to connect would say "unavailable".
    let closed = format!("redis://127.0.0.1:{}/", support::free_port());
    let cases: [(&[&str], &str); 3] = [
        (
            &["--redis-url", &closed, "--key-prefix", "team{a}"],
            "sluice: --key-prefix (SLUICE_KEY_PREFIX): key prefix \"team{a}\" must not contain",
        ),
        (
            &["--redis-cluster", &format!("{closed},redis:/oops")],
            "sluice: --redis-cluster (SLUICE_REDIS_CLUSTER): node URL #2 \"redis:/oops\"",
        ),
        (
            &["--redis-url", "127.0.0.1:6379"],
            "sluice: --redis-url (SLUICE_REDIS_URL): \"127.0.0.1:6379\" is not a usable Redis URL",
        ),
    ];
    for (flags, expected) in cases {
        let mut args = vec![
            "--decision-listen".to_owned(),
            format!("127.0.0.1:{}", support::free_port()),
            "--admin-listen".to_owned(),
            format!("127.0.0.1:{}", support::free_port()),
            "--admin-token".to_owned(),
            "a-token-long-enough-1234".to_owned(),
        ];
        args.extend(flags.iter().map(|f| (*f).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut sluice = Running::start(&args);
        let status = sluice.wait_exit(Duration::from_secs(10));
        assert_eq!(status.code(), Some(1), "{flags:?}");
        let stderr = sluice.stderr();
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{flags:?}: one line:\n{stderr}");
        assert!(lines[0].starts_with(expected), "{flags:?}:\n{stderr}");
        assert!(!stderr.contains("unavailable"), "{stderr}");
    }
}
