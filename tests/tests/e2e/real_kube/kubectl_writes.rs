//! kubectl 1.37 writing and waiting through apiagg and through kube-apiserver: `apply
//! --server-side` (twice, the second a change), `auth can-i` as the admin and as a narrow user,
//! `wait --for=delete` while the object is deleted, and `get -w` seeing a create. Each side works
//! in a namespace of its own (the outputs are compared with the namespace written
//! `<namespace>`); the same exit status, stdout and stderr.

use std::process::Stdio;
use std::time::{Duration, Instant};

use apiagg_tests::real_kube::{kubectl, kubectl_137, RealKube};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{flunder, flunders, grant_flunder_reading};

const FLUNDER: &str = "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\n\
    metadata:\n  name: applied\n  labels: {step: \"STEP\"}\nspec:\n  reference: \"REF\"\n";

/// What a command printed, with `namespace` and `server` written as placeholders.
fn normalized((ok, out, err): (bool, String, String), namespace: &str, server: &str) -> String {
    let text = format!("ok {ok}\n{out}--- stderr\n{err}");
    text.replace(server, "<server>")
        .replace(namespace, "<namespace>")
}

/// kubectl 1.37 with `kubeconfig` and `args`, its stdout piped, its stderr to `stderr`, and a
/// fresh cache folder (kept as long as the process runs).
fn spawned(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stderr: Stdio,
) -> (tokio::process::Child, tempfile::TempDir) {
    let cache = tempfile::tempdir().expect("cache");
    let child = tokio::process::Command::new(kubectl_137())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache.path())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"));
    (child, cache)
}

/// `kubectl get flunders -n namespace -w` until it printed `lines` lines (the first is the
/// header; `then` runs once the listing is printed); the lines, the AGE column dropped.
async fn watched(
    kubeconfig: &std::path::Path,
    namespace: &str,
    then: impl std::future::Future<Output = ()>,
) -> Vec<String> {
    let args = [
        "get",
        "flunders",
        "-n",
        namespace,
        "-w",
        "--output-watch-events",
    ];
    let (mut child, _cache) = spawned(kubeconfig, &args, Stdio::null());
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let mut then = Some(Box::pin(then));
    let deadline = Instant::now() + Duration::from_secs(30);
    // The header, the one existing flunder (ADDED), then the created one (ADDED).
    while seen.len() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, lines.next_line()).await;
        let line = line.unwrap_or_else(|_| panic!("kubectl get -w printed only {seen:?}"));
        let Some(line) = line.expect("read") else {
            panic!("kubectl get -w ended after {seen:?}");
        };
        let columns: Vec<&str> = line.split_whitespace().collect();
        // EVENT NAME AGE: the age moves with the clock.
        seen.push(columns[..columns.len().min(2)].join(" "));
        if seen.len() == 2 {
            if let Some(then) = then.take() {
                then.await;
            }
        }
    }
    seen
}

/// A line of kubectl's own log (`-v=6`: `I1206 05:20:05.106920 …`), not of its output.
fn is_log(line: &str) -> bool {
    let mut chars = line.chars();
    matches!(chars.next(), Some('I' | 'W' | 'E' | 'F'))
        && chars.take(4).filter(char::is_ascii_digit).count() == 4
}

