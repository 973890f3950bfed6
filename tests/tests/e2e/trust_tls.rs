//! The serving certificate: replaced on disk, the next connection gets the new one without a
//! restart; SNI certificates are chosen by the name the client asks for; HTTP/2 by ALPN.

use std::time::Duration;

use apiagg_tests::pki::{write_pair, Ca};
use apiagg_tests::{wait_until, Apiagg};

/// A client trusting only `ca`, resolving `name` to apiagg's port.
fn client(ca: &Ca, name: &str, port: u16) -> reqwest::Client {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).expect("CA"))
        .resolve(name, addr)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

async fn answers(client: &reqwest::Client, name: &str, port: u16) -> Option<reqwest::Version> {
    let url = format!("https://{name}:{port}/readyz");
    let r = client.get(url).send().await.ok()?;
    (r.status() == 200).then_some(r.version())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_serving_certificate_serves_the_next_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, second, sni) = (Ca::new("first"), Ca::new("second"), Ca::new("sni"));
    write_pair(
        dir.path(),
        "serving",
        &first.server(&["localhost", "127.0.0.1"]),
    );
    write_pair(dir.path(), "other", &sni.server(&["api.example.test"]));
    let config = "tls:\n  certFile: serving.crt\n  keyFile: serving.key\n  \
                  sniCertificates: [{certFile: other.crt, keyFile: other.key}]\n";
    let path = dir.path().to_path_buf();
    let gw = Apiagg::start_in(dir, config, &[], &[]);
    let port = gw.port;

    let old = client(&first, "localhost", port);
    let version = wait_until(
        "apiagg to answer over TLS",
        Duration::from_secs(20),
        || answers(&old, "localhost", port),
        Option::is_some,
    )
    .await;
    assert_eq!(version, Some(reqwest::Version::HTTP_2), "HTTP/2 by ALPN");
    // The SNI name gets its own certificate; other names the default one.
    let by_name = client(&sni, "api.example.test", port);
    assert!(answers(&by_name, "api.example.test", port).await.is_some());
    assert!(answers(&client(&sni, "localhost", port), "localhost", port)
        .await
        .is_none());

    // Replace the default pair: new connections (a fresh client) get the new certificate.
    let pair = second.server(&["localhost", "127.0.0.1"]);
    let tmp = tempfile::tempdir_in(&path).expect("tmp");
    write_pair(tmp.path(), "serving", &pair);
    std::fs::rename(tmp.path().join("serving.key"), path.join("serving.key")).expect("key");
    std::fs::rename(tmp.path().join("serving.crt"), path.join("serving.crt")).expect("cert");
    wait_until(
        "the new certificate to be served",
        Duration::from_secs(10),
        || async { answers(&client(&second, "localhost", port), "localhost", port).await },
        Option::is_some,
    )
    .await;
    assert!(
        answers(&client(&first, "localhost", port), "localhost", port)
            .await
            .is_none()
    );
}
