//! Client certificates: what a TLS connection's certificate proves, decided once per connection
//! right after the handshake. The handshake itself accepts any certificate whose holder proves
//! its key (as kube-apiserver asks for but does not require one); whether it chains to the client
//! CA (user = CN, groups = O) or to the front proxy's CA with an allowed CN is decided here, so a
//! certificate from another CA gets a 401 Status instead of a TLS alert.

use std::any::Any;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use pingora_core::listeners::TlsAccept;
use pingora_core::protocols::tls::TlsRef;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::user::User;
use crate::backends::{verify_signature_with, Reload};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA file, re-read when it changes; the last good bundle keeps verifying.
pub struct CaFile {
    path: PathBuf,
    verifier: ArcSwapOption<Arc<dyn ClientCertVerifier>>,
    last: Mutex<Vec<u8>>,
}

impl CaFile {
    /// Reads the CA file; it must be usable now.
    pub fn load(path: PathBuf) -> Result<CaFile, String> {
        let ca = CaFile {
            path,
            verifier: ArcSwapOption::empty(),
            last: Mutex::new(Vec::new()),
        };
        ca.reload()?;
        Ok(ca)
    }

    /// Verifies a chain (leaf first) against this CA for client authentication.
    fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let verifier = self.verifier.load_full().ok_or("no CA loaded")?;
        let (leaf, intermediates) = chain.split_first().ok_or("no certificate")?;
        verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

impl Reload for CaFile {
    fn name(&self) -> String {
        format!("CA {}", self.path.display())
    }

    fn reload(&self) -> Result<bool, String> {
        let bytes = std::fs::read(&self.path).map_err(|e| e.to_string())?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            roots
                .add(cert.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        if roots.is_empty() {
            return Err("no PEM certificate found".into());
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| e.to_string())?;
        self.verifier.store(Some(Arc::new(verifier)));
        *last = bytes;
        Ok(true)
    }
}

/// What a connection's client certificate proves.
#[derive(Debug, Default)]
pub struct ConnectionIdentity {
    /// Verified against `clientCAFile`: the user, or why not.
    pub certificate: Option<Result<Arc<User>, String>>,
    /// Verified against the front proxy's CA with an allowed CN, or why not.
    pub front_proxy: Option<Result<(), String>>,
}

/// The CAs and names that decide [`ConnectionIdentity`].
pub struct ClientCertificates {
    /// `clientCAFile`.
    pub client_ca: Option<Arc<CaFile>>,
    /// `requestHeader.clientCAFile` and `allowedNames` (any CN when empty).
    pub front_proxy: Option<(Arc<CaFile>, Vec<String>)>,
}

/// Subject CN and O values of a DER certificate.
fn subject(der: &[u8]) -> Result<(String, Vec<String>), String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| e.to_string())?;
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().map(str::to_string).map_err(|e| e.to_string())
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
    Ok((cn, orgs))
}

impl ClientCertificates {
    /// Decides what `chain` (leaf first; empty when the client sent none) proves.
    pub fn identify(&self, chain: &[CertificateDer<'static>]) -> ConnectionIdentity {
        let Some(leaf) = chain.first() else {
            return ConnectionIdentity::default();
        };
        let names = subject(leaf);
        let certificate = self.client_ca.as_ref().map(|ca| {
            ca.verify(chain)
                .map_err(|e| format!("verifying certificate: {e}"))?;
            let (cn, orgs) = names.clone()?;
            if cn.is_empty() {
                return Err("the certificate has no common name".to_string());
            }
            Ok(Arc::new(User::new(cn, String::new(), orgs, Vec::new())))
        });
        let front_proxy = self.front_proxy.as_ref().map(|(ca, allowed)| {
            ca.verify(chain)
                .map_err(|e| format!("verifying front-proxy certificate: {e}"))?;
            let (cn, _) = names.clone()?;
            if !allowed.is_empty() && !allowed.contains(&cn) {
                return Err(format!(
                    "client certificate CN {cn:?} is not in requestHeader.allowedNames"
                ));
            }
            Ok(())
        });
        ConnectionIdentity {
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
