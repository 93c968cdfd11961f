//! A listener's TLS files read into a rustls server configuration. Every error names the flag
//! that gave the file and the file, and says why, so a start or a rotation that fails is fixed
//! from its one log line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};

use super::files::{TlsFiles, TlsSetting};

/// Why a listener's TLS files cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("{flag} {}: cannot read it: {source}", path.display())]
    Read {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no usable PEM item of the kind wanted, or a broken one.
    #[error("{flag} {}: {reason}", path.display())]
    Pem {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key is not the certificate's, or rustls refuses the pair.
    #[error("{key_flag} {}: not usable with the certificate of {cert_flag} {}: {reason}", key.display(), cert.display())]
    Pair {
        /// The key's flag.
        key_flag: &'static str,
        /// The key file.
        key: PathBuf,
        /// The certificate's flag.
        cert_flag: &'static str,
        /// The certificate file.
        cert: PathBuf,
        /// Why.
        reason: String,
    },
    /// A client SAN that is not a DNS name, or one given without a client CA.
    #[error("{flag}: {reason}")]
    Setting {
        /// The flag.
        flag: &'static str,
        /// Why.
        reason: String,
    },
}

/// The bytes of a listener's files as read, to tell a change from none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBytes {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl FileBytes {
    /// The certificate file's bytes (PEM, the leaf first).
    pub fn cert_pem(&self) -> &[u8] {
        &self.cert
    }
}

/// The crypto provider of every listener: ring, named here rather than left to whichever
/// provider the build happens to enable by default.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads the files of `files` (cheap: three small files).
pub fn read(files: &TlsFiles) -> Result<FileBytes, LoadError> {
    let read = |setting: TlsSetting, path: &Path| {
        std::fs::read(path).map_err(|source| LoadError::Read {
            flag: files.listener.flag(setting),
            path: path.to_owned(),
            source,
        })
    };
    Ok(FileBytes {
        cert: read(TlsSetting::Cert, &files.cert)?,
        key: read(TlsSetting::Key, &files.key)?,
        client_ca: match &files.client_ca {
            Some(path) => Some(read(TlsSetting::ClientCa, path)?),
            None => None,
        },
    })
}

/// Builds the server configuration of `files` from their `bytes` (see [`read`]).
pub fn build(files: &TlsFiles, bytes: &FileBytes) -> Result<Arc<ServerConfig>, LoadError> {
    let listener = files.listener;
    let pem_error = |setting: TlsSetting, path: &Path, reason: String| LoadError::Pem {
        flag: listener.flag(setting),
        path: path.to_owned(),
        reason,
    };
    let chain = certificates(&bytes.cert)
        .map_err(|reason| pem_error(TlsSetting::Cert, &files.cert, reason))?;
    let key = PrivateKeyDer::from_pem_slice(&bytes.key).map_err(|e| {
        pem_error(
            TlsSetting::Key,
            &files.key,
            format!(
                "no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {}",
                describe(&e)
            ),
        )
    })?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| LoadError::Setting {
            flag: listener.flag(TlsSetting::Cert),
            reason: e.to_string(),
        })?;
    let builder = match (&files.client_ca, &bytes.client_ca) {
        (Some(path), Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for cert in
                certificates(ca).map_err(|reason| pem_error(TlsSetting::ClientCa, path, reason))?
            {
                roots.add(cert).map_err(|e| {
                    pem_error(
                        TlsSetting::ClientCa,
                        path,
                        format!("not a usable CA certificate: {e}"),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| pem_error(TlsSetting::ClientCa, path, e.to_string()))?;
            let verifier = match &files.client_san {
                Some(san) => Arc::new(SanVerifier::new(verifier, san, files)?),
                None => verifier,
            };
            builder.with_client_cert_verifier(verifier)
        }
        _ => {
            if files.client_san.is_some() {
                return Err(LoadError::Setting {
                    flag: listener.flag(TlsSetting::ClientSan),
                    reason: format!(
                        "needs {} (client certificates are only checked against a CA)",
                        listener.flag(TlsSetting::ClientCa)
                    ),
                });
            }
            builder.with_no_client_auth()
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| LoadError::Pair {
            key_flag: listener.flag(TlsSetting::Key),
            key: files.key.clone(),
            cert_flag: listener.flag(TlsSetting::Cert),
            cert: files.cert.clone(),
            reason: match e {
                rustls::Error::InconsistentKeys(_) => {
                    "the key does not match the certificate's public key".to_owned()
                }
                e => e.to_string(),
            },
        })?;
    config.alpn_protocols = listener.alpn();
    Ok(Arc::new(config))
}

/// Every certificate of a PEM bundle; none is an error.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file: {}", describe(&e)))?;
    if chain.is_empty() {
        return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".to_owned());
    }
    Ok(chain)
}

/// A PEM error in words (the library's own text prints markers as byte lists).
fn describe(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { end_marker } => {
            let label = String::from_utf8_lossy(end_marker);
            format!("a -----BEGIN {label}----- section has no -----END {label}----- line")
        }
        Error::IllegalSectionStart { line } => format!(
            "a section starts with a malformed line {:?}",
            String::from_utf8_lossy(line)
        ),
        Error::NoItemsFound => "no item of this kind in it".to_owned(),
        e => e.to_string(),
    }
}

/// A client certificate verifier that also requires the certificate to be valid for one DNS
/// name, as envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN` does.
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: ServerName<'static>,
}

impl SanVerifier {
    fn new(
        inner: Arc<dyn ClientCertVerifier>,
        san: &str,
        files: &TlsFiles,
    ) -> Result<SanVerifier, LoadError> {
        let san = ServerName::try_from(san.to_owned()).map_err(|_| LoadError::Setting {
            flag: files.listener.flag(TlsSetting::ClientSan),
            reason: format!("{san:?} is not a DNS name"),
        })?;
        Ok(SanVerifier { inner, san })
    }
}

impl ClientCertVerifier for SanVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        cert.verify_is_valid_for_subject_name(&self.san)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::NotValidForName))?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
