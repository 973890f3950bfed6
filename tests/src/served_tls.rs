//! apiagg serving TLS with a certificate of a test CA, and the clients that call it.

use std::time::Duration;

use crate::pki::{write_pair, Ca};
use crate::{answer_code, wait_until, Apiagg};

/// A running apiagg on TLS, and the CA its serving certificate chains to.
pub struct ServedTls {
    /// The gateway.
    pub gw: Apiagg,
    /// The CA of its serving certificate (`localhost`, `127.0.0.1`).
    pub ca: Ca,
}

impl ServedTls {
    /// Starts apiagg with `config` (without `tls:`, which is added) and `extra` flags, through
    /// `start` (e.g. [`Apiagg::start_in`], or one with an open-file limit).
    pub fn start(config: &str, start: impl FnOnce(tempfile::TempDir, &str) -> Apiagg) -> ServedTls {
        let ca = Ca::new("serving-ca");
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = write_pair(
            dir.path(),
            "serving",
            &ca.server(&["localhost", "127.0.0.1"]),
        );
        let config = format!(
            "tls: {{certFile: {}, keyFile: {}}}\n{config}",
            cert.display(),
            key.display()
        );
        let gw = start(dir, &config);
        ServedTls { gw, ca }
    }

    /// `https://localhost:PORT` + `path` (for clients of [`ServedTls::client`]).
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.gw.port)
    }

    /// A client builder trusting the CA, `localhost` resolved to the gateway.
    pub fn client(&self) -> reqwest::ClientBuilder {
        let ca = reqwest::Certificate::from_pem(self.ca.cert_pem.as_bytes()).expect("CA");
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .resolve("localhost", ([127, 0, 0, 1], self.gw.port).into())
    }

    /// Waits until `/readyz` answers 200 to `client` (over TLS).
    pub async fn wait_ready(&self, client: &reqwest::Client) {
        let url = format!("https://127.0.0.1:{}/readyz", self.gw.port);
        wait_until(
            "apiagg to answer /readyz with 200",
            Duration::from_secs(20),
            || answer_code(client.get(&url)),
            |code| *code == 200,
        )
        .await;
    }

    /// `/metrics` as `client` reads it.
    pub async fn metrics(&self, client: &reqwest::Client) -> String {
        client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }
}
