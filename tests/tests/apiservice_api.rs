//! The APIService API: kubectl registers, changes and removes backends; watches see every change
//! in order and resume; registrations survive a restart; invalid objects and the config file's
//! APIServices are refused with the upstream reasons.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{client, eventually, json_of, kube_delegate, sample, status_code, Apiagg, G, V};
use serde_json::{json, Value};

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

fn manifest(version_priority: u32) -> String {
    format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: {V}.{G}\n\
         spec:\n  group: {G}\n  version: {V}\n  groupPriorityMinimum: 1000\n  versionPriority: {version_priority}\n\
         \x20 service: {{namespace: test, name: wardle}}\n"
    )
}

/// kubectl against apiagg on `port`; `kubectl edit` raises versionPriority 15 to 16.
fn kubectl(binary: &str, port: u16, args: &[&str]) -> String {
    let mut command = Command::new(binary);
    command
        .args(["--server", &format!("http://127.0.0.1:{port}")])
        .env(
            "EDITOR",
            "sed -i s/versionPriority:\\ 15/versionPriority:\\ 16/",
        );
    common::kubectl_ok(command, args)
}

/// apiagg with a delegate (discovery and OpenAPI for kubectl) and the wardle backend known as
/// `test/wardle`, nothing registered.
fn gateway() -> (Apiagg, common::Sample, common::Sample) {
    let backend = sample(G, "wardle", false);
    let delegate = kube_delegate(true, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}",
        delegate.url,
        common::service("wardle", &backend.url)
    );
    (Apiagg::start(&config, &[]), backend, delegate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_registers_changes_and_removes_a_backend() {
    let (gw, _backend, _delegate) = gateway();
    gw.wait_ready().await;
    let port = gw.port;
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    assert_eq!(status_code(&flunders).await, 404);

    let file = gw.dir.path().join("wardle.yaml");
    std::fs::write(&file, manifest(15)).expect("manifest");
    let file = file.to_str().expect("utf8");
    let bin = "kubectl";
    assert!(kubectl(bin, port, &["apply", "-f", file]).contains("created"));
    kubectl(
        bin,
        port,
        &[
            "wait",
            "--for=condition=Available",
            &format!("apiservice/{V}.{G}"),
            "--timeout=20s",
        ],
    );
    assert_eq!(status_code(&flunders).await, 200);
    assert!(kubectl(bin, port, &["api-resources"]).contains("flunders"));
    let table = kubectl(bin, port, &["get", "apiservices"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{V}.{G} ")))
        .unwrap_or_else(|| panic!("no row: {table}"));
    assert!(row.contains("test/wardle") && row.contains("True"), "{row}");
    assert!(
        table.starts_with("NAME") && table.contains("AVAILABLE"),
        "{table}"
    );

    assert!(kubectl(bin, port, &["apply", "-f", file]).contains("unchanged"));
    assert!(
        kubectl(bin, port, &["apply", "--server-side", "-f", file]).contains("serverside-applied")
    );
    kubectl(bin, port, &["edit", &format!("apiservice/{V}.{G}")]);
    let name = format!("{V}.{G}");
    let got = kubectl(
        bin,
        port,
        &[
            "get",
            "apiservice",
            &name,
            "-o",
            "jsonpath={.spec.versionPriority}",
        ],
    );
    assert_eq!(got, "16");
    kubectl(
        bin,
        port,
        &[
            "patch",
            "apiservice",
            &name,
            "--type=merge",
            "-p",
            r#"{"spec":{"versionPriority":20}}"#,
        ],
    );
    let yaml = kubectl(bin, port, &["get", "apiservice", &name, "-o", "yaml"]);
    assert!(
        yaml.contains("versionPriority: 20") && yaml.contains("generation: 3"),
        "{yaml}"
    );
    // kubectl 1.27 reads them too.
    let old = kubectl(
        common::KUBECTL_127_BIN,
        port,
        &["get", "apiservices", &name],
    );
    assert!(old.contains(&name), "{old}");

    assert!(kubectl(bin, port, &["delete", "apiservice", &name]).contains("deleted"));
    let gone = eventually(Duration::from_secs(5), || async {
        status_code(&flunders).await == 404
    })
    .await;
    assert!(gone, "the backend still answers after the delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_manifests_apply_as_they_are() {
    let (gw, _backend, _delegate) = gateway();
    gw.wait_ready().await;
    let dir = common::fixtures().join("apiservices");
    let mut names = Vec::new();
    for file in [
        "sample-apiserver-wardle.yaml",
        "metrics-server-v0.8.1.yaml",
        "prometheus-adapter-v0.12.0-metrics.yaml",
        "prometheus-adapter-v0.10.0-custom-external-metrics.yaml",
        "keda-v2.20.2-external-metrics.yaml",
    ] {
        let path = dir.join(file);
        let out = kubectl(
            "kubectl",
            gw.port,
            &["apply", "-f", path.to_str().expect("utf8")],
        );
        for line in out.lines() {
            names.push(line.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    let table = kubectl("kubectl", gw.port, &["get", "apiservices", "-o", "name"]);
    for name in &names {
        assert!(table.contains(name.as_str()), "{name} missing: {table}");
    }
    assert!(table.contains("v1beta2.custom.metrics.k8s.io"), "{table}");
}

async fn send(method: reqwest::Method, url: &str, body: Option<(&str, Value)>) -> (u16, Value) {
    let mut req = client().request(method, url);
    if let Some((content_type, body)) = body {
        req = req
            .header("Content-Type", content_type)
            .body(body.to_string());
    }
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    (code, json_of(resp).await)
}

fn object(name: &str, group: &str) -> Value {
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
            "service": {"namespace": "test", "name": "nothing"}}})
}

/// Reads watch events until a DELETED one arrived.
async fn until_deleted(resp: reqwest::Response) -> Vec<Value> {
    let mut resp = resp;
    let mut buffer = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    while out.last().is_none_or(|e| e["type"] != "DELETED") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("an event within 10 s")
            .expect("chunk")
            .expect("the watch ended early");
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            out.push(serde_json::from_slice(&line).expect("event JSON"));
        }
    }
    out
}

fn rv(event: &Value) -> u64 {
    event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("rv")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_resume_and_registrations_survive_a_restart() {
    let config = "apiServices:\n  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.declared.io}, spec: {group: declared.io, version: v1, groupPriorityMinimum: 1000, versionPriority: 15}}\n";
    let gw = Apiagg::start(config, &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let watch = client()
        .get(format!(
            "{api}?watch=true&fieldSelector=metadata.name%3Dv1.a.io"
        ))
        .send()
        .await
        .expect("watch");
    let (code, created) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", object("v1.a.io", "a.io"))),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let one = format!("{api}/v1.a.io");
    let patch = json!({"metadata": {"labels": {"team": "x"}}});
    let (code, _) = send(
        reqwest::Method::PATCH,
        &one,
        Some(("application/merge-patch+json", patch)),
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = send(reqwest::Method::DELETE, &one, None).await;
    assert_eq!(code, 200);
    // Every change in order (the availability controller's status writes among them).
    let seen = until_deleted(watch).await;
    assert_eq!(seen[0]["type"], "ADDED", "{seen:?}");
    assert!(
        seen[1..seen.len() - 1]
            .iter()
            .all(|e| e["type"] == "MODIFIED"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| e["object"]["metadata"]["labels"]["team"] == "x"),
        "{seen:?}"
    );
    assert!(seen.windows(2).all(|w| rv(&w[0]) < rv(&w[1])), "{seen:?}");
    // Resume after the first event: the same changes again.
    let resumed = client()
        .get(format!("{api}?watch=true&resourceVersion={}", rv(&seen[0])))
        .send()
        .await
        .expect("watch");
    let rest = until_deleted(resumed).await;
    let revisions = |events: &[Value]| events.iter().map(rv).collect::<Vec<_>>();
    assert_eq!(revisions(&rest), revisions(&seen[1..]));

    // Invalid objects are refused with the upstream message, and nothing is stored.
    let mut bad = object("v1.b.io", "b.io");
    bad["spec"]["groupPriorityMinimum"] = json!(30000);
    let (code, status) = send(reqwest::Method::POST, &api, Some(("application/json", bad))).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (422, Some("Invalid")),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("must be positive and less than 20000"),
        "{status}"
    );
    assert_eq!(status_code(&format!("{api}/v1.b.io")).await, 404);
    // The config file's APIServices are listed but read-only.
    let (code, status) = send(
        reqwest::Method::DELETE,
        &format!("{api}/v1.declared.io"),
        None,
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{status}"
    );
    let (code, status) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", object("v1.declared.io", "declared.io"))),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{status}"
    );

    // A registration survives a restart; an old revision is gone (410) afterwards.
    let (code, _) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", object("v1.c.io", "c.io"))),
    )
    .await;
    assert_eq!(code, 201);
    let Apiagg { mut proc, dir, .. } = gw;
    proc.signal("TERM");
    assert!(
        proc.wait_exit(Duration::from_secs(10)).is_some(),
        "apiagg did not stop"
    );
    let gw = Apiagg::start_in(dir, config, &[], &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let (code, list) = send(reqwest::Method::GET, &api, None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["v1.c.io", "v1.declared.io"]);
    let (code, status) = send(
        reqwest::Method::GET,
        &format!("{api}?watch=true&resourceVersion=1"),
        None,
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (410, Some("Expired")),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_survives_kill_9() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (api, acknowledged) = (api.clone(), acknowledged.clone());
        writers.push(tokio::spawn(async move {
            let client = client();
            for i in 0..125 {
                let name = format!("v{w}x{i}.burst.io");
                let mut body = object(&name, "burst.io");
                body["spec"]["version"] = json!(format!("v{w}x{i}"));
                let sent = client.post(&api).json(&body).send().await;
                match sent {
                    Ok(r) if r.status() == 201 => acknowledged
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(name),
                    // The process is gone: nothing more is acknowledged.
                    _ => return,
                }
            }
        }));
    }
    // Kill in the middle of the burst.
    let started = eventually(Duration::from_secs(20), || async {
        acknowledged.lock().unwrap_or_else(|e| e.into_inner()).len() >= 200
    })
    .await;
    assert!(started, "the burst did not get going");
    let Apiagg { proc, dir, .. } = gw;
    proc.signal("KILL");
    for w in writers {
        let _ = w.await;
    }
    drop(proc);
    let acknowledged = acknowledged
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert!(acknowledged.len() < 1000, "the kill came after the burst");
    let gw = Apiagg::start_in(dir, "", &[], &[]);
    gw.wait_ready().await;
    let (code, list) = send(reqwest::Method::GET, &gw.url(API), None).await;
    assert_eq!(code, 200);
    let stored: std::collections::HashSet<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|n| !stored.contains(n.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost: {lost:?}",
        lost.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_lists_and_creates() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let script = r#"
import sys
from kubernetes import client
configuration = client.Configuration()
configuration.host = sys.argv[1]
api = client.ApiregistrationV1Api(client.ApiClient(configuration))
body = client.V1APIService(
    metadata=client.V1ObjectMeta(name="v1.python.example.com"),
    spec=client.V1APIServiceSpec(group="python.example.com", version="v1",
        group_priority_minimum=100, version_priority=10,
        service=client.ApiregistrationV1ServiceReference(namespace="test", name="py")))
created = api.create_api_service(body)
print("created", created.metadata.name, created.spec.service.port)
for item in api.list_api_service().items:
    print("listed", item.metadata.name)
"#;
    let out = Command::new("python3")
        .args(["-c", script, &gw.url("")])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("created v1.python.example.com 443"),
        "{stdout}"
    );
    assert!(stdout.contains("listed v1.python.example.com"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_a_delete_until_they_are_removed() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let mut body = object("v1.held.io", "held.io");
    body["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    let (code, _) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", body)),
    )
    .await;
    assert_eq!(code, 201);
    let one = format!("{api}/v1.held.io");
    let (code, marked) = send(reqwest::Method::DELETE, &one, None).await;
    assert_eq!(code, 200);
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    assert_eq!(
        status_code(&one).await,
        200,
        "deleted despite its finalizer"
    );
    let release = json!({"metadata": {"finalizers": null}});
    let (code, _) = send(
        reqwest::Method::PATCH,
        &one,
        Some(("application/merge-patch+json", release)),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        status_code(&one).await,
        404,
        "still there after its last finalizer went"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delegate_kubectl_validates_and_explains_against_apiaggs_own_openapi() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let file = common::fixtures().join("apiservices/keda-v2.20.2-external-metrics.yaml");
    let file = file.to_str().expect("utf8");
    assert!(kubectl("kubectl", gw.port, &["apply", "-f", file]).contains("created"));
    assert!(kubectl("kubectl", gw.port, &["apply", "-f", file]).contains("unchanged"));
    // kubectl asks the server to validate strictly: a misspelt field is refused, naming it.
    let typo = gw.dir.path().join("typo.yaml");
    let text = std::fs::read_to_string(file)
        .expect("manifest")
        .replace("versionPriority", "versionPriorty");
    std::fs::write(&typo, text).expect("typo manifest");
    let out = Command::new("kubectl")
        .args([
            "--server",
            &format!("http://127.0.0.1:{}", gw.port),
            "apply",
            "-f",
        ])
        .arg(&typo)
        .output()
        .expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a misspelt field was accepted");
    assert!(
        stderr.contains("unknown field \"spec.versionPriorty\""),
        "{stderr}"
    );
    let explained = kubectl("kubectl", gw.port, &["explain", "apiservices.spec.service"]);
    assert!(
        explained.contains("KIND:       APIService") && explained.contains("port"),
        "{explained}"
    );
    let index = json_of(
        client()
            .get(gw.url("/openapi/v3"))
            .send()
            .await
            .expect("index"),
    )
    .await;
    assert!(
        index["paths"]["apis/apiregistration.k8s.io/v1"].is_object(),
        "{index}"
    );
    let v2 = json_of(
        client()
            .get(gw.url("/openapi/v2"))
            .send()
            .await
            .expect("v2"),
    )
    .await;
    assert!(
        v2["definitions"]["io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService"]
            .is_object()
    );
}
