//! The listeners' TLS flags, flattened into [`crate::cli::Cli`], and envoyproxy/ratelimit's
//! settings as fallbacks of the gRPC listener's: `GRPC_SERVER_USE_TLS=true` with
//! `GRPC_SERVER_TLS_CERT` / `GRPC_SERVER_TLS_KEY`, `GRPC_CLIENT_TLS_CACERT` and
//! `GRPC_CLIENT_TLS_SAN`, read only when sluice's own flag is not given (as the peer reads them:
//! without `GRPC_SERVER_USE_TLS=true` the others are ignored).

use std::path::PathBuf;

use super::files::{ListenerName, ListenersTls, TlsFiles, TlsSetting};

/// `--grpc-tls-*`, `--decision-tls-*`, `--admin-tls-*`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsFlags {
    /// gRPC listener: serve TLS with this certificate chain (PEM, leaf first); re-read within a
    /// second when it changes. Needs --grpc-tls-key. [peer: GRPC_SERVER_TLS_CERT]
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub grpc_tls_cert: Option<PathBuf>,
    /// gRPC listener: the certificate's private key (PEM). [peer: GRPC_SERVER_TLS_KEY]
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub grpc_tls_key: Option<PathBuf>,
    /// gRPC listener: require client certificates signed by a CA in this file (mutual TLS);
    /// other clients are refused at the handshake. [peer: GRPC_CLIENT_TLS_CACERT]
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_CLIENT_CA",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub grpc_tls_client_ca: Option<PathBuf>,
    /// gRPC listener, with --grpc-tls-client-ca: client certificates must also be valid for this
    /// DNS name. [peer: GRPC_CLIENT_TLS_SAN]
    #[arg(
        long,
        env = "SLUICE_GRPC_TLS_CLIENT_SAN",
        value_name = "DNS_NAME",
        help_heading = "TLS"
    )]
    pub grpc_tls_client_san: Option<String>,

    /// Decision listener: serve TLS with this certificate chain (PEM). Needs --decision-tls-key.
    #[arg(
        long,
        env = "SLUICE_DECISION_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub decision_tls_cert: Option<PathBuf>,
    /// Decision listener: the certificate's private key (PEM).
    #[arg(
        long,
        env = "SLUICE_DECISION_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub decision_tls_key: Option<PathBuf>,
    /// Decision listener: require client certificates signed by a CA in this file (mutual TLS).
    #[arg(
        long,
        env = "SLUICE_DECISION_TLS_CLIENT_CA",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub decision_tls_client_ca: Option<PathBuf>,

    /// Admin listener (API and dashboard): serve TLS with this certificate chain (PEM). Needs
    /// --admin-tls-key.
    #[arg(
        long,
        env = "SLUICE_ADMIN_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub admin_tls_cert: Option<PathBuf>,
    /// Admin listener: the certificate's private key (PEM).
    #[arg(
        long,
        env = "SLUICE_ADMIN_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub admin_tls_key: Option<PathBuf>,
    /// Admin listener: require client certificates signed by a CA in this file (mutual TLS), on
    /// top of the admin token.
    #[arg(
        long,
        env = "SLUICE_ADMIN_TLS_CLIENT_CA",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub admin_tls_client_ca: Option<PathBuf>,

    /// envoyproxy/ratelimit's GRPC_SERVER_USE_TLS (true/false).
    #[arg(long = "peer-grpc-server-use-tls", env = "GRPC_SERVER_USE_TLS", hide = true, value_parser = parse_go_bool)]
    pub peer_use_tls: Option<bool>,
    /// envoyproxy/ratelimit's GRPC_SERVER_TLS_CERT.
    #[arg(
        long = "peer-grpc-server-tls-cert",
        env = "GRPC_SERVER_TLS_CERT",
        hide = true
    )]
    pub peer_cert: Option<PathBuf>,
    /// envoyproxy/ratelimit's GRPC_SERVER_TLS_KEY.
    #[arg(
        long = "peer-grpc-server-tls-key",
        env = "GRPC_SERVER_TLS_KEY",
        hide = true
    )]
    pub peer_key: Option<PathBuf>,
    /// envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT.
    #[arg(
        long = "peer-grpc-client-tls-cacert",
        env = "GRPC_CLIENT_TLS_CACERT",
        hide = true
    )]
    pub peer_client_ca: Option<PathBuf>,
    /// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN.
    #[arg(
        long = "peer-grpc-client-tls-san",
        env = "GRPC_CLIENT_TLS_SAN",
        hide = true
    )]
    pub peer_client_san: Option<String>,
}

/// Go's `strconv.ParseBool`, as the peer reads its booleans.
fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Ok(false),
        other => Err(format!("{other:?} is not a boolean (true or false)")),
    }
}

/// A listener's TLS flags that do not make a whole.
#[derive(Debug, thiserror::Error)]
#[error("{given} is set but {missing} is not: give both")]
pub struct IncompleteTls {
    /// The flag given.
    pub given: &'static str,
    /// The flag missing.
    pub missing: &'static str,
}

