//! TLS client settings for backends: CA bundles, insecure mode, and rustls configs for the
//! connections apiagg opens itself (upgrade tunnels, delegate discovery).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Parses a PEM bundle into DER certificates that rustls accepts as trust anchors.
pub fn parse_ca_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let mut reader = pem;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut reader)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM certificate found".into());
    }
    let mut store = RootCertStore::empty();
    for cert in &certs {
        store
            .add(cert.clone())
            .map_err(|e| format!("invalid CA certificate: {e}"))?;
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
/// `insecure`; advertise `alpn`.
pub fn client_config(
    ca: Option<&[CertificateDer<'static>]>,
    insecure: bool,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider())))
            .with_no_client_auth()
    } else {
        let roots = match ca {
            Some(certs) => {
                let mut store = RootCertStore::empty();
                for cert in certs {
                    store.add(cert.clone()).map_err(|e| e.to_string())?;
                }
                store
            }
            None => system_roots(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

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

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