/// `kubectl wait --for=delete flunder/applied` (its requests logged, `-v=6`): `delete` runs
/// once kubectl's watch is answered; exit status, stdout, and stderr without kubectl's log.
async fn waited_for_delete<F: std::future::Future<Output = ()>>(
    kubeconfig: &std::path::Path,
    namespace: &str,
    delete: impl FnOnce() -> F,
) -> (bool, String, String) {
    let args = ["wait", "--for=delete", "flunder/applied", "-n", namespace];
    let args = [&args[..], &["--timeout=30s", "-v=6"]].concat();
    let (mut child, _cache) = spawned(kubeconfig, &args, Stdio::piped());
    let mut log = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut stderr = String::new();
    let watching = async {
        while let Some(line) = log.next_line().await.expect("read") {
            if line.contains("watch=true") {
                return;
            }
            if !is_log(&line) {
                stderr += &line;
                stderr.push('\n');
            }
        }
        panic!("kubectl wait ended before it watched: {stderr}");
    };
    tokio::time::timeout(Duration::from_secs(30), watching)
        .await
        .expect("kubectl wait to watch");
    delete().await;
    let mut rest = Vec::new();
    while let Some(line) = log.next_line().await.expect("read") {
        rest.push(line);
    }
    let out = child.wait_with_output().await.expect("kubectl wait");
    for line in rest.iter().filter(|l| !is_log(l)) {
        stderr += line;
        stderr.push('\n');
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_137_writes_and_waits_alike_through_apiagg_and_kube_apiserver() {
    let kube = RealKube::shared().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let (ours_ns, theirs_ns) = ("real-kube-kubectl-apiagg", "real-kube-kubectl-kube");
    let narrow = kube.client_ca.client("narrow", &[]);
    let (admin_ours, admin_theirs) = front.kubeconfigs(kube, "admin", &kube.admin);
    let (narrow_ours, narrow_theirs) = front.kubeconfigs(kube, "narrow", &narrow);
    let dir = front.gw.dir.path().to_path_buf();
    let mut table = String::new();
    let mut differ = Vec::new();
    let sides = [
        (ours_ns, &admin_ours, &narrow_ours, front.url("")),
        (theirs_ns, &admin_theirs, &narrow_theirs, kube.kube_url("")),
    ];
    let mut outputs: Vec<Vec<(String, String)>> = Vec::new();
    for (ns, admin, narrow, server) in &sides {
        kube.namespace(ns).await;
        grant_flunder_reading(kube, ns).await;
        let mut said = Vec::new();
        for (step, reference) in [("one", "a"), ("two", "b")] {
            let file = dir.join(format!("{ns}-{step}.yaml"));
            let yaml = FLUNDER.replace("STEP", step).replace("REF", reference);
            std::fs::write(&file, yaml).expect("manifest");
            let path = file.to_str().expect("utf8");
            let args = ["apply", "--server-side", "-n", ns, "-f", path];
            let what = format!("apply --server-side ({step})");
            said.push((what, normalized(kubectl(admin, &args), ns, server)));
        }
        let managers = [
            "get", "flunder", "applied", "-n", ns, "-o",
            "jsonpath={.metadata.managedFields[*].manager} {.metadata.labels.step} {.spec.reference}",
        ];
        said.push((
            "managers".into(),
            normalized(kubectl(admin, &managers), ns, server),
        ));
        for (who, config) in [("admin", admin), ("narrow", narrow)] {
            for verb in ["list", "create", "delete"] {
                let args = [
                    "auth",
                    "can-i",
                    verb,
                    "flunders.wardle.example.com",
                    "-n",
                    ns,
                ];
                let what = format!("auth can-i {verb} as {who}");
                said.push((what, normalized(kubectl(config, &args), ns, server)));
            }
        }
        // wait --for=delete, the flunder deleted once kubectl watches it.
        let item = format!("{}/applied", flunders(ns));
        let waited = waited_for_delete(admin, ns, || async {
            let (code, answer) = kube.admin("DELETE", &item, None).await;
            assert_eq!(code, 200, "{answer}");
        })
        .await;
        said.push(("wait --for=delete".into(), normalized(waited, ns, server)));
        // get -w: the existing flunder, then one created while it watches.
        kube.create(&flunders(ns), flunder("existing", json!({})))
            .await;
        let collection = flunders(ns);
        let created = kube.create(&collection, flunder("created", json!({})));
        let lines = watched(admin, ns, created).await;
        said.push(("get -w".into(), lines.join("\n")));
        outputs.push(said);
    }
    let (ours, theirs) = (&outputs[0], &outputs[1]);
    for ((what, our), (_, their)) in ours.iter().zip(theirs) {
        let same = our == their;
        table += &format!("kubectl {what}: {}\n", if same { "same" } else { "DIFFER" });
        if !same {
            differ.push(format!(
                "{what}\n--- apiagg:\n{our}\n--- kube-apiserver:\n{their}"
            ));
        }
    }
    eprintln!("kubectl 1.37 writes and waits:\n{table}");
    assert!(differ.is_empty(), "outputs differ:\n{}", differ.join("\n"));
}
