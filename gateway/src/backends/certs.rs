//! Certificate and key files checked before use, each problem named once with its real cause
//! and the file: not PEM, an encrypted key, an X.509 v1 certificate (rustls/webpki refuse
//! them), a certificate outside its validity, one issued for the other end of TLS, a key that
//! belongs to another certificate.

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::InconsistentKeys;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::time::ASN1Time;

/// Which end of TLS a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A client certificate (`clientAuth`).
    ClientAuth,
    /// A serving certificate (`serverAuth`).
    ServerAuth,
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Purpose::ClientAuth => "client authentication (clientAuth)",
            Purpose::ServerAuth => "server authentication (serverAuth)",
        })
    }
}

/// Why a certificate or key file cannot be used. None is retryable: the file must change.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// No PEM block at all (a DER file, or something else).
    #[error("{file}: not PEM (no \"-----BEGIN {label}-----\" line); DER converts with `openssl {tool} -inform der -in {file}`")]
    NotPem {
        /// The file.
        file: String,
        /// The PEM label expected.
        label: &'static str,
        /// The openssl subcommand that converts it (`x509`, `pkey`).
        tool: &'static str,
    },
    /// A PEM block is damaged. (Causes are fields, not `source`s: error chains would print
    /// them twice.)
    #[error("{file}: damaged PEM: {cause}")]
    Pem {
        /// The file.
        file: String,
        /// The parser's reason.
        cause: pem::Error,
    },
    /// PEM, but no certificate in it.
    #[error("{file}: no CERTIFICATE block in the PEM")]
    NoCertificate {
        /// The file.
        file: String,
    },
    /// A certificate is not DER X.509.
    #[error("{file}: certificate #{index} is not valid X.509: {detail}")]
    Unparsable {
        /// The file.
        file: String,
        /// 1-based position in the file.
        index: usize,
        /// The parser's reason.
        detail: String,
    },
    /// Not a v3 certificate: rustls/webpki refuse them (`UnsupportedCertVersion`).
    #[error("{file}: certificate #{index} is X.509 v{version}; X.509 v1 certificates are not supported; issue a v3 certificate (kubeadm and cert-manager do)")]
    Version {
        /// The file.
        file: String,
        /// 1-based position in the file.
        index: usize,
        /// 1 for v1.
        version: u32,
    },
    /// Past `notAfter`.
    #[error("{file}: certificate #{index} expired on {not_after} (valid from {not_before})")]
    Expired {
        /// The file.
        file: String,
        /// 1-based position in the file.
        index: usize,
        /// Start of validity.
        not_before: String,
        /// End of validity.
        not_after: String,
    },
    /// Before `notBefore`.
    #[error("{file}: certificate #{index} is not valid before {not_before} (valid until {not_after}); check the clocks")]
    NotYetValid {
        /// The file.
        file: String,
        /// 1-based position in the file.
        index: usize,
        /// Start of validity.
        not_before: String,
        /// End of validity.
        not_after: String,
    },
    /// The extended key usage leaves out what the certificate is used for.
    #[error(
        "{file}: the certificate's extended key usage does not allow {wanted} (it allows: {has})"
    )]
    ExtendedKeyUsage {
        /// The file.
        file: String,
        /// What it is used for.
        wanted: Purpose,
        /// What it allows.
        has: String,
    },
    /// The key usage does not allow signing handshakes.
    #[error("{file}: the certificate's key usage has neither digitalSignature nor keyAgreement, which TLS needs")]
    KeyUsage {
        /// The file.
        file: String,
    },
    /// The key file holds an encrypted key.
    #[error("{file}: the private key is encrypted; give apiagg an unencrypted key (`openssl pkey -in {file}` decrypts it)")]
    EncryptedKey {
        /// The file.
        file: String,
    },
    /// No key in the key file.
    #[error(
        "{file}: no private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block) in the PEM"
    )]
    NoKey {
        /// The file.
        file: String,
    },
    /// A key rustls cannot sign with.
    #[error("{file}: unsupported private key: {cause}")]
    UnsupportedKey {
        /// The file.
        file: String,
        /// rustls' reason.
        cause: rustls::Error,
    },
    /// The key is not the certificate's.
    #[error("{key} is not the private key of the certificate in {cert}")]
    KeyMismatch {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
    },
}

/// A certificate chain (leaf first) and its key, checked to belong together.
pub struct CheckedPair {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
    /// The pair as rustls signs with it.
    pub certified: CertifiedKey,
}

/// The certificates of a PEM file, refusing a file that is not PEM or holds none.
pub fn read_certificates(
    pem: &[u8],
    file: &str,
) -> Result<Vec<CertificateDer<'static>>, CertError> {
    if !contains(pem, b"-----BEGIN ") {
        return Err(CertError::NotPem {
            file: file.into(),
            label: "CERTIFICATE",
            tool: "x509",
        });
    }
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|cause| CertError::Pem {
            file: file.into(),
            cause,
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate { file: file.into() });
    }
    Ok(chain)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The earliest `notAfter` (Unix seconds) among `certificates`, for the expiry metric; `None`
