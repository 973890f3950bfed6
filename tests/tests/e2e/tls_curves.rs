//! `--tls-curve-preferences`, kube-apiserver's flag (numeric TLS group IDs): a client offering
//! only a group the listener was not given is refused at the handshake, one offering a given
//! group is served with it; a value the crypto provider cannot do stops apiagg at start-up with
//! a message naming the flag and the allowed values.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use apiagg_tests::pki::{write_pair, Ca};
use apiagg_tests::{binary, wait_until, Apiagg};
use rustls::crypto::SupportedKxGroup;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::NamedGroup;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = "tls: {certFile: serving.crt, keyFile: serving.key}\n";

/// Connects offering only `group`: `Ok(group negotiated, status line)` or the handshake's
/// error.
async fn offer_only(
    port: u16,
    ca: &Ca,
    group: &'static dyn SupportedKxGroup,
) -> Result<(Option<NamedGroup>, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    let der = rustls::pki_types::pem::PemObject::from_pem_slice(ca.cert_pem.as_bytes());
    let der: CertificateDer<'static> = der.map_err(|e| format!("CA: {e}"))?;
    roots.add(der).map_err(|e| format!("CA: {e}"))?;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.kx_groups = vec![group];
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let negotiated = tls
        .get_ref()
        .1
        .negotiated_key_exchange_group()
        .map(|g| g.name());
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    Ok((negotiated, answer.lines().next().unwrap_or("").to_string()))
}

fn start(curves: &str) -> (Apiagg, Ca) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("serving-ca");
    write_pair(
        dir.path(),
        "serving",
        &ca.server(&["localhost", "127.0.0.1"]),
    );
    let flag = format!("--tls-curve-preferences={curves}");
    (Apiagg::start_in(dir, CONFIG, &[&flag], &[]), ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_offering_only_another_group_is_refused() {
    use rustls::crypto::ring::kx_group::{SECP256R1, SECP384R1, X25519};
    // P-256 only (Go's CurveP256 = 23).
    let (gw, ca) = start("23");
    let served = wait_until(
        "apiagg to serve a P-256 client",
        Duration::from_secs(20),
        || offer_only(gw.port, &ca, SECP256R1),
        |r| r.as_ref().is_ok_and(|(_, status)| status.contains(" 200")),
    )
    .await;
    assert_eq!(
        served.map(|(group, _)| group),
        Ok(Some(NamedGroup::secp256r1))
    );
    for refused in [X25519, SECP384R1] {
        let answer = offer_only(gw.port, &ca, refused).await;
        let error = answer.expect_err("a group not configured must be refused");
        assert!(error.starts_with("handshake:"), "{error}");
    }

    // X25519 and P-384, named in any order: both served, P-256 refused.
    let (gw, ca) = start("24,29");
    let served = wait_until(
        "apiagg to serve an X25519 client",
        Duration::from_secs(20),
        || offer_only(gw.port, &ca, X25519),
        |r| r.as_ref().is_ok_and(|(_, status)| status.contains(" 200")),
    )
    .await;
    assert_eq!(served.map(|(group, _)| group), Ok(Some(NamedGroup::X25519)));
    let p384 = offer_only(gw.port, &ca, SECP384R1).await;
    assert_eq!(
        p384.map(|(group, _)| group),
        Ok(Some(NamedGroup::secp384r1))
    );
    assert!(offer_only(gw.port, &ca, SECP256R1).await.is_err());
}

/// Runs `apiagg serve` with a TLS config and `--tls-curve-preferences=<value>` to its exit.
fn refused_at_start(value: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("serving-ca");
    write_pair(dir.path(), "serving", &ca.server(&["localhost"]));
    let config = dir.path().join("apiagg.yaml");
    std::fs::write(&config, CONFIG).expect("config");
    let output = Command::new(binary("apiagg", "apiagg-gateway"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .arg(format!("--tls-curve-preferences={value}"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("apiagg");
    assert!(!output.status.success(), "{value} must stop apiagg");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn values_the_provider_cannot_do_stop_apiagg_naming_the_flag_and_the_allowed_values() {
    let allowed = "allowed values: 29 (X25519), 23 (CurveP256), 24 (CurveP384)";
    // X25519MLKEM768 (4588) and P-521 (25): known upstream, not in this build's provider (ring).
    for value in ["4588", "25", "X25519", "0", "70000"] {
        let stderr = refused_at_start(value);
        assert!(
            stderr.contains("--tls-curve-preferences"),
            "{value}: {stderr}"
        );
        assert!(stderr.contains(allowed), "{value}: {stderr}");
    }
    let stderr = refused_at_start("4588");
    assert!(stderr.contains("4588 (X25519MLKEM768)"), "{stderr}");
    let stderr = refused_at_start("23,23");
    assert!(
        stderr.contains("--tls-curve-preferences")
            && stderr.contains("duplicate curve preference 23"),
        "{stderr}"
    );
}
