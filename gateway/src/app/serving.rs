//! The serving certificates: the default pair and the SNI pairs, chosen per handshake by the
//! name the client asks for, and re-read when their files change (new handshakes get the new
//! pair; no restart). TLS 1.2 and 1.3 only, as pingora's rustls listener builds it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use apiagg_config::ServingTls;
use arc_swap::ArcSwap;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::backends::{check_pair, earliest_not_after, CertError, Purpose, Reload};
use apiagg_observe::CertificateKind;

/// One certificate and the names it is served for.
struct Pair {
    names: Vec<String>,
    key: Arc<CertifiedKey>,
}

struct Loaded {
    default: Arc<CertifiedKey>,
    sni: Vec<Pair>,
}

/// The listener's certificates, swapped whole when a file changes.
pub struct ServingCertificates {
    config: ServingTls,
    current: ArcSwap<Loaded>,
    last: Mutex<Vec<Vec<u8>>>,
}

impl std::fmt::Debug for ServingCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCertificates")
            .field("cert_file", &self.config.cert_file)
            .finish_non_exhaustive()
    }
}

/// Why the serving certificates cannot be used. At start-up, not retryable (the files must
/// change); on a reload, retryable: the last good pairs serve and the files are read again on
/// the next round (a pair caught half-written usually succeeds then).
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// A certificate or key file cannot be read. Retryable on a reload (a rotation may be under
    /// way); at start-up the file must be there.
    #[error("{}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said (in the message, not a `source()`).
        error: std::io::Error,
    },
    /// A pair is not a usable serving certificate and its key (the cause and the file are in
    /// it). Retryable on a reload only if the pair was caught half-written.
    #[error(transparent)]
    Certificate(#[from] CertError),
}

/// The serving-certificate result.
type Result<T, E = ServingError> = std::result::Result<T, E>;

fn read(path: &PathBuf) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|error| ServingError::Read {
        path: path.clone(),
        error,
    })
}

/// Parses a PEM pair into a signing certificate, checking it is a usable serving certificate
/// and the key belongs to it (the cause and the file said once).
fn certified(cert: &[u8], key: &[u8], names: (&str, &str)) -> Result<Arc<CertifiedKey>, CertError> {
    Ok(Arc::new(
        check_pair(cert, key, names, Purpose::ServerAuth)?.certified,
    ))
}

/// The DNS names of a certificate's subject alternative names.
fn dns_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = X509Certificate::from_der(cert) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// Whether `pattern` (`api.example.com` or `*.example.com`) covers `name`.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => name
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => pattern == name,
    }
}

impl ServingCertificates {
    /// Reads every pair; all must be valid now.
    pub fn load(config: &ServingTls) -> Result<ServingCertificates> {
        let (loaded, bytes) = Self::read_all(config)?;
        Ok(ServingCertificates {
            config: config.clone(),
            current: ArcSwap::from_pointee(loaded),
            last: Mutex::new(bytes),
        })
    }

    fn read_all(config: &ServingTls) -> Result<(Loaded, Vec<Vec<u8>>)> {
        let mut bytes = Vec::new();
        let mut pair = |cert: &PathBuf, key: &PathBuf| -> Result<Arc<CertifiedKey>> {
            let (c, k) = (read(cert)?, read(key)?);
            let names = (cert.display().to_string(), key.display().to_string());
            let certified = certified(&c, &k, (&names.0, &names.1))?;
            bytes.push(c);
            bytes.push(k);
            Ok(certified)
        };
        let default = pair(&config.cert_file, &config.key_file)?;
        let mut sni = Vec::new();
        for s in &config.sni_certificates {
            let key = pair(&s.cert_file, &s.key_file)?;
            let names = if s.names.is_empty() {
                key.cert.first().map(dns_names).unwrap_or_default()
            } else {
                s.names.iter().map(|n| n.to_ascii_lowercase()).collect()
            };
            sni.push(Pair { names, key });
        }
        Ok((Loaded { default, sni }, bytes))
    }
}

impl ResolvesServerCert for ServingCertificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let loaded = self.current.load();
        if let Some(name) = hello.server_name() {
            let name = name.to_ascii_lowercase();
            // Exact names win over wildcards, as in kube-apiserver's SNI selection.
            let pick = |wild: bool| {
                loaded.sni.iter().find(|p| {
                    p.names
                        .iter()
                        .any(|n| n.starts_with("*.") == wild && matches(n, &name))
                })
            };
            if let Some(pair) = pick(false).or_else(|| pick(true)) {
                return Some(pair.key.clone());
            }
        }
        Some(loaded.default.clone())
    }
}

impl Reload for ServingCertificates {
    type Error = ServingError;

    fn name(&self) -> String {
        format!("serving certificate {}", self.config.cert_file.display())
    }

    fn reload(&self) -> Result<bool> {
        let mut now = Vec::new();
        for s in std::iter::once((&self.config.cert_file, &self.config.key_file)).chain(
            self.config
                .sni_certificates
                .iter()
                .map(|s| (&s.cert_file, &s.key_file)),
        ) {
            now.push(read(s.0)?);
            now.push(read(s.1)?);
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == now {
            return Ok(false);
        }
        // A pair caught half-written fails here and is tried again on the next tick.
        let (loaded, bytes) = Self::read_all(&self.config)?;
        self.current.store(Arc::new(loaded));
        *last = bytes;
        Ok(true)
    }

    fn expiry(&self) -> Option<(CertificateKind, i64)> {
        let loaded = self.current.load();
        let pairs = std::iter::once(&loaded.default).chain(loaded.sni.iter().map(|p| &p.key));
        earliest_not_after(pairs.flat_map(|pair| pair.cert.iter()))
            .map(|t| (CertificateKind::Serving, t))
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcards_cover_one_label() {
        assert!(matches("*.example.com", "api.example.com"));
        assert!(!matches("*.example.com", "a.b.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(matches("api.example.com", "api.example.com"));
    }
}
