//! Front-proxy client certificates (`--requestheader-client-ca-file`).
//!
//! Like kube-apiserver, the server asks every client for a certificate but requires none, and a
//! certificate of another CA does not fail the handshake: the handshake only checks that the
//! client holds the key of the certificate it sent ([`RequestAnyClientCert`]); whether the
//! connection is a trusted front proxy is decided afterwards, once per connection
//! ([`FrontProxy::trusts`]).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use x509_parser::prelude::{FromDer, X509Certificate};

/// The front proxies this server trusts: a CA and the common names allowed.
#[derive(Debug)]
pub struct FrontProxy {
    /// Verifies a client chain against the request-header CA (clientAuth usage included).
    chain: Arc<dyn ClientCertVerifier>,
    /// Allowed subject CNs; empty allows any certificate of the CA.
    allowed_names: Vec<String>,
    provider: Arc<CryptoProvider>,
}

impl FrontProxy {
    /// Reads the CA bundle `ca_file`; `allowed_names` empty means any CN.
    pub fn load(ca_file: &Path, allowed_names: &[String]) -> Result<FrontProxy> {
        let certs = CertificateDer::pem_file_iter(ca_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("reading {}", ca_file.display()))?;
        let mut roots = RootCertStore::empty();
        let (added, _ignored) = roots.add_parsable_certificates(certs);
        anyhow::ensure!(
            added > 0,
            "no usable CA certificate in {}",
            ca_file.display()
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .context("building the request-header client verifier")?;
        let allowed_names = allowed_names
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        Ok(FrontProxy {
            chain,
            allowed_names,
            provider,
        })
    }

    /// The verifier for the TLS handshake: asks for a certificate, accepts any (or none).
    pub fn handshake_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::new(RequestAnyClientCert {
            hints: self.chain.root_hint_subjects().to_vec(),
            provider: self.provider.clone(),
        })
    }

    /// Whether a connection that presented `peer` (leaf first) is a trusted front proxy: the
    /// chain verifies against the request-header CA and the leaf's CN is allowed.
    pub fn trusts(&self, peer: Option<&[CertificateDer<'static>]>) -> bool {
        let Some((leaf, intermediates)) = peer.and_then(<[_]>::split_first) else {
            return false;
        };
        if let Err(e) = self
            .chain
            .verify_client_cert(leaf, intermediates, UnixTime::now())
        {
            tracing::debug!(error = %e, "client certificate not from the request-header CA");
            return false;
        }
        let cn = common_name(leaf);
        let allowed = self.allowed_names.is_empty()
            || cn
                .as_deref()
                .is_some_and(|cn| self.allowed_names.iter().any(|n| n == cn));
        if !allowed {
            tracing::debug!(?cn, allowed = ?self.allowed_names, "front proxy CN not allowed");
        }
        allowed
    }
}

impl FrontProxy {
    /// For `--client-ca-file` (loaded with no allowed names): the CN and O values of a chain
    /// that verifies against the CA.
    pub fn subject(
        &self,
        peer: Option<&[CertificateDer<'static>]>,
    ) -> Option<(String, Vec<String>)> {
        if !self.trusts(peer) {
            return None;
        }
        let leaf = peer?.first()?;
        let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
        let orgs = cert
            .subject()
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Some((common_name(leaf)?, orgs))
    }
}

/// The first subject common name of a DER certificate.
fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// Requests a client certificate, requires none and accepts any at handshake time, still
/// checking the handshake signatures (the client holds the certificate's key).
#[derive(Debug)]
struct RequestAnyClientCert {
    hints: Vec<DistinguishedName>,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for RequestAnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
