//! A failed request in the words of Go's `net/http` client, which kube-aggregator's probe
//! messages quote: a refused certificate (`tls: failed to verify certificate: x509: …`), a
//! refused connection (`dial tcp 127.0.0.1:8443: connect: connection refused`), else the causes
//! as hyper and rustls word them.

use std::error::Error;
use std::io;
use std::net::SocketAddr;

use crate::backends::tls::go_words;

/// Why `e`, a request to the endpoint at `addr`, failed (without reqwest's own `error sending
/// request for url (…)`, which names the TLS server name rather than the endpoint).
pub(super) fn cause(e: &reqwest::Error, addr: SocketAddr) -> String {
    let mut causes = Vec::new();
    let mut next = e.source();
    while let Some(err) = next {
        if let Some(tls) = tls_error(err) {
            return go_words(tls);
        }
        let io = err.downcast_ref::<io::Error>();
        if io.is_some_and(|io| io.kind() == io::ErrorKind::ConnectionRefused) {
            return format!("dial tcp {addr}: connect: connection refused");
        }
        causes.push(err.to_string());
        next = err.source();
    }
    if causes.is_empty() {
        e.to_string()
    } else {
        causes.join(": ")
    }
}

/// The rustls error `err` is or wraps: tokio-rustls hands it on inside an `io::Error`, which
/// hyper-rustls wraps in another; an `io::Error`'s `source()` skips what it wraps.
fn tls_error<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut err = err;
    loop {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        err = err.downcast_ref::<io::Error>()?.get_ref()?;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    use super::*;
    use crate::backends::tls::client_config;

    /// A CA named `name`: its certificate and what signs with it.
    fn ca(name: &str) -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("CA");
        (cert.der().clone(), Issuer::new(params, key))
    }

    /// A TLS listener on loopback serving a certificate of `issuer` for `localhost`; its address.
    async fn tls_listener(issuer: &Issuer<'_, KeyPair>) -> SocketAddr {
        let params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, issuer).expect("sign").der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = acceptor.accept(stream).await;
            }
        });
        addr
    }

    /// Why `GET https://<name>:<port>/` to `addr` fails for a client trusting `trusted`.
    async fn failure(trusted: &CertificateDer<'static>, name: &str, addr: SocketAddr) -> String {
        let config = client_config(
            Some(std::slice::from_ref(trusted)),
            false,
            &[b"http/1.1"],
            None,
        )
        .expect("client config");
        let client = reqwest::Client::builder()
            .use_preconfigured_tls((*config).clone())
            .resolve(name, addr)
            .no_proxy()
            .build()
            .expect("client");
        let url = format!("https://{name}:{}/", addr.port());
        let e = client.get(url).send().await.expect_err("refused");
        cause(&e, addr)
    }

    #[tokio::test]
    async fn a_refused_certificate_is_told_in_gos_words_through_reqwest_and_hyper() {
        let (root, issuer) = ca("serving-ca");
        let (other, _) = ca("other-ca");
        let addr = tls_listener(&issuer).await;
        assert_eq!(
            failure(&other, "localhost", addr).await,
            "tls: failed to verify certificate: x509: certificate signed by unknown authority \
             (issued by \"CN=serving-ca\"; the trusted CA is \"CN=other-ca\")"
        );
        assert_eq!(
            failure(&root, "other.wardle.svc", addr).await,
            "tls: failed to verify certificate: x509: certificate is valid for localhost, not \
             other.wardle.svc"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_told_as_gos_dialer_tells_it() {
        let (root, _) = ca("serving-ca");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        assert_eq!(
            failure(&root, "localhost", addr).await,
            format!("dial tcp {addr}: connect: connection refused")
        );
    }
}
