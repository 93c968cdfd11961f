//! Every listener's TLS in force, started together, and the start's log lines about them.

use std::net::SocketAddr;
use std::sync::Arc;

use super::files::{ListenerName, ListenersTls, TlsFiles, TlsSetting};
use super::live::TlsListener;
use super::load::LoadError;
use super::plain::PlainListener;
use super::refusal::RefusedCounter;

/// How one listener is served.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Plaintext; a TLS client is refused ([`PlainListener`]).
    Plain(Arc<PlainListener>),
    /// TLS ([`TlsListener`]).
    Tls(Arc<TlsListener>),
}

/// Each listener's transport.
pub struct Served {
    /// The gRPC listener's.
    pub grpc: Transport,
    /// The decision listener's.
    pub decision: Transport,
    /// The admin listener's.
    pub admin: Transport,
}

impl Served {
    /// Reads every listener's TLS files: a bad one stops the start, naming its flag and file.
    pub fn start(files: &ListenersTls, refused: &RefusedCounter) -> Result<Served, LoadError> {
        let start = |listener: ListenerName, files: &Option<TlsFiles>| {
            Ok(match files {
                Some(files) => Transport::Tls(TlsListener::start(files.clone(), refused.clone())?),
                None => Transport::Plain(PlainListener::new(listener, refused.clone())),
            })
        };
        Ok(Served {
            grpc: start(ListenerName::Grpc, &files.grpc)?,
            decision: start(ListenerName::Decision, &files.decision)?,
            admin: start(ListenerName::Admin, &files.admin)?,
        })
    }

    /// Every listener with TLS.
    pub fn each(&self) -> impl Iterator<Item = &Arc<TlsListener>> {
        [&self.grpc, &self.decision, &self.admin]
            .into_iter()
            .filter_map(|t| match t {
                Transport::Tls(tls) => Some(tls),
                Transport::Plain(_) => None,
            })
    }

    /// Logs how each listener is served, and a warning for each one that listens beyond
    /// loopback without TLS: anyone who reaches it can call it in clear.
    pub fn warn_plaintext(
        &self,
        decision: SocketAddr,
        admin: SocketAddr,
        grpc: Option<SocketAddr>,
    ) {
        let listeners = [
            (ListenerName::Grpc, grpc, &self.grpc),
            (ListenerName::Decision, Some(decision), &self.decision),
            (ListenerName::Admin, Some(admin), &self.admin),
        ];
        for (name, addr, tls) in listeners {
            let Some(addr) = addr else { continue };
            match tls {
                Transport::Tls(tls) => {
                    tracing::info!(listener = name.as_str(), %addr, mutual = tls.mutual(), "listener serves TLS{}", if tls.mutual() { " and requires client certificates (mutual TLS)" } else { "" })
                }
                Transport::Plain(_) if !addr.ip().is_loopback() => tracing::warn!(
                    listener = name.as_str(),
                    %addr,
                    "the {} listener is bound to {addr}, beyond loopback, without TLS: anyone who reaches it talks to it in clear (set {} and {}; docs/security.md)",
                    name.as_str(),
                    name.flag(TlsSetting::Cert),
                    name.flag(TlsSetting::Key),
                ),
                Transport::Plain(_) => {}
            }
        }
    }
}
