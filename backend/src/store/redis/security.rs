//! How sluice proves who it is to Redis and checks that it talks to the right Redis: TLS (a CA
//! bundle, a client certificate and key for mutual TLS, hostname verification) and credentials
//! (an ACL user and a password). One set for every node of the deployment: the single node, each
//! Cluster node, and, with Sentinel, the sentinels (TLS only: a sentinel's own password stays in
//! its address) and the master.
//!
//! Files are read and their PEM checked when the configuration is built ([`RedisTls::load`]), so
//! a missing, unreadable or malformed file stops the start naming its setting instead of showing
//! up later as an unreachable store. They are read once: a rotated certificate or password takes
//! a restart (redis-rs keeps them inside each node's connection settings).
//!
//! The TLS itself is redis-rs's rustls support (no crypto of ours); [`explain`] turns the
//! handshake failures a misconfiguration causes into a sentence naming the setting to check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config_error::{RedisConfigError, RedisField};
use super::target::RedisTarget;

/// Whether the server's certificate must name the host sluice connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostnameCheck {
    /// The certificate must name the URL's host (the default).
    #[default]
    Verify,
    /// Any name is accepted; the chain is still verified against the CA
    /// (`--redis-tls-skip-hostname-verification`, the peer's `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`,
    /// for services whose certificates name something else, e.g. GCP Memorystore).
    Skip,
}

/// A PEM file as read at start: its path (for messages) and its bytes. `Debug` shows the path
/// only (a key file is a secret).
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its contents.
    pub pem: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PemFile({})", self.path.display())
    }
}

/// A client certificate (chain) and its private key, for Redis's `tls-auth-clients yes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, leaf first.
    pub cert: PemFile,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PemFile,
}

/// TLS to every Redis node. Present in [`RedisSecurity::tls`] means TLS is used even for
/// `redis://` URLs (as the peer's `REDIS_TLS=true` with `host:port` addresses); `rediss://` URLs
/// alone turn it on with the defaults (system roots, no client certificate).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// The CA bundle the server's certificate must chain to; `None`: the system's roots. When
    /// given, it replaces the system's roots.
    pub ca: Option<PemFile>,
    /// The certificate and key sluice presents (mutual TLS).
    pub client: Option<ClientIdentity>,
    /// Whether the certificate must name the host.
    pub hostname: HostnameCheck,
}

/// The files of a [`RedisTls`], as given (paths, not yet read).
#[derive(Debug, Clone, Default)]
pub struct TlsFiles<'a> {
    /// The CA bundle.
    pub ca: Option<&'a Path>,
    /// The client certificate.
    pub cert: Option<&'a Path>,
    /// The client key.
    pub key: Option<&'a Path>,
}

impl RedisTls {
    /// Reads and checks the files: the CA bundle holds at least one certificate, the client
    /// certificate file at least one and the key file a private key, and a certificate comes
    /// with its key. Each refusal names the setting ([`RedisConfigError::field`]).
    pub fn load(
        files: &TlsFiles<'_>,
        hostname: HostnameCheck,
    ) -> Result<RedisTls, RedisConfigError> {
        let ca = files
            .ca
            .map(|path| read_certs(path, RedisField::TlsCaCert))
            .transpose()?;
        let client = match (files.cert, files.key) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(RedisConfigError::TlsPair {
                    field: RedisField::TlsClientKey,
                    reason: "a client certificate needs its key: give the key file too",
                })
            }
            (None, Some(_)) => {
                return Err(RedisConfigError::TlsPair {
                    field: RedisField::TlsClientCert,
                    reason: "a client key needs its certificate: give the certificate file too",
                })
            }
            (Some(cert), Some(key)) => Some(ClientIdentity {
                cert: read_certs(cert, RedisField::TlsClientCert)?,
                key: read_key(key)?,
            }),
        };
        Ok(RedisTls {
            ca,
            client,
            hostname,
        })
    }

    /// The certificates in redis-rs's form.
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client.as_ref().map(|c| redis::ClientTlsConfig {
                client_cert: c.cert.pem.clone(),
                client_key: c.key.pem.clone(),
            }),
            root_cert: self.ca.as_ref().map(|ca| ca.pem.clone()),
        }
    }

    /// Whether redis-rs needs certificates (a CA or a client identity) at all.
    fn has_certificates(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

/// Credentials and TLS for every node (see the module documentation).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisSecurity {
    /// TLS even for `redis://` URLs, with these settings; `None`: TLS only where a URL says
    /// `rediss://` (with the system's roots).
    pub tls: Option<Box<RedisTls>>,
    /// The ACL user (`AUTH user password`); replaces a user in the URLs.
    pub user: Option<String>,
    /// The password; replaces a password in the URLs. With Sentinel, the master's (and its
    /// replicas').
    pub password: Option<String>,
}

