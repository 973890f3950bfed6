//! The `apiagg check` command on real APIService manifests.

use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    apiagg_test_fixtures::existing_root()
}

fn check(config: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("apiagg.yaml");
    std::fs::write(&path, config).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_apiagg"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run apiagg");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn accepts_the_fixture_manifests() {
    let dir = fixtures().join("apiservices");
    let (ok, text) = check(&format!(
        "apiServiceFiles: [\"{}/metrics-server-v0.8.1.yaml\", \"{}/sample-apiserver-wardle.yaml\", \"{}/custom-metrics-apiserver-v1.36.0-testing-adapter.yaml\"]\n",
        dir.display(),
        dir.display(),
        dir.display()
    ));
    assert!(ok, "{text}");
    assert!(text.contains("ok (5 APIServices"), "{text}");
}

#[test]
fn rejects_with_file_object_and_upstream_message() {
    let (ok, text) = check(
        "apiServices:\n  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    metadata: {name: v1beta1.metrics.k8s.io}\n    spec: {group: metrics.k8s.io, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 1001, service: {namespace: kube-system, name: metrics-server}}\n",
    );
    assert!(!ok);
    assert!(
        text.contains("apiagg.yaml: apiServices[0] (v1beta1.metrics.k8s.io)"),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000"
        ),
        "{text}"
    );
}
