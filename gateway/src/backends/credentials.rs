//! Credentials apiagg presents: client certificates (the proxy client certificate to remote
//! backends, a delegate certificate) and bearer tokens. Files are re-read when they change; a
//! file that turns unreadable or invalid keeps the last good value serving.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apiagg_config::{CertSource, TokenSource};
use arc_swap::ArcSwapOption;
use http::HeaderValue;
use pingora_core::utils::tls::CertKey;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::certs::{check_pair, earliest_not_after, CertError, CheckedPair, Purpose};
use super::reload::Reload;

/// Why credentials cannot be loaded. Retryable once the files are fixed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A file cannot be read.
    #[error("{path:?}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },
    /// The certificate or key cannot be used (the cause and the file are in it).
    #[error(transparent)]
    Certificate(#[from] CertError),
    /// The token is not usable.
    #[error("{what}: {message}")]
    Invalid {
        /// Which part (`certificate`, `private key`, file names).
        what: String,
        /// What is wrong.
        message: String,
    },
    /// The token file is empty.
    #[error("{0:?}: the token file is empty")]
    EmptyToken(PathBuf),
}

fn read(path: &Path) -> Result<Vec<u8>, CredentialError> {
    std::fs::read(path).map_err(|source| CredentialError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A certificate chain and its private key, checked to belong together.
pub struct ClientIdentity {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
    /// Changes whenever the certificate or key changes (part of connection pool keys).
    pub fingerprint: u64,
    /// The same pair for pingora's upstream connections.
    pub cert_key: Arc<CertKey>,
    /// The earliest `notAfter` of the chain (Unix seconds), for the expiry metric.
    pub not_after: Option<i64>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl ClientIdentity {
    /// Reads and checks the pair `source` names (a client certificate: `clientAuth`).
    pub fn load(source: &CertSource) -> Result<ClientIdentity, CredentialError> {
        let (cert, key, names) = match source {
            CertSource::Files { cert, key } => (
                read(cert)?,
                read(key)?,
                (cert.display().to_string(), key.display().to_string()),
            ),
            CertSource::Pem { cert, key } => (
                cert.clone(),
                key.clone(),
                (
                    "kubeconfig client-certificate-data".into(),
                    "kubeconfig client-key-data".into(),
                ),
            ),
        };
        Ok(Self::from_pem(&cert, &key, (&names.0, &names.1))?)
    }

    /// Parses a PEM chain and key, refusing what would fail (or panic) at connect time, with
    /// the cause and the file (`names`: certificate, key) said once.
    pub fn from_pem(
        cert: &[u8],
        key: &[u8],
        names: (&str, &str),
    ) -> Result<ClientIdentity, CertError> {
        let CheckedPair {
            chain,
            key: private,
            ..
        } = check_pair(cert, key, names, Purpose::ClientAuth)?;
        let mut hasher = DefaultHasher::new();
        cert.hash(&mut hasher);
        private.secret_der().hash(&mut hasher);
        let cert_key = CertKey::new(
            chain.iter().map(|c| c.to_vec()).collect(),
            private.secret_der().to_vec(),
        );
        Ok(ClientIdentity {
            not_after: earliest_not_after(&chain),
            chain,
            key: private,
            fingerprint: hasher.finish(),
            cert_key: Arc::new(cert_key),
        })
    }
}

/// A bearer token, read from its file again whenever the file changes.
pub struct BearerToken {
    source: TokenSource,
    header: ArcSwapOption<HeaderValue>,
    last_read: Mutex<Vec<u8>>,
}

impl BearerToken {
    /// Reads the token once; it must be readable now.
    pub fn load(source: TokenSource) -> Result<BearerToken, CredentialError> {
        let token = BearerToken {
            source,
            header: ArcSwapOption::empty(),
            last_read: Mutex::new(Vec::new()),
        };
        token.refresh()?;
        Ok(token)
    }

    /// `Bearer <token>` as it is now (one atomic load).
    pub fn header(&self) -> Option<Arc<HeaderValue>> {
        self.header.load_full()
    }

    /// Re-reads the file; `Ok(true)` when the token changed. On error the old token stays.
    pub fn refresh(&self) -> Result<bool, CredentialError> {
        let (bytes, path) = match &self.source {
            TokenSource::File(path) => (read(path)?, Some(path)),
            TokenSource::Inline(token) => (token.as_bytes().to_vec(), None),
        };
        let mut last = self.last_read.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes && self.header.load().is_some() {
            return Ok(false);
        }
        let text = String::from_utf8_lossy(&bytes);
        let token = text.trim();
        let shown = || path.cloned().unwrap_or_default();
        if token.is_empty() {
            return Err(CredentialError::EmptyToken(shown()));
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            CredentialError::Invalid {
                what: shown().display().to_string(),
                message: "the token is not a valid header value".into(),
            }
        })?;
        value.set_sensitive(true);
        self.header.store(Some(Arc::new(value)));
        *last = bytes;
        Ok(true)
    }
}

impl Reload for BearerToken {
    type Error = CredentialError;

    fn name(&self) -> String {
        match &self.source {
            TokenSource::File(path) => format!("token {}", path.display()),
            TokenSource::Inline(_) => "inline token".into(),
        }
    }

    fn reload(&self) -> Result<bool, CredentialError> {
        self.refresh()
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Credentials apiagg presents to the delegate.
#[derive(Debug, Default)]
pub struct DelegateCredentials {
    /// Bearer token.
    pub token: Option<Arc<BearerToken>>,
    /// Client certificate.
    pub identity: Option<Arc<ClientIdentity>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_is_re_read_when_it_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").expect("write");
        let token = BearerToken::load(TokenSource::File(path.clone())).expect("load");
        assert_eq!(token.header().expect("header").as_bytes(), b"Bearer first");
        assert!(!token.refresh().expect("same"));
        std::fs::write(&path, "second").expect("write");
        assert!(token.refresh().expect("changed"));
        assert_eq!(token.header().expect("header").as_bytes(), b"Bearer second");
        std::fs::write(&path, "").expect("write");
        assert!(token.refresh().is_err());
        assert_eq!(token.header().expect("kept").as_bytes(), b"Bearer second");
    }

    #[test]
    fn garbage_certificates_are_refused_not_panicked_on() {
        let names = ("c.crt", "c.key");
        let err = ClientIdentity::from_pem(b"nonsense", b"nonsense", names).expect_err("refused");
        assert!(err.to_string().starts_with("c.crt: not PEM"), "{err}");
        let fake = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let err = ClientIdentity::from_pem(fake.as_bytes(), b"", names).expect_err("refused");
        assert!(
            err.to_string().starts_with("c.crt: certificate #1"),
            "{err}"
        );
    }
}