impl std::fmt::Debug for RedisSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSecurity")
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl RedisSecurity {
    /// Whether every connection uses TLS, whatever the URLs' scheme.
    pub fn forces_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The hostname check in force.
    pub fn hostname(&self) -> HostnameCheck {
        self.tls.as_ref().map(|t| t.hostname).unwrap_or_default()
    }

    /// The certificates to give redis-rs, if any.
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.tls
            .as_ref()
            .filter(|t| t.has_certificates())
            .map(|t| t.certificates())
    }

    /// The connection settings of one node's URL with these settings applied: TLS (the scheme
    /// upgraded when TLS is forced; the CA, client identity and hostname check baked into the
    /// address) and the user and password, unless `credentials` says the URL's own are kept
    /// (a sentinel's).
    pub(crate) fn node(&self, url: &str, credentials: Credentials) -> RedisResult<ConnectionInfo> {
        let mut info = url.into_connection_info()?;
        if self.forces_tls() {
            if let ConnectionAddr::Tcp(host, port) = info.addr().clone() {
                info = info.set_addr(ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    tls_params: None,
                });
            }
        }
        if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            if let Some(certs) = self.certificates() {
                info = redis::Client::build_with_tls(info, certs)?
                    .get_connection_info()
                    .clone();
            }
            if self.hostname() == HostnameCheck::Skip {
                let mut addr = info.addr().clone();
                addr.set_danger_accept_invalid_hostnames(true);
                info = info.set_addr(addr);
            }
        }
        if credentials == Credentials::Ours {
            let mut settings = info.redis_settings().clone();
            if let Some(user) = &self.user {
                settings = settings.set_username(user);
            }
            if let Some(password) = &self.password {
                settings = settings.set_password(password);
            }
            info = info.set_redis_settings(settings);
        }
        Ok(info)
    }
}

/// Whose credentials a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// [`RedisSecurity::user`] and [`RedisSecurity::password`] replace the URL's (data nodes).
    Ours,
    /// The URL's own (a sentinel, whose password is its own).
    Url,
}

/// Whether a URL asks for TLS (`rediss://`, `valkeys://`; also as the first item of a Sentinel
/// setting, `master@rediss://...`).
pub fn is_tls_url(url: &str) -> bool {
    let before = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    let scheme = before.rsplit('@').next().unwrap_or_default().trim();
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

/// Installs ring as the process's rustls crypto provider unless one is installed already, so
/// that redis-rs's `ClientConfig::builder()` finds one whatever other crates enabled.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one between the check and here: then theirs is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A sentence on what a TLS failure most likely means and which setting to check, for an error
/// seen while connecting; `None` when the error is not about TLS.
pub fn explain(error: &RedisError) -> Option<&'static str> {
    explain_text(&error.to_string())
}

