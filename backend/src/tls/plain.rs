//! A plaintext listener's look at each connection's first byte: a TLS client (Envoy with an
//! `UpstreamTlsContext` pointed at a listener without `--<listener>-tls-cert`) opens with a TLS
//! handshake record, which no HTTP/1.1, HTTP/2 or gRPC client sends first. It is refused at once,
//! logged (the first at once, then once per 10 s with a count) and counted as
//! `sluice_tls_refused_total{reason="tls_client"}`, instead of being answered garbage it cannot
//! read.

use std::net::SocketAddr;
use std::sync::Arc;

use super::files::ListenerName;
use super::refusal::{Refusal, RefusedCounter};
use crate::log_limit::{LogLimit, LOG_EVERY};

/// The first byte of every TLS connection: the record type of a handshake (RFC 8446, 5.1).
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// One plaintext listener's refusals of TLS clients.
#[derive(Debug)]
pub struct PlainListener {
    listener: ListenerName,
    refused: RefusedCounter,
    log: LogLimit,
}

impl PlainListener {
    /// The plaintext `listener`, its refusals counted in `refused`.
    pub fn new(listener: ListenerName, refused: RefusedCounter) -> Arc<PlainListener> {
        refused.show_one(listener, Refusal::TlsClient);
        Arc::new(PlainListener {
            listener,
            refused,
            log: LogLimit::new(LOG_EVERY),
        })
    }

    /// Counts and logs the refusal of a TLS client from `peer` (see [`is_tls`]); the caller
    /// closes the connection.
    pub fn refuse(&self, peer: SocketAddr) {
        let reason = Refusal::TlsClient;
        self.refused.inc(self.listener, reason);
        if let Some(count) = self.log.admit(reason.as_str()) {
            tracing::warn!(
                listener = self.listener.as_str(),
                %peer,
                reason = reason.as_str(),
                count,
                "connection refused: {} (set {} and {} to serve TLS here, or give the client a plaintext transport)",
                reason.describe(),
                self.listener.flag(super::files::TlsSetting::Cert),
                self.listener.flag(super::files::TlsSetting::Key),
            );
        }
    }
}

/// Whether a connection whose first byte is `first` is a TLS client.
pub fn is_tls(first: u8) -> bool {
    first == TLS_HANDSHAKE_RECORD
}
