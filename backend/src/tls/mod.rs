//! TLS on the backend's listeners (docs/security.md): each listener (gRPC, decision, admin) may
//! serve TLS from its own certificate and key files, and may require client certificates signed
//! by a CA of its own (mutual TLS): a client without an accepted certificate is refused at the
//! handshake, before any request of it is read, so nothing it sends reaches the store.
//!
//! - [`files`]: the listeners' names (in flags, logs and metrics) and the files of each.
//! - [`load`]: the files read into a rustls server configuration, every error naming its flag
//!   and file (unreadable, no PEM item, a key that does not match its certificate).
//! - [`live`]: a listener's current configuration, the handshake of each connection (bounded in
//!   time), every refused handshake logged (the first at once) and counted by reason, and the
//!   files polled so a rotated certificate is served within a second; a bad new file keeps the
//!   old configuration and is logged as an ERROR naming the file.
//! - [`refusal`]: why a handshake failed (a plaintext client, no certificate, an unknown CA, an
//!   expired certificate, ...) and the `sluice_tls_refused` metric.
//! - [`served`]: every listener's TLS, started together; the warning for a listener beyond
//!   loopback without TLS.
//! - [`validity`]: the serving certificate's dates, warned about at start (and on rotation)
//!   when it is expired, not valid yet, or expires within 14 days.
//! - [`plain`]: a plaintext listener's refusal of TLS clients (their first byte tells).
//! - [`conn`]: a connection that is TLS or not, one type for the servers.
//! - [`flags`]: the `--<listener>-tls-*` flags and envoyproxy/ratelimit's `GRPC_SERVER_*` /
//!   `GRPC_CLIENT_*` settings as their fallbacks.
//!
//! rustls with the ring provider, named explicitly; no crypto of sluice's own.

pub mod conn;
pub mod files;
pub mod flags;
pub mod live;
pub mod load;
pub mod plain;
pub mod refusal;
pub mod served;
pub mod validity;

pub use files::{ListenerName, ListenersTls, TlsFiles, TlsSetting};
pub use live::TlsListener;
pub use load::LoadError;
pub use served::{Served, Transport};
