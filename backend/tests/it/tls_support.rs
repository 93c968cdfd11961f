//! TLS-only redis-server processes for tests: a CA, server and client certificates made at test
//! time with the openssl command line (none committed), and redis-server started with
//! `--port 0 --tls-port P --tls-auth-clients yes` (a client certificate required), alone, as a
//! 3-master Cluster (`--tls-cluster yes`) or as a Sentinel set (`--tls-replication yes`, the
//! sentinel itself TLS-only). Processes are killed by PID on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_backend::store::redis::{HostnameCheck, RedisSecurity, RedisTls, TlsFiles};

use crate::support::free_port;

/// A CA and the certificates it signed, in a temp folder removed on drop.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// Makes a CA (`name`), a server certificate for 127.0.0.1 and localhost (usable as a
    /// client too: Redis presents it on replication and cluster-bus links) and a client
    /// certificate, all EC P-256, valid for a day.
    pub fn new(name: &str) -> Pki {
        Pki::naming(name, "IP:127.0.0.1,DNS:localhost")
    }

    /// [`Pki::new`] with a server certificate naming `names` (an openssl subjectAltName list).
    pub fn naming(name: &str, names: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("sluice-pki-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("pki dir");
        let pki = Pki { dir };
        pki.openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
            ],
            &[&format!("/CN=sluice test CA {name}")],
        );
        pki.leaf(
            "server",
            &format!(
                "subjectAltName={names}\nbasicConstraints=CA:FALSE\n\
                 extendedKeyUsage=serverAuth,clientAuth\n"
            ),
        );
        pki.leaf(
            "client",
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        );
        pki
    }

    fn leaf(&self, name: &str, extensions: &str) {
        std::fs::write(self.dir.join(format!("{name}.ext")), extensions).expect("ext file");
        self.openssl(
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
            ],
            &[
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN=sluice test {name}"),
            ],
        );
        self.openssl(
            &[
                "x509",
                "-req",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-in",
            ],
            &[
                &format!("{name}.csr"),
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    }

    fn openssl(&self, args: &[&str], more: &[&str]) {
        let out = Command::new("openssl")
            .current_dir(&self.dir)
            .args(args)
            .args(more)
            .output()
            .expect("openssl on PATH");
        assert!(
            out.status.success(),
            "openssl {args:?} {more:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A file of this PKI (`ca.crt`, `server.key`, `client.crt`, ...).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The store's settings trusting this CA and presenting its client certificate.
    pub fn security(&self) -> RedisSecurity {
        self.security_trusting(self)
    }

    /// The settings presenting this PKI's client certificate but trusting `ca`'s CA.
    pub fn security_trusting(&self, ca: &Pki) -> RedisSecurity {
        let (ca, cert, key) = (
            ca.file("ca.crt"),
            self.file("client.crt"),
            self.file("client.key"),
        );
        let files = TlsFiles {
            ca: Some(&ca),
            cert: Some(&cert),
            key: Some(&key),
        };
        RedisSecurity {
            tls: Some(Box::new(
                RedisTls::load(&files, HostnameCheck::Verify).expect("test certificates"),
            )),
            ..RedisSecurity::default()
        }
    }

    /// redis-server's TLS arguments for this PKI (the server certificate, the CA for clients).
    fn server_args(&self) -> Vec<String> {
        self.args(&[
            ("--tls-cert-file", "server.crt"),
            ("--tls-key-file", "server.key"),
            ("--tls-ca-cert-file", "ca.crt"),
        ])
    }

    /// redis-cli's TLS arguments (the client certificate).
    fn cli_args(&self) -> Vec<String> {
        self.args(&[
            ("--cacert", "ca.crt"),
            ("--cert", "client.crt"),
            ("--key", "client.key"),
        ])
    }

    /// `flag path` pairs for files of this PKI.
    fn args(&self, pairs: &[(&str, &str)]) -> Vec<String> {
        pairs
            .iter()
            .flat_map(|(flag, file)| [flag.to_string(), self.file(file).display().to_string()])
            .collect()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One TLS-only redis-server (or sentinel), killed on drop.
pub struct TlsRedis {
    child: Child,
    pub port: u16,
    dir: PathBuf,
    cli: Vec<String>,
}

impl TlsRedis {
    /// A TLS-only redis-server requiring client certificates, with extra arguments; waits until
    /// it answers PING over TLS (`auth`: redis-cli's `--user U --pass P`, if the default user is
    /// off).
    pub fn start(pki: &Pki, extra: &[&str], auth: &[&str]) -> TlsRedis {
        let port = free_port();
        let dir = temp_dir("redis", port);
        let mut command = Command::new("redis-server");
        command
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-auth-clients",
                "yes",
            ])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .args(pki.server_args())
            .args(extra);
        let mut cli = pki.cli_args();
        cli.extend(auth.iter().map(|a| a.to_string()));
        TlsRedis::spawn(command, port, dir, cli)
    }

    /// A TLS-only sentinel (`redis-server sentinel.conf --sentinel`) watching `master` at
    /// `master_port` over TLS, quorum 1; with `auth`, it signs in to the master and replicas as
    /// that ACL user and password.
    pub fn sentinel(
        pki: &Pki,
        master: &str,
        master_port: u16,
        down_after_ms: u64,
        auth: Option<(&str, &str)>,
    ) -> TlsRedis {
        let port = free_port();
        let dir = temp_dir("sentinel", port);
        let tls: String = pki
            .server_args()
            .chunks(2)
            .map(|kv| format!("{} {}\n", kv[0].trim_start_matches("--"), kv[1]))
            .collect();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port 0\ntls-port {port}\ntls-auth-clients yes\ntls-replication yes\n{tls}\
                 bind 127.0.0.1\ndir {}\n\
                 sentinel monitor {master} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {master} {down_after_ms}\n\
                 sentinel failover-timeout {master} 3000\n{}",
                dir.display(),
                auth.map_or(String::new(), |(user, password)| format!(
                    "sentinel auth-user {master} {user}\nsentinel auth-pass {master} {password}\n"
                )),
            ),
        )
        .expect("write sentinel.conf");
        let mut command = Command::new("redis-server");
        command.arg(&conf).arg("--sentinel");
        TlsRedis::spawn(command, port, dir, pki.cli_args())
    }

    fn spawn(mut command: Command, port: u16, dir: PathBuf, cli: Vec<String>) -> TlsRedis {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let server = TlsRedis {
            child,
            port,
            dir,
            cli,
        };
        server.wait_until(Duration::from_secs(10), "it answers PING over TLS", |s| {
            s.cli(&["PING"]).trim() == "PONG"
        });
        server
    }

    /// `redis://127.0.0.1:PORT/` (TLS comes from the settings, as with the peer's REDIS_TLS).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `rediss://127.0.0.1:PORT/`
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }

    /// redis-cli over TLS with the client certificate; its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "--tls",
                "--no-auth-warning",
            ])
            .args(&self.cli)
            .args(args)
            .output()
            .expect("redis-cli on PATH");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until `done`, failing the test after `within`.
    pub fn wait_until(&self, within: Duration, what: &str, done: impl Fn(&TlsRedis) -> bool) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if done(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        panic!(
            "TLS redis on port {}: not within {within:?}: {what}",
            self.port
        );
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir(kind: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-tls-{kind}-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Three TLS-only cluster nodes (`--tls-cluster yes`) joined by `redis-cli --cluster create --tls`.
pub fn tls_cluster(pki: &Pki) -> Vec<TlsRedis> {
    let nodes: Vec<TlsRedis> = (0..3)
        .map(|_| {
            TlsRedis::start(
                pki,
                &[
                    "--tls-cluster",
                    "yes",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ],
                &[],
            )
        })
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new("redis-cli")
        .arg("--tls")
        .args(pki.cli_args())
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli on PATH");
    assert!(
        out.status.success(),
        "TLS cluster create failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &nodes {
        node.wait_until(Duration::from_secs(15), "cluster_state:ok", |n| {
            n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
        });
    }
    nodes
}
