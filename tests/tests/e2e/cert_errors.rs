//! Certificate and key problems name their real cause and the file, once: an X.509 v1 proxy
//! client certificate is called that (not a key mismatch), at `apiagg check` and at `serve`.

use std::process::{Command, Stdio};

use apiagg_tests::binary;
use apiagg_tests::pki::{write_pair, Ca};

const V1: &str = "X.509 v1 certificates are not supported; issue a v3 certificate";

/// Runs `apiagg <args>` to its exit: (success, stderr).
fn run(args: &[&str]) -> (bool, String) {
    let output = Command::new(binary("apiagg", "apiagg-gateway"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("apiagg");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_said_once(stderr: &str, cause: &str, file: &str) {
    assert_eq!(stderr.matches(cause).count(), 1, "{stderr}");
    assert!(stderr.contains(file), "{stderr}");
    assert!(!stderr.contains("does not belong"), "{stderr}");
}

#[test]
fn a_v1_proxy_client_certificate_is_named_as_such_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("front-proxy-ca");
    let (cert, _) = write_pair(
        dir.path(),
        "proxy-client",
        &ca.client_v1("front-proxy-client"),
    );
    let config = dir.path().join("apiagg.yaml");
    std::fs::write(
        &config,
        "proxyClient: {certFile: proxy-client.crt, keyFile: proxy-client.key}\n",
    )
    .expect("config");
    let config = config.to_str().expect("utf8");
    let cert = cert.file_name().and_then(|n| n.to_str()).expect("name");

    let (ok, stderr) = run(&["check", "--config", config]);
    assert!(!ok, "{stderr}");
    assert_said_once(&stderr, V1, cert);

    let listen = "127.0.0.1:0";
    let (ok, stderr) = run(&["serve", "--config", config, "--listen", listen]);
    assert!(!ok, "{stderr}");
    assert_said_once(&stderr, V1, cert);
}

#[test]
fn a_mismatched_proxy_client_pair_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("front-proxy-ca");
    let (cert, _) = ca.client("front-proxy-client", &[]);
    let (_, other_key) = ca.client("someone-else", &[]);
    write_pair(dir.path(), "proxy-client", &(cert, other_key));
    let config = dir.path().join("apiagg.yaml");
    std::fs::write(
        &config,
        "proxyClient: {certFile: proxy-client.crt, keyFile: proxy-client.key}\n",
    )
    .expect("config");
    let (ok, stderr) = run(&["check", "--config", config.to_str().expect("utf8")]);
    assert!(!ok, "{stderr}");
    assert_eq!(
        stderr
            .matches("proxy-client.key is not the private key of the certificate in")
            .count(),
        1,
        "{stderr}"
    );
}
