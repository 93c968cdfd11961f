//! The listeners as named in flags, logs and metrics, and each one's TLS files.

use std::path::PathBuf;

/// One of the backend's listeners, as named in flags, logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerName {
    /// `--grpc-listen`: the decision exchange and the rate limit service.
    Grpc,
    /// `--decision-listen`: the decision API over HTTP.
    Decision,
    /// `--admin-listen`: the admin API and the dashboard.
    Admin,
}

/// Which file (or setting) of a listener's TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsSetting {
    /// The certificate chain (PEM).
    Cert,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    Key,
    /// The CA bundle client certificates must chain to (PEM).
    ClientCa,
    /// The DNS name a client certificate must carry (gRPC listener only).
    ClientSan,
}

impl ListenerName {
    /// The name in logs and in the metric's `listener` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerName::Grpc => "grpc",
            ListenerName::Decision => "decision",
            ListenerName::Admin => "admin",
        }
    }

    /// The flag that sets this listener's address, for the warning about plaintext.
    pub fn listen_flag(self) -> &'static str {
        match self {
            ListenerName::Grpc => "--grpc-listen",
            ListenerName::Decision => "--decision-listen",
            ListenerName::Admin => "--admin-listen",
        }
    }

    /// The flag (and its variables) that sets `setting`, as every error names it.
    pub fn flag(self, setting: TlsSetting) -> &'static str {
        use ListenerName::{Admin, Decision, Grpc};
        use TlsSetting::{Cert, ClientCa, ClientSan, Key};
        match (self, setting) {
            (Grpc, Cert) => "--grpc-tls-cert (SLUICE_GRPC_TLS_CERT, GRPC_SERVER_TLS_CERT)",
            (Grpc, Key) => "--grpc-tls-key (SLUICE_GRPC_TLS_KEY, GRPC_SERVER_TLS_KEY)",
            (Grpc, ClientCa) => {
                "--grpc-tls-client-ca (SLUICE_GRPC_TLS_CLIENT_CA, GRPC_CLIENT_TLS_CACERT)"
            }
            (Grpc, ClientSan) => {
                "--grpc-tls-client-san (SLUICE_GRPC_TLS_CLIENT_SAN, GRPC_CLIENT_TLS_SAN)"
            }
            (Decision, Cert) => "--decision-tls-cert (SLUICE_DECISION_TLS_CERT)",
            (Decision, Key) => "--decision-tls-key (SLUICE_DECISION_TLS_KEY)",
            (Decision, ClientCa) => "--decision-tls-client-ca (SLUICE_DECISION_TLS_CLIENT_CA)",
            (Decision, ClientSan) => "--decision-tls-client-san",
            (Admin, Cert) => "--admin-tls-cert (SLUICE_ADMIN_TLS_CERT)",
            (Admin, Key) => "--admin-tls-key (SLUICE_ADMIN_TLS_KEY)",
            (Admin, ClientCa) => "--admin-tls-client-ca (SLUICE_ADMIN_TLS_CLIENT_CA)",
            (Admin, ClientSan) => "--admin-tls-client-san",
        }
    }

    /// The application protocols offered in ALPN, the server's preference first. The HTTP
    /// listeners prefer HTTP/1.1 (their protocol) and offer h2 only so a gRPC client sent to
    /// them can read its refusal (see [`crate::wrong_listener`]); the gRPC listener is h2.
    pub fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            ListenerName::Grpc => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            ListenerName::Decision | ListenerName::Admin => {
                vec![b"http/1.1".to_vec(), b"h2".to_vec()]
            }
        }
    }
}

/// One listener's TLS files (from [`flags`]); read at start, re-read when they change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Whose files.
    pub listener: ListenerName,
    /// The certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
    /// With it, mutual TLS: clients must present a certificate chaining to a CA in this file.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: the DNS name a client certificate must also be valid for
    /// (envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN`).
    pub client_san: Option<String>,
}

/// The TLS of every listener; `None`: that listener speaks plaintext.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenersTls {
    /// The gRPC listener's.
    pub grpc: Option<TlsFiles>,
    /// The decision listener's.
    pub decision: Option<TlsFiles>,
    /// The admin listener's.
    pub admin: Option<TlsFiles>,
}
