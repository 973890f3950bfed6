//! The APIService API: kubectl registers, changes and removes backends; watches see every change
//! in order and resume; registrations survive a restart; invalid objects and the config file's
//! APIServices are refused with the upstream reasons.

use std::process::Command;
use std::time::Duration;

use apiagg_tests::api::{object, send};
use apiagg_tests::{client, json_of, kube_delegate, sample, status_code, wait_until, Apiagg, G, V};
use serde_json::json;

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
    apiagg_tests::kubectl_ok(command, args)
}

/// apiagg with a delegate (discovery and OpenAPI for kubectl) and the wardle backend known as
/// `test/wardle`, nothing registered.
fn gateway() -> (Apiagg, apiagg_tests::Sample, apiagg_tests::Sample) {
    let backend = sample(G, "wardle", false);
    let delegate = kube_delegate(true, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}",
        delegate.url,
        apiagg_tests::service("wardle", &backend.url)
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
        yaml.contains("versionPriority: 20") && !yaml.contains("generation:"),
        "{yaml}"
    );
    // kubectl 1.27 reads them too.
    let old = kubectl(
        apiagg_tests::KUBECTL_127_BIN,
        port,
        &["get", "apiservices", &name],
    );
    assert!(old.contains(&name), "{old}");

    assert!(kubectl(bin, port, &["delete", "apiservice", &name]).contains("deleted"));
    wait_until(
        "the backend to be gone after the delete (404)",
        Duration::from_secs(5),
        || status_code(&flunders),
        |code| *code == 404,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_manifests_apply_as_they_are() {
    let (gw, _backend, _delegate) = gateway();
    gw.wait_ready().await;
    let dir = apiagg_tests::fixtures().join("apiservices");
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
    let file = apiagg_tests::fixtures().join("apiservices/keda-v2.20.2-external-metrics.yaml");
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

/// `GET url` with `Accept`: the status, the content type and the body as JSON.
async fn get_accepting(url: &str, accept: &str) -> (u16, String, serde_json::Value) {
    let resp = client()
        .get(url)
        .header("Accept", accept)
        .send()
        .await
        .expect("GET");
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (code, content_type, json_of(resp).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbor_clients_fall_back_to_json_as_kube_apiserver_lets_them() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    // A CBOR body: 415 with the formats the API reads, so the client sends JSON instead.
    let cbor = b"\xd9\xd9\xf7\xa1\x64kind\x6aAPIService".to_vec();
    let (code, _, refused, _) =
        apiagg_tests::api::send_bytes(reqwest::Method::POST, &api, "application/cbor", cbor).await;
    assert_eq!(code, 415, "{refused}");
    assert_eq!(refused["kind"], "Status");
    assert_eq!(refused["reason"], "UnsupportedMediaType");
    let message = refused["message"].as_str().unwrap_or("");
    assert!(message.contains("application/json"), "{message}");
    let yaml = "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.yaml.example.com}\n\
        spec: {group: yaml.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10, service: {namespace: test, name: y}}\n";
    let (code, _, created, _) = apiagg_tests::api::send_bytes(
        reqwest::Method::POST,
        &api,
        "application/yaml",
        yaml.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["group"], "yaml.example.com");

    // Answers: JSON whenever the client prefers it. (A client that prefers CBOR gets CBOR, as
    // kube-apiserver 1.37 answers it: cbor.rs.)
    let one = format!("{api}/v1.yaml.example.com");
    for url in [&api, &one] {
        let (code, content_type, body) =
            get_accepting(url, "application/json, application/cbor").await;
        assert_eq!(code, 200, "{url}: {body}");
        assert!(
            content_type.starts_with("application/json"),
            "{url}: {content_type}"
        );
    }
}
