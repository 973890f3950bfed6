//! Serving certificates: loaded from `--cert-dir` or generated there with rcgen.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::ServerConfig;

pub const CA_FILE: &str = "ca.crt";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// Builds the rustls server config, generating `ca.crt`, `tls.crt` and `tls.key`
/// in `dir` unless `tls.crt` and `tls.key` are already there. With `client_verifier` the server
/// asks clients for a certificate.
pub fn server_config(
    dir: &Path,
    hostnames: &[String],
    h2: bool,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    if cert_path.exists() && key_path.exists() {
        tracing::info!(dir = %dir.display(), "using existing serving certificate");
    } else {
        generate(dir, hostnames)?;
        tracing::info!(dir = %dir.display(), "generated CA and serving certificate");
    }
    let certs = read_certs(&cert_path)?;
    let key = read_key(&key_path)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    let builder = match client_verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .context("building TLS config")?;
    config.alpn_protocols = if h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(config))
}

/// Writes a fresh CA and a serving certificate for `hostnames` plus 127.0.0.1.
fn generate(dir: &Path, hostnames: &[String]) -> Result<()> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = name("sample-apiserver-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut sans: Vec<String> = hostnames.to_vec();
    if !sans.iter().any(|h| h == "127.0.0.1") {
        sans.push("127.0.0.1".into());
    }
    let mut params = CertificateParams::new(sans.clone())
        .with_context(|| format!("invalid --hostname in {sans:?}"))?;
    params.distinguished_name = name(&sans[0]);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;

    write(&dir.join(CA_FILE), &ca_cert.pem())?;
    write(&dir.join(CERT_FILE), &cert.pem())?;
    write(&dir.join(KEY_FILE), &key.serialize_pem())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn write(path: &Path, pem: &str) -> Result<()> {
    fs::write(path, pem).with_context(|| format!("writing {}", path.display()))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in {}", path.display());
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).with_context(|| format!("reading {}", path.display()))
}