/// [`explain`] on an error's text (the store's errors carry text only).
pub fn explain_text(text: &str) -> Option<&'static str> {
    let t = text.to_ascii_lowercase();
    if t.contains("unknownissuer") || t.contains("unknown issuer") || t.contains("badsignature") {
        Some("TLS: the Redis server's certificate is not signed by the CA sluice trusts: check --redis-tls-ca-cert (SLUICE_REDIS_TLS_CA_CERT, REDIS_TLS_CACERT)")
    } else if t.contains("notvalidforname") || t.contains("not valid for name") {
        Some("TLS: the Redis server's certificate does not name the host in the URL: connect by a name it holds, or --redis-tls-skip-hostname-verification")
    } else if t.contains("expired") || t.contains("notvalidyet") {
        Some("TLS: the Redis server's certificate is expired or not yet valid")
    } else if t.contains("certificaterequired")
        || t.contains("certificate required")
        || t.contains("badcertificate")
        || t.contains("unknownca")
        || t.contains("decrypterror")
    {
        Some("TLS: the Redis server refused sluice's client certificate (or none was given): check --redis-tls-client-cert and --redis-tls-client-key against its tls-ca-cert-file")
    } else if t.contains("corrupt message")
        || t.contains("invalidcontenttype")
        || t.contains("invalid content type")
        || t.contains("invalidmessage")
    {
        Some("TLS: the Redis server did not answer in TLS: is it a plaintext port? Use its tls-port, or redis:// without TLS")
    } else if t.contains("peer certificate") || t.contains("handshake") || t.contains("tls") {
        Some("TLS: the handshake with the Redis server failed")
    } else {
        None
    }
}

/// After a failed TLS connection: the configured TLS addresses (single node, Cluster seeds,
/// sentinels) that answer a plain `PING` as Redis does (`+PONG`, or an error such as `-NOAUTH`),
/// named in a sentence. A TLS client on a plaintext port otherwise sees no answer at all (Redis
/// waits for the end of a line that never comes) and could only report a timeout. Each probe is
/// bounded by `bound`; no TLS address, or none answering plaintext: `None`.
pub(crate) async fn plaintext_hint(
    target: &RedisTarget,
    security: &RedisSecurity,
    bound: Duration,
) -> Option<String> {
    let (urls, credentials): (Vec<&String>, Credentials) = match target {
        RedisTarget::Single(url) => (vec![url], Credentials::Ours),
        RedisTarget::Cluster(urls) => (urls.iter().collect(), Credentials::Ours),
        RedisTarget::Sentinel(t) => (t.sentinels.iter().collect(), Credentials::Url),
    };
    let addresses: Vec<(String, u16)> = urls
        .into_iter()
        .filter_map(|url| match security.node(url, credentials).ok()?.addr() {
            ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
            _ => None,
        })
        .collect();
    let answers = futures::future::join_all(
        addresses
            .iter()
            .map(|(host, port)| answers_plaintext(host, *port, bound)),
    )
    .await;
    let plain: Vec<String> = addresses
        .iter()
        .zip(answers)
        .filter(|(_, plain)| *plain)
        .map(|((host, port), _)| format!("{host}:{port}"))
        .collect();
    (!plain.is_empty()).then(|| {
        format!(
            "TLS: {} answers plaintext Redis, not TLS: use the server's tls-port, or redis:// \
             without TLS",
            plain.join(", ")
        )
    })
}

/// Whether `host:port` answers `PING` in plaintext Redis.
async fn answers_plaintext(host: &str, port: u16, bound: Duration) -> bool {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        Some(matches!(first[0], b'+' | b'-'))
    };
    matches!(tokio::time::timeout(bound, probe).await, Ok(Some(true)))
}

/// Reads a file of one or more certificates.
fn read_certs(path: &Path, field: RedisField) -> Result<PemFile, RedisConfigError> {
    let pem = read(path, field)?;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| bad(path, field, format!("is not PEM: {e}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(bad(
            path,
            field,
            "holds no certificate (no -----BEGIN CERTIFICATE----- block)".to_owned(),
        ));
    }
    Ok(PemFile {
        path: path.to_owned(),
        pem,
    })
}

