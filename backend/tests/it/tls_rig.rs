//! Certificates made at test time with the openssl CLI (none committed), TLS clients over
//! tokio-rustls (plain HTTP/1.1 written by hand, gRPC through tonic with a TLS connector), a
//! sluice run with TLS on its listeners, and a capture of its log lines.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sluice_backend::tls::ListenersTls;
use sluice_backend::{run, Config, Listeners, RunError, StoreChoice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::harness::{stop_run, TOKEN};

/// A directory of its own under the system temp dir, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    /// A fresh directory named for `what`.
    pub fn new(what: &str) -> Dir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("sluice-tls-{}-{what}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// A path in it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA: `NAME.pem` and `NAME.key` in its directory.
pub struct Ca {
    dir: PathBuf,
    name: String,
}

/// A leaf certificate: its chain and key files.
#[derive(Clone)]
pub struct Leaf {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl Ca {
    /// A new self-signed CA (P-256) in `dir`.
    pub fn new(dir: &Dir, name: &str) -> Ca {
        openssl(
            &dir.0,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Ca {
            dir: dir.0.clone(),
            name: name.to_owned(),
        }
    }

    /// The CA's certificate file.
    pub fn pem(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// A leaf signed by this CA: for `server` (SAN localhost and 127.0.0.1) or a client (SAN
    /// DNS `client_name`), valid for `days` (0: expires within the second).
    pub fn leaf(&self, name: &str, usage: Usage, days: u32) -> Leaf {
        let ext = match usage {
            Usage::Server => {
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n".to_owned()
            }
            Usage::Client(dns) => format!(
                "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:{dns}\n"
            ),
        };
        std::fs::write(self.dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(100);
        let serial = SERIAL
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_string();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{}.pem", self.name),
                "-CAkey",
                &format!("{}.key", self.name),
                "-set_serial",
                &serial,
                "-days",
                &days.to_string(),
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
        Leaf {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        }
    }
}

/// What a leaf is for.
#[derive(Clone, Copy)]
pub enum Usage {
    /// A listener's certificate.
    Server,
    /// A client's, valid for this DNS name.
    Client(&'static str),
}

/// A TLS client trusting `ca`, presenting `leaf` if given.
pub fn client(ca: &Path, leaf: Option<&Leaf>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match leaf {
        Some(leaf) => {
            let chain = CertificateDer::pem_file_iter(&leaf.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(&leaf.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr` as `localhost`: the session, or the handshake's error.
pub async fn connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(config).connect(name, tcp).await?;
    // TLS 1.3: a client certificate the server refuses is only known once the client reads
    // the server's answer (the alert); a zero-byte flush plus a request makes it show.
    tls.flush().await?;
    Ok(tls)
}

/// One HTTP/1.1 request over TLS to `addr`: its status and body, or why it failed (a refused
/// handshake shows here).
pub async fn https(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut tls = connect(addr, config).await?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer))
        .await
        .map_err(|_| std::io::Error::other("no answer within 10 s"))??;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// A plaintext HTTP/1.1 request to `addr`: what came back (nothing, on a TLS listener).
pub async fn plaintext(addr: SocketAddr) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let _ = tcp
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    answer
}

/// A tonic channel to `addr` over TLS with `config` (HTTP/2 by ALPN).
pub async fn grpc_channel(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let connector = tower::service_fn(move |_: hyper::Uri| {
        let config = config.clone();
        async move {
            connect(addr, config)
                .await
                .map(hyper_util::rt::TokioIo::new)
        }
    });
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect_with_connector(connector)
        .await
}

/// Log lines written while it lives (on this thread: the tests run on a current-thread
/// runtime, so the server's tasks log here too).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's log lines until the guard drops.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// The lines so far that contain every one of `words`.
    pub fn lines_with(&self, words: &[&str]) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines()
            .filter(|l| words.iter().all(|w| l.contains(w)))
            .map(str::to_owned)
            .collect()
    }
}

/// A sluice with TLS on its listeners (port 0 on loopback).
pub struct TlsRig {
    /// The gRPC listener.
    pub grpc: SocketAddr,
    /// The decision listener.
    pub decision: SocketAddr,
    /// The admin listener.
    pub admin: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), RunError>>>,
}

impl TlsRig {
    /// Binds three listeners and runs sluice over the memory store with `tls`; returns once it
    /// runs (the caller waits for an answer, over whatever its listeners speak).
    pub async fn start(tls: ListenersTls) -> TlsRig {
        let bind = || TcpListener::bind("127.0.0.1:0");
        let (decision, admin, grpc) = (
            bind().await.unwrap(),
            bind().await.unwrap(),
            bind().await.unwrap(),
        );
        let addrs = (
            grpc.local_addr().unwrap(),
            decision.local_addr().unwrap(),
            admin.local_addr().unwrap(),
        );
        let mut config = Config::new(StoreChoice::Memory, TOKEN);
        config.listener_tls = tls;
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(run(
            Listeners {
                decision,
                admin,
                grpc: Some(grpc),
                ratelimit_http: sluice_backend::RatelimitHttp::Off,
            },
            config,
            async move {
                let _ = stopped.await;
            },
        ));
        TlsRig {
            grpc: addrs.0,
            decision: addrs.1,
            admin: addrs.2,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// Stops gracefully; asserts that `run` returned Ok.
    pub async fn stop(mut self) {
        stop_run(self.stop.take(), self.handle.take(), Duration::from_secs(6)).await;
    }
}

impl Drop for TlsRig {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
