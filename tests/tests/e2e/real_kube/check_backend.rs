//! `apiagg check --apiservice NAME` on the config of an apiagg in front of the real control
//! plane: sample-apiserver's APIService is available; the same backend under another CA's
//! bundle, and a port nothing listens on, are not, in the words their `Available` conditions
//! carry; an unknown name is refused.

use std::process::Command;

use apiagg_tests::pki::Ca;
use apiagg_tests::real_kube::{free_port, RealKube};
use base64::Engine;

/// `apiagg check --config <front's> --apiservice name`: success, stdout and stderr.
fn check(config: &std::path::Path, name: &str) -> (bool, String, String) {
    let apiagg = apiagg_tests::binary("apiagg", "apiagg-gateway");
    let out = Command::new(apiagg)
        .args(["check", "--config"])
        .arg(config)
        .args(["--apiservice", name])
        .output()
        .expect("apiagg check");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiagg_check_tests_one_backend_as_its_probe_does() {
    let kube = RealKube::shared().await;
    let other = Ca::new("real-kube-check-other-ca");
    let mut wrong_ca = kube.apiservice("checkca.example.com", "v1", "api", kube.sample_port);
    wrong_ca["spec"]["caBundle"] = base64::engine::general_purpose::STANDARD
        .encode(&other.cert_pem)
        .into();
    let down = kube.apiservice("checkdown.example.com", "v1", "down", free_port());
    let front = kube.apiagg_with(None, &[wrong_ca, down]).await;
    let config = front.gw.dir.path().join("apiagg.yaml");

    let (ok, out, err) = check(&config, "v1alpha1.wardle.example.com");
    assert!(
        ok && out.contains("/apis/wardle.example.com/v1alpha1: ok"),
        "{out}{err}"
    );
    let (ok, out, err) = check(&config, "v1.checkca.example.com");
    let unknown =
        "tls: failed to verify certificate: x509: certificate signed by unknown authority";
    assert!(!ok && out.contains(unknown), "{out}{err}");
    assert!(err.contains("1 of 1 endpoints failed"), "{err}");
    let (ok, out, err) = check(&config, "v1.checkdown.example.com");
    assert!(
        !ok && out.contains("connect: connection refused"),
        "{out}{err}"
    );
    let (ok, out, err) = check(&config, "v1.nothing.example.com");
    assert!(
        !ok && err.contains("no APIService v1.nothing.example.com"),
        "{out}{err}"
    );
    eprintln!(
        "apiagg check of a backend behind another CA:\n{}",
        check(&config, "v1.checkca.example.com").1
    );
}
