//! Client certificates: what a TLS connection's certificate proves, verified per request
//! against the current CA bundles. The handshake itself accepts any certificate whose holder
//! proves its key (as kube-apiserver asks for but does not require one); whether it chains to
//! the client CA (user = CN, groups = O) or to the front proxy's CA with an allowed CN is
//! decided here, so a certificate from another CA gets a 401 Status instead of a TLS alert.
//!
//! The connection keeps its chain and the last [`Verdict`]; a request reuses the verdict while
//! neither CA file has been reloaded since (one atomic load each) and no certificate of the
//! chain has started or ended its validity since (one clock read), else verifies again. CA
//! rotation and certificate expiry thus reach keep-alive connections that were open before.

use std::any::Any;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, ArcSwapOption};
use async_trait::async_trait;
use pingora_core::listeners::TlsAccept;
use pingora_core::protocols::tls::TlsRef;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::user::{InvalidIdentity, User};
use crate::backends::{bundle_not_after, verify_signature_with, Reload};
use apiagg_observe::CertificateKind;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA file, re-read when it changes; the last good bundle keeps verifying. Every successful
/// reload bumps its generation, which makes connections verify their certificates again.
pub struct CaFile {
    path: PathBuf,
    /// Which CA it is, for the expiry metric.
    kind: CertificateKind,
    verifier: ArcSwapOption<Arc<dyn ClientCertVerifier>>,
    last: Mutex<Vec<u8>>,
    generation: AtomicU64,
}

/// Why a client certificate proves nothing (the request may still authenticate otherwise).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CertificateRefusal {
    /// The chain does not verify against the CA file (other CA, expired, wrong usage…).
    #[error("verifying {what} certificate: {source}")]
    Unverified {
        /// `client` or `front-proxy`.
        what: &'static str,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// The CA file has never been loaded.
    #[error("no CA loaded")]
    NoCa,
    /// The subject cannot be read.
    #[error("reading the certificate subject: {0}")]
    Subject(String),
    /// The subject has no CN.
    #[error("the certificate has no common name")]
    NoCommonName,
    /// The front proxy's CN is not allowed.
    #[error("client certificate CN {0:?} is not in requestHeader.allowedNames")]
    NotAllowed(String),
    /// The CN or an O cannot be forwarded exactly: a 401, whatever else the request carries.
    #[error(transparent)]
    Identity(#[from] InvalidIdentity),
}

/// Why a CA file cannot be used (the file's name is added by whoever reports it: the setup
/// error, the file watcher). At start-up nothing is retryable: the file must change. On a
/// reload the last good bundle keeps verifying and the file is read again on the next round.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// The file cannot be read. Retryable: it may be in the middle of a rotation.
    #[error("{0}")]
    Read(std::io::Error),
    /// The file has no PEM block (a DER file, most often). Not retryable.
    #[error(
        "not PEM (no \"-----BEGIN CERTIFICATE-----\" line); a DER file converts with \
         `openssl x509 -inform der`"
    )]
    NotPem,
    /// A PEM block cannot be decoded. Not retryable.
    #[error("damaged PEM: {0}")]
    DamagedPem(pem::Error),
    /// A certificate of the bundle is refused as a trust anchor. Not retryable.
    #[error("CA certificate #{index}: {error}")]
    Certificate {
        /// 1-based position in the file.
        index: usize,
        /// rustls' reason (in the message, not a `source()`).
        error: rustls::Error,
    },
    /// The PEM holds no CERTIFICATE block. Not retryable.
    #[error("no CERTIFICATE block in the PEM")]
    NoCertificate,
    /// rustls cannot build a verifier from the bundle. Not retryable.
    #[error("{0}")]
    Verifier(rustls::server::VerifierBuilderError),
}

/// The CA-file result.
type Result<T, E = CaError> = std::result::Result<T, E>;

impl CaFile {
    /// Reads the CA file; it must be usable now. `kind` names it in the expiry metric.
    pub fn load(path: PathBuf, kind: CertificateKind) -> Result<CaFile> {
        let ca = CaFile {
            path,
            kind,
            verifier: ArcSwapOption::empty(),
            last: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
        };
        ca.reload()?;
        Ok(ca)
    }

    /// Bumped on every successful reload.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Verifies a chain (leaf first) against this CA for client authentication.
    fn verify(
        &self,
        chain: &[CertificateDer<'static>],
        what: &'static str,
        now: UnixTime,
    ) -> Result<(), CertificateRefusal> {
        let verifier = self.verifier.load_full().ok_or(CertificateRefusal::NoCa)?;
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err(CertificateRefusal::Subject("no certificate".into()));
        };
        verifier
            .verify_client_cert(leaf, intermediates, now)
            .map(|_| ())
            .map_err(|source| CertificateRefusal::Unverified { what, source })
    }
}

impl Reload for CaFile {
    type Error = CaError;

    fn name(&self) -> String {
        format!("CA {}", self.path.display())
    }

