//! Real redis-server processes for tests, on free loopback ports, stopped (by PID) on drop.
//!
//! Test code: a redis-server that cannot be started stops the test (or the benchmark) with a
//! panic naming why. clippy.toml allows that only in `#[test]` functions and `#[cfg(test)]`
//! modules, and this file is also compiled into `backend/examples` (outside `cfg(test)`), so
//! it says so itself.
#![allow(dead_code, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_backend::store::redis::{RedisConfig, RedisStore};
use sluice_backend::store::ManualClock;

/// A connection to the Redis of `config` whose scripts decide at the time of a manual clock the
/// test sets (starting at `at` ns), instead of Redis `TIME`.
pub async fn redis_at_fixed_times(config: RedisConfig, at: u64) -> (RedisStore, Arc<ManualClock>) {
    let clock = ManualClock::new(at);
    let store = RedisStore::connect(config)
        .await
        .expect("connect to the test Redis")
        .with_clock(clock.clone());
    (store, clock)
}

/// The six algorithm names, in core's documentation order (`Algorithm::ALL`), for the tests and
/// the benchmarks that cover every algorithm.
pub const ALGORITHMS: [&str; 6] = [
    "fixed_window",
    "sliding_log",
    "sliding_window",
    "leaky_bucket",
    "gcra",
    "token_bucket",
];

/// A free TCP port on 127.0.0.1 (bound then released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// One redis-server with no persistence, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a standalone redis-server and waits until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts redis-server with extra arguments (e.g. `["--cluster-enabled", "yes"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::spawn(free_port(), "", extra)
    }

    /// Starts a standalone redis-server on a given port (e.g. the port of one just killed, to
    /// play a Redis restart that lost its data) and waits until it answers PING.
    pub fn start_on_port(port: u16) -> RedisServer {
        Self::spawn(port, "-again", &[])
    }

    fn spawn(port: u16, dir_suffix: &str, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!(
            "sluice-redis-{}-{port}{dir_suffix}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/install/10-redis.sh installs it)");
        let server = RedisServer { child, port, dir };
        server.wait_ready();
        server
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Runs redis-cli against this server and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli on PATH");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.cli(&["PING"]).trim() == "PONG" {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "redis-server on port {} did not answer PING within 10 s",
            self.port
        );
    }

    /// Stops the server (SIGKILL by PID) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-master Redis Cluster of redis-server processes on loopback, made with
/// `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled nodes and joins them; waits until the cluster is ok.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if cluster
                .nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
            {
                return cluster;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis cluster did not reach cluster_state:ok within 15 s");
    }

    /// `redis://127.0.0.1:PORT/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// Writes `text` to `file` in a fresh folder `<temp>/<folder>-<this process's id><suffix>`
/// (a test's rules file for the binary); returns (folder, file). The caller removes the folder.
pub fn write_temp_file(folder: &str, suffix: &str, file: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{folder}-{}{suffix}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(file);
    std::fs::write(&path, text).expect("write the temp file");
    (dir, path)
}

/// Spawns `command` with `RUST_LOG=info`, stdout dropped and stderr collected as it arrives
/// (see `capture_stderr`): for tests that read the sluice binary's log lines.
pub fn spawn_logged(command: &mut Command) -> (Child, std::sync::Arc<std::sync::Mutex<String>>) {
    let mut child = command
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let log = capture_stderr(&mut child);
    (child, log)
}

/// Collects a child's stderr into a shared string as it arrives (for tests that read a server's
/// log while it runs). Takes the child's piped stderr.
pub fn capture_stderr(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<String>> {
    use std::io::Read;
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut pipe = child
        .stderr
        .take()
        .expect("child spawned with Stdio::piped() stderr");
    let sink = log.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("lock")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    log
}

#[test]
fn the_algorithm_names_are_cores_in_its_order() {
    let core = sluice_core::Algorithm::ALL.map(sluice_core::Algorithm::name);
    assert_eq!(ALGORITHMS, core);
}
