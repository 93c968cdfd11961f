//! A listener's TLS while it serves: the configuration in force, each connection's handshake
//! (bounded, refused ones logged and counted), and the files polled for rotation.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::files::{ListenerName, TlsFiles, TlsSetting};
use super::load::{self, FileBytes, LoadError};
use super::refusal::{Refusal, RefusedCounter};
use crate::log_limit::{LogLimit, LOG_EVERY};

/// How often the files are read again for a change: a rotated certificate is served within
/// about this long (envoyproxy/ratelimit reloads on change too).
pub const ROTATION_POLL: Duration = Duration::from_secs(1);

/// One listener's TLS: what it serves now and how its handshakes went.
#[derive(Debug)]
pub struct TlsListener {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    loaded: RwLock<FileBytes>,
    refused: RefusedCounter,
    log: LogLimit,
}

impl TlsListener {
    /// Reads and checks `files`; an error names the flag and file. Refused handshakes are
    /// counted in `refused`.
    pub fn start(files: TlsFiles, refused: RefusedCounter) -> Result<Arc<TlsListener>, LoadError> {
        let bytes = load::read(&files)?;
        let config = load::build(&files, &bytes)?;
        refused.show(files.listener);
        crate::secret_file::warn_if_readable_by_others(
            files.listener.flag(TlsSetting::Key),
            &files.key,
        );
        super::validity::warn_if_due(&files, bytes.cert_pem());
        Ok(Arc::new(TlsListener {
            files,
            current: RwLock::new(config),
            loaded: RwLock::new(bytes),
            refused,
            log: LogLimit::new(LOG_EVERY),
        }))
    }

    /// Which listener.
    pub fn listener(&self) -> ListenerName {
        self.files.listener
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The configuration new connections get.
    fn config(&self) -> Arc<ServerConfig> {
        // A poisoned lock only means a panic elsewhere while swapping an Arc; the value is whole.
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs the handshake of a connection from `peer`, bounded by `bound`. `None`: refused
    /// (logged, counted); nothing of the client's was read as a request.
    pub async fn accept<S>(
        &self,
        stream: S,
        peer: SocketAddr,
        bound: Duration,
    ) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = TlsAcceptor::from(self.config());
        match tokio::time::timeout(bound, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(e)) => {
                self.refuse(Refusal::of(&e), peer, &e.to_string());
                None
            }
            Err(_) => {
                let ms = bound.as_millis();
                self.refuse(
                    Refusal::Timeout,
                    peer,
                    &format!("no handshake within {ms} ms"),
                );
                None
            }
        }
    }

    /// Counts a refused handshake and logs it: the first of each reason at once, then at most
    /// one line per reason per [`LOG_EVERY`] with how many there were. A connection closed
    /// mid-handshake (TCP health checks, port scans) is only counted and logged at debug.
    fn refuse(&self, reason: Refusal, peer: SocketAddr, error: &str) {
        let listener = self.files.listener.as_str();
        self.refused.inc(self.files.listener, reason);
        if reason == Refusal::Closed {
            tracing::debug!(listener, %peer, reason = reason.as_str(), error, "TLS handshake not finished");
            return;
        }
        if let Some(count) = self.log.admit(reason.as_str()) {
            tracing::warn!(
                listener,
                %peer,
                reason = reason.as_str(),
                error,
                count,
                "TLS handshake refused: {}",
                reason.describe()
            );
        }
    }

    /// Reads the files every `every` until `stop`; on a change, serves the new configuration
    /// (new connections get it; open ones keep theirs). A file that cannot be read or used keeps
    /// the configuration in force and is logged as an ERROR naming the file and why, once per
    /// distinct error.
    pub async fn watch_loop(self: Arc<Self>, every: Duration, mut stop: watch::Receiver<bool>) {
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(every) => {}
            }
            match self.reload() {
                Ok(Reloaded::Same) => {}
                Ok(Reloaded::New) => {
                    last_error = None;
                    tracing::info!(listener = self.files.listener.as_str(), cert = %self.files.cert.display(), "TLS files changed: new connections get the new certificate");
                }
                Err(e) => {
                    let text = e.to_string();
                    if last_error.as_ref() != Some(&text) {
                        tracing::error!(listener = self.files.listener.as_str(), error = %text, "TLS files changed but cannot be used; still serving the previous certificate");
                        last_error = Some(text);
                    }
                }
            }
        }
    }

    /// Reads the files once and swaps the configuration if they changed and are good.
    pub fn reload(&self) -> Result<Reloaded, LoadError> {
        let bytes = load::read(&self.files)?;
        if *self.loaded.read().unwrap_or_else(|e| e.into_inner()) == bytes {
            return Ok(Reloaded::Same);
        }
        let config = load::build(&self.files, &bytes)?;
        super::validity::warn_if_due(&self.files, bytes.cert_pem());
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = bytes;
        Ok(Reloaded::New)
    }
}

/// What a [`TlsListener::reload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The files are as loaded: nothing to do.
    Same,
    /// The files changed and are served now.
    New,
}
