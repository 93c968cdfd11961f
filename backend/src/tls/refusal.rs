//! Why a TLS handshake was refused, as logged and counted (`sluice_tls_refused_total`), so a
//! misconfiguration (a plaintext client, a client without a certificate or with one from another
//! CA, an expired certificate, a client that does not trust the server's) is named by the
//! backend within a second of the first connection that shows it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustls::{AlertDescription, CertificateError};

use super::files::ListenerName;

/// Why one handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The client does not speak TLS (plaintext HTTP/1.1 or h2c on a TLS listener).
    NotTls,
    /// Mutual TLS: the client presented no certificate.
    NoCertificate,
    /// Mutual TLS: the client's certificate does not chain to the listener's client CA.
    UnknownCa,
    /// The client's certificate has expired (or is not valid yet).
    Expired,
    /// The client's certificate is not valid for the required name (`--grpc-tls-client-san`).
    WrongName,
    /// The client's certificate is refused for another reason (revoked, bad encoding, usage).
    BadCertificate,
    /// The client ended the handshake with an alert: most often it does not trust the
    /// listener's certificate (a wrong CA on the client's side, a name mismatch).
    ClientAlert,
    /// Another TLS error (no common protocol version or cipher suite, a misbehaving peer).
    Protocol,
    /// The connection closed before the handshake finished (a TCP health check, a port scan).
    Closed,
    /// The handshake did not finish within the listener's bound.
    Timeout,
    /// A TLS client on a plaintext listener ([`super::plain`]).
    TlsClient,
}

impl Refusal {
    /// Every reason, for the metric's zero series.
    pub const ALL: [Refusal; 11] = [
        Refusal::NotTls,
        Refusal::NoCertificate,
        Refusal::UnknownCa,
        Refusal::Expired,
        Refusal::WrongName,
        Refusal::BadCertificate,
        Refusal::ClientAlert,
        Refusal::Protocol,
        Refusal::Closed,
        Refusal::Timeout,
        Refusal::TlsClient,
    ];

    /// The metric's `reason` label and the log's `reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotTls => "not_tls",
            Refusal::NoCertificate => "no_client_certificate",
            Refusal::UnknownCa => "unknown_ca",
            Refusal::Expired => "expired",
            Refusal::WrongName => "wrong_name",
            Refusal::BadCertificate => "bad_certificate",
            Refusal::ClientAlert => "client_alert",
            Refusal::Protocol => "protocol",
            Refusal::Closed => "closed",
            Refusal::Timeout => "timeout",
            Refusal::TlsClient => "tls_client",
        }
    }

    /// What the operator reads in the log line.
    pub fn describe(self) -> &'static str {
        match self {
            Refusal::NotTls => "the client does not speak TLS (a plaintext client on a TLS listener: give it a TLS transport)",
            Refusal::NoCertificate => "the client presented no certificate (this listener requires one: mutual TLS)",
            Refusal::UnknownCa => "the client's certificate is not signed by a CA of this listener's client CA file",
            Refusal::Expired => "the client's certificate has expired or is not valid yet",
            Refusal::WrongName => "the client's certificate is not valid for the required client name (--grpc-tls-client-san)",
            Refusal::BadCertificate => "the client's certificate is refused",
            Refusal::ClientAlert => "the client aborted the handshake (does it trust this listener's certificate? check its CA and server name)",
            Refusal::Protocol => "the TLS handshake failed",
            Refusal::Closed => "the connection closed during the TLS handshake",
            Refusal::Timeout => "the TLS handshake did not finish in time",
            Refusal::TlsClient => "a TLS client on a plaintext listener",
        }
    }

    /// The reason of a failed handshake, from the error tokio-rustls returns.
    pub fn of(error: &std::io::Error) -> Refusal {
        let tls = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        match tls {
            Some(e) => Refusal::of_tls(e),
            None => match error.kind() {
                std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe => Refusal::Closed,
                std::io::ErrorKind::TimedOut => Refusal::Timeout,
                _ => Refusal::Protocol,
            },
        }
    }

    fn of_tls(error: &rustls::Error) -> Refusal {
        use rustls::Error;
        match error {
            Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => Refusal::NotTls,
            Error::NoCertificatesPresented => Refusal::NoCertificate,
            Error::InvalidCertificate(e) => match e {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    Refusal::UnknownCa
                }
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Refusal::Expired,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Refusal::WrongName,
                _ => Refusal::BadCertificate,
            },
            Error::AlertReceived(AlertDescription::CloseNotify) => Refusal::Closed,
            Error::AlertReceived(_) => Refusal::ClientAlert,
            _ => Refusal::Protocol,
        }
    }
}

/// The metric's labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    listener: &'static str,
    reason: &'static str,
}

/// `sluice_tls_refused_total{listener, reason}`: handshakes refused, registered with the other
/// metrics by [`crate::app`].
#[derive(Debug, Clone, Default)]
pub struct RefusedCounter(Family<RefusedLabels, Counter>);

impl RefusedCounter {
    /// The metric's name (without `_total`).
    pub const NAME: &'static str = "sluice_tls_refused";
    /// The metric's help.
    pub const HELP: &'static str = "TLS handshakes a listener refused, by listener (grpc, decision, admin) and reason (not_tls: a plaintext client; no_client_certificate, unknown_ca, expired, wrong_name, bad_certificate: mutual TLS; client_alert: the client refused the listener's certificate; protocol, closed, timeout; tls_client: a TLS client on a plaintext listener)";

    /// The family, to register.
    pub fn family(&self) -> Family<RefusedLabels, Counter> {
        self.0.clone()
    }

    /// Shows every reason of `listener` at 0, so an alert on the series needs no first failure.
    pub fn show(&self, listener: ListenerName) {
        for reason in Refusal::ALL {
            if reason != Refusal::TlsClient {
                self.show_one(listener, reason);
            }
        }
    }

    /// Shows one reason of `listener` at 0 (a plaintext listener's only one: `tls_client`).
    pub fn show_one(&self, listener: ListenerName, reason: Refusal) {
        let _ = self.0.get_or_create(&RefusedLabels {
            listener: listener.as_str(),
            reason: reason.as_str(),
        });
    }

    /// Counts one refused handshake.
    pub fn inc(&self, listener: ListenerName, reason: Refusal) {
        self.0
            .get_or_create(&RefusedLabels {
                listener: listener.as_str(),
                reason: reason.as_str(),
            })
            .inc();
    }

    /// The count so far (tests, and the metric's readers in-process).
    pub fn get(&self, listener: ListenerName, reason: Refusal) -> u64 {
        self.0
            .get_or_create(&RefusedLabels {
                listener: listener.as_str(),
                reason: reason.as_str(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(e: rustls::Error) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn each_failure_is_named() {
        let cases = [
            (
                io(rustls::Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidContentType,
                )),
                Refusal::NotTls,
            ),
            (
                io(rustls::Error::NoCertificatesPresented),
                Refusal::NoCertificate,
            ),
            (
                io(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer,
                )),
                Refusal::UnknownCa,
            ),
            (
                io(rustls::Error::InvalidCertificate(CertificateError::Expired)),
                Refusal::Expired,
            ),
            (
                io(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName,
                )),
                Refusal::WrongName,
            ),
            (
                io(rustls::Error::AlertReceived(AlertDescription::UnknownCA)),
                Refusal::ClientAlert,
            ),
            (
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                Refusal::Closed,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(Refusal::of(&error), want, "{error}");
        }
        let labels: std::collections::HashSet<_> =
            Refusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Refusal::ALL.len());
    }
}