    fn reload(&self) -> Result<bool> {
        let bytes = std::fs::read(&self.path).map_err(CaError::Read)?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        // The file's name is said by whoever reports the error (`name()`, the setup error).
        if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(CaError::NotPem);
        }
        let mut roots = RootCertStore::empty();
        for (i, cert) in CertificateDer::pem_slice_iter(&bytes).enumerate() {
            let cert = cert.map_err(CaError::DamagedPem)?;
            roots.add(cert).map_err(|error| CaError::Certificate {
                index: i + 1,
                error,
            })?;
        }
        if roots.is_empty() {
            return Err(CaError::NoCertificate);
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(CaError::Verifier)?;
        self.verifier.store(Some(Arc::new(verifier)));
        // After the store: a reader that sees the new generation verifies with the new bundle.
        self.generation.fetch_add(1, Ordering::AcqRel);
        *last = bytes;
        Ok(true)
    }

    fn expiry(&self) -> Option<(CertificateKind, i64)> {
        // `last` holds the bundle that verifies now (set only by a successful reload).
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        bundle_not_after(&last).map(|t| (self.kind, t))
    }
}

/// What a client certificate proves, as of the CA generations it was verified with and the
/// validity epoch of its chain.
#[derive(Debug, Default)]
pub struct Verdict {
    generations: (u64, u64),
    epoch: usize,
    /// Verified against `clientCAFile`: the user, or why not.
    pub certificate: Option<Result<Arc<User>, CertificateRefusal>>,
    /// Verified against the front proxy's CA with an allowed CN, or why not.
    pub front_proxy: Option<Result<(), CertificateRefusal>>,
}

/// A TLS connection's client certificate chain and its latest [`Verdict`].
pub struct ConnectionIdentity {
    chain: Vec<CertificateDer<'static>>,
    /// The seconds at which a certificate of the chain starts or stops being valid, sorted:
    /// between two of them verification gives the same answer. `None`: unreadable dates,
    /// verified on every request.
    boundaries: Option<Vec<u64>>,
    checks: Arc<ClientCertificates>,
    verdict: ArcSwap<Verdict>,
}

impl std::fmt::Debug for ConnectionIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionIdentity")
            .field("certificates", &self.chain.len())
            .field("verdict", &self.verdict.load())
            .finish_non_exhaustive()
    }
}

impl ConnectionIdentity {
    /// The verdict for a request now: the cached one while the CA files are unchanged and no
    /// certificate of the chain started or stopped being valid since, else verified again
    /// (and cached for the next requests).
    pub fn verdict(&self) -> Arc<Verdict> {
        let current = self.verdict.load_full();
        if self.chain.is_empty() {
            return current;
        }
        let generations = self.checks.generations();
        let now = UnixTime::now();
        let epoch = self.epoch(now);
        if current.generations == generations && epoch == Some(current.epoch) {
            return current;
        }
        let fresh = Arc::new(self.checks.verdict(&self.chain, generations, now, epoch));
        self.verdict.store(fresh.clone());
        fresh
    }

    /// How many validity boundaries of the chain `now` has passed.
    fn epoch(&self, now: UnixTime) -> Option<usize> {
        let now = now.as_secs();
        let boundaries = self.boundaries.as_ref()?;
        Some(boundaries.partition_point(|b| *b <= now))
    }
}

/// The CAs and names that decide a [`Verdict`].
pub struct ClientCertificates {
    /// `clientCAFile`.
    pub client_ca: Option<Arc<CaFile>>,
    /// `requestHeader.clientCAFile` and `allowedNames` (any CN when empty).
    pub front_proxy: Option<(Arc<CaFile>, Vec<String>)>,
}

/// The names a certificate's subject gives.
#[derive(Debug, Clone)]
struct Names {
    /// The CN (empty when there is none).
    cn: String,
    /// The O values.
    orgs: Vec<String>,
}

/// The extra `authentication.kubernetes.io/credential-id` kube-apiserver gives a client
/// certificate's user: `X509SHA256=` and the certificate's SHA-256 in lower-case hex.
fn credential_id(leaf: &[u8]) -> (String, Vec<String>) {
    use sha2::Digest;
    use std::fmt::Write;
    let mut id = String::from("X509SHA256=");
    for byte in sha2::Sha256::digest(leaf) {
        let _ = write!(id, "{byte:02x}");
    }
    (
        "authentication.kubernetes.io/credential-id".to_string(),
        vec![id],
    )
}

/// Subject CN and O values of a DER certificate.
fn subject(der: &[u8]) -> Result<Names, CertificateRefusal> {
    let refusal = |e: &dyn std::fmt::Display| CertificateRefusal::Subject(e.to_string());
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| refusal(&e))?;
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().map(str::to_string).map_err(|e| refusal(&e))
    };
    let cn = match cert.subject().iter_common_name().next() {
        Some(attr) => text(attr)?,
        None => String::new(),
    };
    let orgs = cert
        .subject()
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Names { cn, orgs })
}