/// when there is none (a certificate that does not parse is left out: it was refused or
/// reported where it was loaded).
pub fn earliest_not_after<'a, 'b: 'a>(
    certificates: impl IntoIterator<Item = &'a CertificateDer<'b>>,
) -> Option<i64> {
    certificates
        .into_iter()
        .filter_map(|der| X509Certificate::from_der(der).ok())
        .map(|(_, cert)| cert.validity().not_after.timestamp())
        .min()
}

/// [`earliest_not_after`] of the certificates of a PEM bundle (a CA bundle).
pub fn bundle_not_after(pem: &[u8]) -> Option<i64> {
    let certificates: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect();
    earliest_not_after(&certificates)
}

/// Checks every certificate of `chain` (version, validity) and the leaf's usage for `purpose`.
pub fn check_chain(
    chain: &[CertificateDer<'_>],
    file: &str,
    purpose: Purpose,
) -> Result<(), CertError> {
    let now = ASN1Time::now();
    for (i, der) in chain.iter().enumerate() {
        let index = i + 1;
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| CertError::Unparsable {
            file: file.into(),
            index,
            detail: e.to_string(),
        })?;
        let version = cert.version().0 + 1;
        if version != 3 {
            return Err(CertError::Version {
                file: file.into(),
                index,
                version,
            });
        }
        let validity = cert.validity();
        let (not_before, not_after) = (validity.not_before, validity.not_after);
        let dates = || (not_before.to_string(), not_after.to_string());
        if now > not_after {
            let (not_before, not_after) = dates();
            let file = file.into();
            return Err(CertError::Expired {
                file,
                index,
                not_before,
                not_after,
            });
        }
        if now < not_before {
            let (not_before, not_after) = dates();
            let file = file.into();
            return Err(CertError::NotYetValid {
                file,
                index,
                not_before,
                not_after,
            });
        }
        if i == 0 {
            check_usage(&cert, file, purpose)?;
        }
    }
    Ok(())
}

/// The leaf's key usage and extended key usage allow `purpose`, when they are stated.
fn check_usage(cert: &X509Certificate<'_>, file: &str, purpose: Purpose) -> Result<(), CertError> {
    if let Ok(Some(ku)) = cert.key_usage() {
        if !ku.value.digital_signature() && !ku.value.key_agreement() {
            return Err(CertError::KeyUsage { file: file.into() });
        }
    }
    if let Ok(Some(eku)) = cert.extended_key_usage() {
        let eku = eku.value;
        let allowed = eku.any
            || match purpose {
                Purpose::ClientAuth => eku.client_auth,
                Purpose::ServerAuth => eku.server_auth,
            };
        if !allowed {
            let mut has: Vec<String> = Vec::new();
            for (set, name) in [
                (eku.server_auth, "serverAuth"),
                (eku.client_auth, "clientAuth"),
                (eku.code_signing, "codeSigning"),
                (eku.email_protection, "emailProtection"),
                (eku.time_stamping, "timeStamping"),
                (eku.ocsp_signing, "OCSPSigning"),
            ] {
                if set {
                    has.push(name.into());
                }
            }
            has.extend(eku.other.iter().map(|oid| oid.to_id_string()));
            let has = if has.is_empty() {
                "nothing".into()
            } else {
                has.join(", ")
            };
            return Err(CertError::ExtendedKeyUsage {
                file: file.into(),
                wanted: purpose,
                has,
            });
        }
    }
    Ok(())
}

impl std::fmt::Debug for CheckedPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedPair")
            .field("certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// Parses and checks a PEM certificate chain and its key for `purpose`: every problem is
/// reported once, with its cause and the file it is in.
pub fn check_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    (cert_file, key_file): (&str, &str),
    purpose: Purpose,
) -> Result<CheckedPair, CertError> {
    let chain = read_certificates(cert_pem, cert_file)?;
    check_chain(&chain, cert_file, purpose)?;
    let key = read_key(key_pem, key_file)?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|cause| {
        CertError::UnsupportedKey {
            file: key_file.into(),
            cause,
        }
    })?;
    let certified = CertifiedKey::new(chain.clone(), signing);
    match certified.keys_match() {
        // `Unknown`: the key cannot say its public half; the handshake will tell.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(CertError::KeyMismatch {
                cert: cert_file.into(),
                key: key_file.into(),
            })
        }
        Err(other) => {
            return Err(CertError::Unparsable {
                file: cert_file.into(),
                index: 1,
                detail: other.to_string(),
            })
        }
    }
    Ok(CheckedPair {
        chain,
        key,
        certified,
    })
}

/// The private key of a PEM file: not PEM, encrypted and missing keys said as such.
fn read_key(pem: &[u8], file: &str) -> Result<PrivateKeyDer<'static>, CertError> {
    if contains(pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || contains(pem, b"Proc-Type: 4,ENCRYPTED")
    {
        return Err(CertError::EncryptedKey { file: file.into() });
    }
    if !contains(pem, b"-----BEGIN ") {
        return Err(CertError::NotPem {
            file: file.into(),
            label: "PRIVATE KEY",
            tool: "pkey",
        });
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        pem::Error::NoItemsFound => CertError::NoKey { file: file.into() },
        cause => CertError::Pem {
            file: file.into(),
            cause,
        },
    })
}

#[cfg(test)]
mod tests;