/// Reads a private key file.
fn read_key(path: &Path) -> Result<PemFile, RedisConfigError> {
    let field = RedisField::TlsClientKey;
    let pem = read(path, field)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad(
            path,
            field,
            format!("holds no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
        )
    })?;
    Ok(PemFile {
        path: path.to_owned(),
        pem,
    })
}

fn read(path: &Path, field: RedisField) -> Result<Vec<u8>, RedisConfigError> {
    std::fs::read(path).map_err(|e| bad(path, field, format!("cannot be read: {e}")))
}

fn bad(path: &Path, field: RedisField, reason: String) -> RedisConfigError {
    RedisConfigError::TlsFile {
        field,
        path: path.display().to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls_are_told_apart() {
        assert!(is_tls_url("rediss://h:1/"));
        assert!(is_tls_url("REDISS://h:1/"));
        assert!(!is_tls_url("redis://h:1/"));
        assert!(!is_tls_url("h:1"));
        assert!(is_tls_url("m@rediss://h:26379"));
    }

    #[test]
    fn forced_tls_upgrades_a_plain_url_and_keeps_the_address() {
        let security = RedisSecurity {
            tls: Some(Box::default()),
            user: Some("app".into()),
            password: Some("pw".into()),
        };
        let info = security
            .node("redis://:old@10.0.0.1:6380/", Credentials::Ours)
            .expect("info");
        assert!(matches!(
            info.addr(),
            ConnectionAddr::TcpTls { host, port: 6380, insecure: false, .. } if host == "10.0.0.1"
        ));
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        let sentinel = security
            .node("redis://:own@10.0.0.1:26379", Credentials::Url)
            .expect("info");
        assert_eq!(sentinel.redis_settings().password(), Some("own"));
        let plain = RedisSecurity::default()
            .node("redis://h:1/", Credentials::Ours)
            .expect("info");
        assert_eq!(plain.addr(), &ConnectionAddr::Tcp("h".into(), 1));
    }

    #[test]
    fn missing_and_malformed_files_are_refused_naming_the_setting() {
        let dir = std::env::temp_dir().join(format!("sluice-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let missing = dir.join("missing.pem");
        let e = RedisTls::load(
            &TlsFiles {
                ca: Some(&missing),
                ..TlsFiles::default()
            },
            HostnameCheck::Verify,
        )
        .expect_err("missing");
        assert_eq!(e.field(), RedisField::TlsCaCert);
        assert!(e.to_string().contains("cannot be read"), "{e}");
        let e = RedisTls::load(
            &TlsFiles {
                ca: Some(&junk),
                ..TlsFiles::default()
            },
            HostnameCheck::Verify,
        )
        .expect_err("junk");
        assert!(e.to_string().contains("holds no certificate"), "{e}");
        let e = RedisTls::load(
            &TlsFiles {
                cert: Some(&junk),
                ..TlsFiles::default()
            },
            HostnameCheck::Verify,
        )
        .expect_err("no key");
        assert_eq!(e.field(), RedisField::TlsClientKey);
        let e = RedisTls::load(
            &TlsFiles {
                cert: Some(&junk),
                key: Some(&junk),
                ..TlsFiles::default()
            },
            HostnameCheck::Verify,
        )
        .expect_err("junk cert");
        assert_eq!(e.field(), RedisField::TlsClientCert);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tls_failures_are_explained() {
        let unknown = explain_text("invalid peer certificate: UnknownIssuer").expect("known");
        assert!(unknown.contains("--redis-tls-ca-cert"), "{unknown}");
        let plain =
            explain_text("received corrupt message of type InvalidContentType").expect("known");
        assert!(plain.contains("plaintext"), "{plain}");
        let refused = explain_text("received fatal alert: CertificateRequired").expect("known");
        assert!(refused.contains("client certificate"), "{refused}");
        assert_eq!(explain_text("Connection refused (os error 111)"), None);
    }
}