/// The seconds at which a certificate of `chain` becomes valid (`notBefore`) or stops being
/// valid (one past `notAfter`, which is inclusive), sorted; `None` when one cannot be read.
fn boundaries(chain: &[CertificateDer<'static>]) -> Option<Vec<u64>> {
    let mut out = Vec::with_capacity(chain.len() * 2);
    for der in chain {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let secs = |t: x509_parser::time::ASN1Time| u64::try_from(t.timestamp()).unwrap_or(0);
        out.push(secs(cert.validity().not_before));
        out.push(secs(cert.validity().not_after).saturating_add(1));
    }
    out.sort_unstable();
    Some(out)
}

impl ClientCertificates {
    /// The generations of the client and front-proxy CA files.
    fn generations(&self) -> (u64, u64) {
        (
            self.client_ca.as_ref().map_or(0, |ca| ca.generation()),
            self.front_proxy
                .as_ref()
                .map_or(0, |(ca, _)| ca.generation()),
        )
    }

    /// The identity of a new connection whose client sent `chain` (leaf first; empty when it
    /// sent none), verified now.
    pub fn identify(self: &Arc<Self>, chain: &[CertificateDer<'static>]) -> ConnectionIdentity {
        let generations = self.generations();
        let mut connection = ConnectionIdentity {
            chain: chain.to_vec(),
            boundaries: boundaries(chain),
            checks: self.clone(),
            verdict: ArcSwap::from_pointee(Verdict::default()),
        };
        let now = UnixTime::now();
        let epoch = connection.epoch(now);
        connection.verdict = ArcSwap::from_pointee(self.verdict(chain, generations, now, epoch));
        connection
    }

    /// Decides what `chain` proves at `now`, with the CA generations read before verifying;
    /// `epoch` is `now`'s place among the chain's validity boundaries (`None`: unknown, the
    /// verdict is never reused).
    fn verdict(
        &self,
        chain: &[CertificateDer<'static>],
        generations: (u64, u64),
        now: UnixTime,
        epoch: Option<usize>,
    ) -> Verdict {
        let Some(leaf) = chain.first() else {
            return Verdict::default();
        };
        let names = subject(leaf);
        let certificate = self.client_ca.as_ref().map(|ca| {
            ca.verify(chain, "client", now)?;
            let Names { cn, orgs } = names.clone()?;
            if cn.is_empty() {
                return Err(CertificateRefusal::NoCommonName);
            }
            // The CN is the user name, the Os the groups: all must forward exactly. As
            // kube-apiserver (1.30+), the certificate's SHA-256 is the credential's ID.
            let user = User::new(cn, String::new(), orgs, vec![credential_id(leaf)])?;
            Ok(Arc::new(user))
        });
        let front_proxy = self.front_proxy.as_ref().map(|(ca, allowed)| {
            ca.verify(chain, "front-proxy", now)?;
            let Names { cn, .. } = names.clone()?;
            if !allowed.is_empty() && !allowed.contains(&cn) {
                return Err(CertificateRefusal::NotAllowed(cn));
            }
            Ok(())
        });
        Verdict {
            generations,
            // Out of range for any chain: a verdict of unknown epoch is never reused.
            epoch: epoch.unwrap_or(usize::MAX),
            certificate,
            front_proxy,
        }
    }
}

/// Runs after every TLS handshake: stores the connection's [`ConnectionIdentity`] in pingora's
/// TLS digest, where the request path finds it.
pub struct IdentifyConnections(pub Arc<ClientCertificates>);

#[async_trait]
impl TlsAccept for IdentifyConnections {
    async fn handshake_complete_callback(
        &self,
        tls: &TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let chain = tls.peer_cert_chain_der().unwrap_or(&[]);
        Some(Arc::new(self.0.identify(chain)))
    }
}

/// Asks every client for a certificate without requiring one, and accepts any certificate whose
/// holder proves its key; [`ClientCertificates`] decides what it is worth.
#[derive(Debug)]
pub struct RequestClientCertificates(Arc<rustls::crypto::CryptoProvider>, Vec<DistinguishedName>);

impl RequestClientCertificates {
    /// A verifier hinting the subjects of the given CAs to clients.
    pub fn new(cas: &[&CaFile]) -> RequestClientCertificates {
        let mut hints = Vec::new();
        for ca in cas {
            if let Some(v) = ca.verifier.load_full() {
                hints.extend(v.root_hint_subjects().iter().cloned());
            }
        }
        RequestClientCertificates(provider(), hints)
    }
}

impl ClientCertVerifier for RequestClientCertificates {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.1
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    // Possession of the key is still proven: handshake signatures are checked.
    verify_signature_with!(
        verify_tls12_signature,
        rustls::crypto::verify_tls12_signature
    );
    verify_signature_with!(
        verify_tls13_signature,
        rustls::crypto::verify_tls13_signature
    );

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