impl TlsFlags {
    /// Every listener's TLS files; a certificate without its key (or the reverse, or a client
    /// CA without a certificate) is refused naming both flags.
    pub fn resolve(&self) -> Result<ListenersTls, IncompleteTls> {
        let peer = self.peer_use_tls == Some(true);
        let peer_path = |p: &Option<PathBuf>| if peer { p.clone() } else { None };
        if !peer && (self.peer_cert.is_some() || self.peer_client_ca.is_some()) {
            tracing::info!("GRPC_SERVER_TLS_* / GRPC_CLIENT_TLS_* are set but GRPC_SERVER_USE_TLS is not true; ignored, as envoyproxy/ratelimit ignores them");
        }
        let grpc = one(
            ListenerName::Grpc,
            self.grpc_tls_cert
                .clone()
                .or_else(|| peer_path(&self.peer_cert)),
            self.grpc_tls_key
                .clone()
                .or_else(|| peer_path(&self.peer_key)),
            self.grpc_tls_client_ca
                .clone()
                .or_else(|| peer_path(&self.peer_client_ca)),
            self.grpc_tls_client_san.clone().or_else(|| {
                self.peer_client_san
                    .clone()
                    .filter(|s| peer && !s.is_empty())
            }),
        )?;
        if peer && grpc.is_none() {
            return Err(IncompleteTls {
                given: "GRPC_SERVER_USE_TLS=true",
                missing: ListenerName::Grpc.flag(TlsSetting::Cert),
            });
        }
        Ok(ListenersTls {
            grpc,
            decision: one(
                ListenerName::Decision,
                self.decision_tls_cert.clone(),
                self.decision_tls_key.clone(),
                self.decision_tls_client_ca.clone(),
                None,
            )?,
            admin: one(
                ListenerName::Admin,
                self.admin_tls_cert.clone(),
                self.admin_tls_key.clone(),
                self.admin_tls_client_ca.clone(),
                None,
            )?,
        })
    }
}

fn one(
    listener: ListenerName,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    client_san: Option<String>,
) -> Result<Option<TlsFiles>, IncompleteTls> {
    let flag = |s| listener.flag(s);
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            listener,
            cert,
            key,
            client_ca,
            client_san,
        })),
        (Some(_), None) => Err(IncompleteTls {
            given: flag(TlsSetting::Cert),
            missing: flag(TlsSetting::Key),
        }),
        (None, Some(_)) => Err(IncompleteTls {
            given: flag(TlsSetting::Key),
            missing: flag(TlsSetting::Cert),
        }),
        (None, None) => match (client_ca, client_san) {
            (Some(_), _) => Err(IncompleteTls {
                given: flag(TlsSetting::ClientCa),
                missing: flag(TlsSetting::Cert),
            }),
            (None, Some(_)) => Err(IncompleteTls {
                given: flag(TlsSetting::ClientSan),
                missing: flag(TlsSetting::ClientCa),
            }),
            (None, None) => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_settings_apply_only_with_use_tls() {
        let mut flags = TlsFlags {
            peer_cert: Some("c.pem".into()),
            peer_key: Some("k.pem".into()),
            peer_client_ca: Some("ca.pem".into()),
            peer_client_san: Some("envoy.local".into()),
            ..TlsFlags::default()
        };
        assert_eq!(flags.resolve().ok().and_then(|t| t.grpc), None);
        flags.peer_use_tls = Some(true);
        let grpc = flags.resolve().ok().and_then(|t| t.grpc);
        assert_eq!(
            grpc,
            Some(TlsFiles {
                listener: ListenerName::Grpc,
                cert: "c.pem".into(),
                key: "k.pem".into(),
                client_ca: Some("ca.pem".into()),
                client_san: Some("envoy.local".into()),
            })
        );
        // sluice's own flag wins.
        flags.grpc_tls_cert = Some("mine.pem".into());
        let grpc = flags.resolve().ok().and_then(|t| t.grpc);
        assert_eq!(grpc.map(|g| g.cert), Some("mine.pem".into()));
    }

    #[test]
    fn half_a_pair_is_refused_naming_both_flags() {
        let flags = TlsFlags {
            decision_tls_cert: Some("c.pem".into()),
            ..TlsFlags::default()
        };
        let e = flags.resolve().err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("--decision-tls-cert (SLUICE_DECISION_TLS_CERT) is set but --decision-tls-key (SLUICE_DECISION_TLS_KEY) is not: give both"));
        let flags = TlsFlags {
            peer_use_tls: Some(true),
            ..TlsFlags::default()
        };
        let e = flags.resolve().err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("GRPC_SERVER_USE_TLS=true is set but --grpc-tls-cert (SLUICE_GRPC_TLS_CERT, GRPC_SERVER_TLS_CERT) is not: give both"));
        assert_eq!(parse_go_bool("T"), Ok(true));
        assert!(parse_go_bool("yes").is_err());
    }
}
