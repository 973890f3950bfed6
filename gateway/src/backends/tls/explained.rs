//! A backend's certificate refused in the words of Go's `crypto/x509` and `crypto/tls` (what
//! kube-aggregator's `Available` messages say, `x509: certificate is valid for api.wardle.svc,
//! not other.wardle.svc`), with what rustls alone does not tell: the issuer the presented chain
//! ends at and the CAs trusted instead, and a CA certificate served as a server's own.
//!
//! [`ExplainingVerifier`] wraps rustls's webpki verifier: it decides nothing itself, it only
//! replaces an error by a [`CertificateProblem`] read from the certificates, and reports a wrong
//! name before a chain problem, in Go's order (`Certificate.Verify`: the leaf's validity period,
//! then the host name, then the chain).

use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, VerifierBuilderError, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, DigitallySignedStruct, Error, OtherError, RootCertStore, SignatureScheme,
};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::time::ASN1Time;

/// At most this many trusted CAs are named in a message.
const LISTED: usize = 3;

/// Whom a verifier trusts, as a message names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trusted {
    /// A CA bundle (an APIService's `caBundle`, a `caFile`): its certificates' subjects.
    Bundle(Vec<String>),
    /// The system's roots.
    System,
}

/// What a server's certificate was refused for, read from the certificates. None is
/// retryable: the certificate or the trusted CAs must change. Its `Debug` is its message:
/// rustls shows the problem inside its own error by `Debug` (`invalid peer certificate:
/// Other(OtherError(…))`), in the logs of whatever prints that error.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateProblem {
    /// The certificate does not hold the name asked for (Go's `HostnameError`).
    #[error("{}", wrong_name(host, valid, *legacy_common_name))]
    WrongName {
        /// The name asked for: `<service>.<namespace>.svc`, or the endpoint's address.
        host: String,
        /// The certificate's DNS names (for a host name) or IP addresses (for an address).
        valid: Vec<String>,
        /// The certificate has no subjectAltName and its CN is the name asked for.
        legacy_common_name: bool,
    },
    /// The chain ends at an issuer that no trusted CA is (or one of that name with another key).
    #[error(
        "x509: certificate signed by unknown authority ({})",
        unknown(issuer, trusted)
    )]
    UnknownAuthority {
        /// The issuer of the chain's last certificate (`CN=…`).
        issuer: String,
        /// Whom the verifier trusts.
        trusted: Trusted,
    },
    /// The server presented a CA certificate (basic constraints `CA:TRUE`) as its own: webpki
    /// refuses it, Go's `crypto/x509` accepts it.
    #[error(
        "x509: certificate {subject:?} is a CA certificate (basic constraints CA:TRUE), \
         not accepted as a server's own"
    )]
    CaAsServer {
        /// The certificate's subject (`CN=…`).
        subject: String,
    },
}

impl std::fmt::Debug for CertificateProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Go's `HostnameError.Error()`.
fn wrong_name(host: &str, valid: &[String], legacy_common_name: bool) -> String {
    let ip = host.parse::<IpAddr>().is_ok();
    if legacy_common_name {
        "x509: certificate relies on legacy Common Name field, use SANs instead".into()
    } else if ip && valid.is_empty() {
        format!(
            "x509: cannot validate certificate for {host} because it doesn't contain any IP SANs"
        )
    } else if valid.is_empty() {
        format!("x509: certificate is not valid for any names, but wanted to match {host}")
    } else {
        format!(
            "x509: certificate is valid for {}, not {host}",
            valid.join(", ")
        )
    }
}

/// The parenthesis after `signed by unknown authority`.
fn unknown(issuer: &str, trusted: &Trusted) -> String {
    match trusted {
        Trusted::System => format!("issued by {issuer:?}, none of the system's trusted roots"),
        Trusted::Bundle(names) if names.iter().any(|n| n == issuer) => {
            format!("issued by {issuer:?}, the name of a trusted CA, but not with its key")
        }
        Trusted::Bundle(names) => {
            let mut listed: Vec<String> = names
                .iter()
                .take(LISTED)
                .map(|n| format!("{n:?}"))
                .collect();
            if names.len() > LISTED {
                listed.push(format!("{} more", names.len() - LISTED));
            }
            let are = if names.len() == 1 { "CA is" } else { "CAs are" };
            format!(
                "issued by {issuer:?}; the trusted {are} {}",
                listed.join(", ")
            )
        }
    }
}

/// The subject of a DER certificate (`CN=…`); empty when it cannot be read.
pub fn subject_of(der: &[u8]) -> String {
    X509Certificate::from_der(der)
        .map(|(_, cert)| cert.subject().to_string())
        .unwrap_or_default()
}

/// What `leaf` holds for `host`, as Go's `HostnameError` lists it.
fn names_for(leaf: &X509Certificate<'_>, host: &str) -> CertificateProblem {
    let ip = host.parse::<IpAddr>().is_ok();
    let san = leaf.subject_alternative_name().ok().flatten();
    let names = san.iter().flat_map(|san| san.value.general_names.iter());
    let valid = names
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) if !ip => Some(dns.to_string()),
            GeneralName::IPAddress(bytes) if ip => address(bytes),
            _ => None,
        })
        .collect();
    let common_name = leaf.subject().iter_common_name().next();
    let common_name = common_name.and_then(|cn| cn.as_str().ok());
    CertificateProblem::WrongName {
        host: host.to_string(),
        valid,
        legacy_common_name: san.is_none()
            && common_name.is_some_and(|cn| cn.eq_ignore_ascii_case(host)),
    }
}

