//! TLS client settings for backends: CA bundles, insecure mode, and rustls configs for the
//! connections apiagg opens itself (upgrade tunnels, delegate discovery), whose refusals of a
//! server's certificate say what the certificates show ([`explained`]).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::credentials::ClientIdentity;

mod explained;

pub(super) use explained::go_words;
use explained::{subject_of, ExplainingVerifier, Trusted};

/// Why TLS settings are unusable. None of these is retryable: the input must change.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The PEM text cannot be read.
    #[error("cannot read PEM: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    /// The bundle holds no certificate.
    #[error("no PEM certificate found")]
    NoCertificate,
    /// rustls refused a certificate or the settings.
    #[error("invalid TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    /// The certificate verifier cannot be built from the trusted CAs.
    #[error("invalid trusted CAs: {0}")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
}

/// Parses a PEM bundle into DER certificates that rustls accepts as trust anchors.
pub fn parse_ca_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let mut store = RootCertStore::empty();
    for cert in &certs {
        store.add(cert.clone())?;
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn system_roots() -> RootCertStore {
    let mut store = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // Unusable system certificates are skipped, as every TLS client does.
        let _ = store.add(cert);
    }
    store
}

/// A rustls client config: trust `ca` (system roots when `None`), or nothing at all when
/// `insecure`; advertise `alpn`; present `identity` when asked for a client certificate.
pub fn client_config(
    ca: Option<&[CertificateDer<'static>]>,
    insecure: bool,
    alpn: &[&[u8]],
    identity: Option<&ClientIdentity>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider())))
    } else {
        let (roots, trusted) = match ca {
            Some(certs) => {
                let mut store = RootCertStore::empty();
                for cert in certs {
                    store.add(cert.clone())?;
                }
                let subjects = certs.iter().map(|c| subject_of(c)).collect();
                (store, Trusted::Bundle(subjects))
            }
            None => (system_roots(), Trusted::System),
        };
        if roots.is_empty() {
            // Nothing to trust (a machine without system roots): every certificate is refused.
            builder.with_root_certificates(roots)
        } else {
            let verifier = ExplainingVerifier::new(roots, trusted, provider())?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        }
    };
    let mut config = match identity {
        Some(identity) => {
            builder.with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// A certificate verifier's signature method that checks with `$verify` and the signature
/// algorithms of the provider in `self.0` (server and client certificate verifiers alike).
macro_rules! verify_signature_with {
    ($method:ident, $verify:path) => {
        fn $method(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            $verify(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
    };
}

pub(crate) use verify_signature_with;

/// Certificate verifier for `insecureSkipTLSVerify`: accepts any certificate but still checks
/// handshake signatures.
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    // Handshake signatures are still checked, with the provider's algorithms.
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