/// An IP address of a subjectAltName (4 or 16 bytes) as Go's `net.IP` writes it.
fn address(bytes: &[u8]) -> Option<String> {
    let ip = match <[u8; 4]>::try_from(bytes) {
        Ok(v4) => IpAddr::from(v4),
        Err(_) => IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
    };
    Some(ip.to_string())
}

/// Whether `error` is a certificate refused for its names.
fn refused_for_name(error: &Error) -> bool {
    matches!(
        error,
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

/// rustls's webpki verifier, whose refusals say what the certificates show (module docs).
#[derive(Debug)]
pub(super) struct ExplainingVerifier {
    inner: Arc<WebPkiServerVerifier>,
    trusted: Trusted,
}

impl ExplainingVerifier {
    /// A verifier trusting `roots` (described as `trusted`) with `provider`'s algorithms.
    pub(super) fn new(
        roots: RootCertStore,
        trusted: Trusted,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, VerifierBuilderError> {
        let inner =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
        Ok(ExplainingVerifier { inner, trusted })
    }

    /// `error` as Go would report it for these certificates.
    fn explain(
        &self,
        error: Error,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Error {
        let Error::InvalidCertificate(refused) = &error else {
            return error;
        };
        let Ok((_, leaf)) = X509Certificate::from_der(end_entity) else {
            return error;
        };
        let host = server_name.to_str();
        // Go checks the host name before the chain, once the leaf is in its validity period.
        let in_period = i64::try_from(now.as_secs())
            .ok()
            .and_then(|s| ASN1Time::from_timestamp(s).ok())
            .is_some_and(|t| leaf.validity().is_valid_at(t));
        let wrong_name = refused_for_name(&error)
            || (in_period
                && ParsedCertificate::try_from(end_entity)
                    .and_then(|parsed| verify_server_name(&parsed, server_name))
                    .is_err_and(|e| refused_for_name(&e)));
        let problem = match refused {
            _ if wrong_name => names_for(&leaf, &host),
            // webpki tells a trusted CA's name with another key (a CA made anew) as a bad
            // signature; Go as an unknown authority.
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                let top = intermediates.last().unwrap_or(end_entity);
                let issuer = X509Certificate::from_der(top)
                    .map(|(_, c)| c.issuer().to_string())
                    .unwrap_or_default();
                let named = matches!(&self.trusted, Trusted::Bundle(n) if n.contains(&issuer));
                if matches!(refused, CertificateError::BadSignature) && !named {
                    return error;
                }
                CertificateProblem::UnknownAuthority {
                    issuer,
                    trusted: self.trusted.clone(),
                }
            }
            CertificateError::Other(OtherError(other))
                if matches!(
                    other.downcast_ref::<webpki::Error>(),
                    Some(webpki::Error::CaUsedAsEndEntity)
                ) =>
            {
                CertificateProblem::CaAsServer {
                    subject: leaf.subject().to_string(),
                }
            }
            _ => return error,
        };
        Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(problem))))
    }
}

impl ServerCertVerifier for ExplainingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            .map_err(|e| self.explain(e, end_entity, intermediates, server_name, now))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A TLS failure in Go's words: a refused certificate as `tls: failed to verify certificate:
/// x509: …` (`crypto/tls`'s `CertificateVerificationError`), anything else in rustls's.
pub fn go_words(error: &Error) -> String {
    match error {
        Error::InvalidCertificate(refused) => {
            format!("tls: failed to verify certificate: {}", x509_words(refused))
        }
        other => other.to_string(),
    }
}

/// A refused certificate in the words of Go's `crypto/x509` where it has words for it
/// (`CertificateInvalidError`, `UnknownAuthorityError`, and the problems the verifier read),
/// else rustls's.
fn x509_words(refused: &CertificateError) -> String {
    let time = |t: &UnixTime| {
        i64::try_from(t.as_secs())
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .map_or_else(String::new, |t| {
                t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
            })
    };
    // Go says `current time <now> is after <notAfter>`; the time of the check is left out, so
    // that the message (and the condition that holds it) does not change with every probe.
    let invalid = "x509: certificate has expired or is not yet valid";
    match refused {
        CertificateError::Other(OtherError(other)) => {
            match other.downcast_ref::<CertificateProblem>() {
                Some(problem) => problem.to_string(),
                None => refused.to_string(),
            }
        }
        CertificateError::ExpiredContext { not_after, .. } => {
            format!("{invalid}: current time is after {}", time(not_after))
        }
        CertificateError::NotValidYetContext { not_before, .. } => {
            format!("{invalid}: current time is before {}", time(not_before))
        }
        CertificateError::Expired | CertificateError::NotValidYet => invalid.to_string(),
        CertificateError::UnknownIssuer => "x509: certificate signed by unknown authority".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
