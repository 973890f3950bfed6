//! The APIService API: kubectl registers, changes and removes backends; watches see every change
//! in order and resume; registrations survive a restart; invalid objects and the config file's
//! APIServices are refused with the upstream reasons.

mod common;

use std::process::Command;
use std::time::Duration;

use common::api::{object, send};
use common::{client, eventually, json_of, kube_delegate, sample, status_code, Apiagg, G, V};
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

/// Route takeovers through the API (DESIGN.md: nothing takes over a group the delegate or
/// Kubernetes owns) and made-up subresources. Caller: an anonymous client the config authorizes
/// for the API. Each step: the attack, what apiagg answered, what the extension server and the
/// delegate received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeovers_and_made_up_subresources_are_refused() {
    use reqwest::Method;
    let extension = sample(G, "extension", false);
    let held = common::hold_port();
    let config = |delegate: &str| {
        format!(
            "delegate: {{url: \"{delegate}\"}}\nservices:\n{}",
            common::service("extension", &extension.url)
        )
    };
    let gw = Apiagg::start(&config(&format!("http://127.0.0.1:{}", held.port)), &[]);
    let api = gw.url(API);
    let post =
        |object: serde_json::Value| send(Method::POST, &api, Some(("application/json", object)));

    // 1. The delegate is down, so its group-versions are unknown: core and apps are refused by
    //    name (422); any other remote APIService waits for them (503 + Retry-After).
    for (group, version) in [("", "v1"), ("apps", "v1")] {
        let (code, body) = post(common::api::remote(group, version, "extension")).await;
        assert_eq!(code, 422, "{body}");
        assert_eq!(
            body["details"]["causes"][0]["reason"], "FieldValueForbidden",
            "{body}"
        );
        let message = body["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("{group:?} is a built-in group of Kubernetes")),
            "{message}"
        );
    }
    let wardle = serde_json::to_vec(&common::api::remote(G, V, "extension")).expect("json");
    let (code, retry, body, _) =
        common::api::send_bytes(Method::POST, &api, "application/json", wardle.clone()).await;
    assert_eq!((code, retry.as_deref()), (503, Some("1")), "{body}");
    let secrets = gw.url("/api/v1/namespaces/kube-system/secrets");
    assert_ne!(status_code(&secrets).await, 200);
    assert_eq!(
        extension
            .requests("/api/v1/namespaces/kube-system/secrets")
            .await,
        0
    );

    // 2. The delegate comes up: the registration goes through once its groups are read.
    let delegate = kube_delegate(false, &["--listen", &format!("127.0.0.1:{}", held.port)]);
    let created = eventually(Duration::from_secs(20), || async {
        let body = wardle.clone();
        common::api::send_bytes(Method::POST, &api, "application/json", body)
            .await
            .0
            == 201
    })
    .await;
    assert!(created, "the registration never went through");
    gw.wait_ready().await;
    let (code, _) = post(common::api::remote("apps", "v1", "extension")).await;
    assert_eq!(code, 422);
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    assert!(
        eventually(Duration::from_secs(10), || async {
            status_code(&flunders).await == 200
        })
        .await
    );
    assert!(status_code(&gw.url("/apis/apps/v1/deployments")).await == 200);
    assert_eq!(delegate.requests("/apis/apps/v1/deployments").await, 1);
    assert_eq!(extension.requests("/apis/apps/v1/deployments").await, 0);

    // 3. Only `status` is a subresource: a patch of `scale` (which authorization checks as
    //    `apiservices/scale`) re-points nothing, for every verb.
    let name = format!("{V}.{G}");
    let repoint = json!({"spec": {"service": {"name": "elsewhere"}}});
    for method in ["GET", "PUT", "PATCH", "POST", "DELETE"] {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let url = format!("{api}/{name}/scale");
        let (code, body) = send(
            method.clone(),
            &url,
            Some(("application/merge-patch+json", repoint.clone())),
        )
        .await;
        assert_eq!(code, 404, "{method} scale: {body}");
        assert_eq!(
            body["message"],
            "the server could not find the requested resource"
        );
    }
    let (_, object) = send(Method::GET, &format!("{api}/{name}"), None).await;
    assert_eq!(object["spec"]["service"]["name"], "extension", "{object}");
    assert_eq!(delegate.requests(&format!("{API}/{name}/scale")).await, 0);
    let before = extension.requests(&format!("/apis/{G}/{V}/flunders")).await;
    assert_eq!(status_code(&flunders).await, 200);
    assert_eq!(
        extension.requests(&format!("/apis/{G}/{V}/flunders")).await,
        before + 1
    );

    // 4. The delegate is replaced by one that serves wardle itself: the stored APIService never
    //    routes again and says why; GET and DELETE reach the stored object.
    let owner = common::api::wardle_delegate(gw.dir.path());
    gw.write_config(&config(&owner.url));
    let displaced = eventually(Duration::from_secs(20), || async {
        let (_, object) = send(Method::GET, &format!("{api}/{name}"), None).await;
        object["status"]["conditions"][0]["reason"] == "ConflictsWithDelegate"
    })
    .await;
    assert!(displaced, "the stored APIService was never marked");
    let (_, object) = send(Method::GET, &format!("{api}/{name}"), None).await;
    let condition = &object["status"]["conditions"][0];
    assert_eq!(condition["status"], "False", "{object}");
    let message = condition["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&format!("the delegate serves {G}/{V}")),
        "{message}"
    );
    let extension_before = extension.requests(&format!("/apis/{G}/{V}/flunders")).await;
    assert_eq!(status_code(&flunders).await, 200);
    assert_eq!(owner.requests(&format!("/apis/{G}/{V}/flunders")).await, 1);
    assert_eq!(
        extension.requests(&format!("/apis/{G}/{V}/flunders")).await,
        extension_before
    );
    let mut update = object.clone();
    update["spec"]["versionPriority"] = json!(16);
    let (code, body) = send(
        Method::PUT,
        &format!("{api}/{name}"),
        Some(("application/json", update)),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let (code, _) = send(Method::DELETE, &format!("{api}/{name}"), None).await;
    assert_eq!(code, 200);
    let (code, synthetic) = send(Method::GET, &format!("{api}/{name}"), None).await;
    assert_eq!(code, 200);
    assert_eq!(
        synthetic["metadata"]["annotations"]["apiagg.io/declared-in"],
        "the delegate"
    );
    let (code, _) = send(Method::DELETE, &format!("{api}/{name}"), None).await;
    assert_eq!(code, 405);
}

/// A JSON Patch that doubles a value 60 times, one of 10,001 operations, and a server-side
/// apply whose 20,000 aliases each expand a 20,000-item anchor: each gets a 4xx in well under a
/// second, apiagg's peak memory stays flat, `/readyz` keeps answering and the APIService keeps
/// routing to its backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_and_alias_bombs_are_refused_at_once() {
    use reqwest::Method;
    let backend = sample(G, "wardle", false);
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}",
        delegate.url,
        common::service("wardle", &backend.url)
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let name = format!("{V}.{G}");
    let object = common::api::remote(G, V, "wardle");
    let baseline = common::api::peak_rss_kib(gw.proc.child.id());
    let (code, body) = send(Method::POST, &api, Some(("application/json", object))).await;
    assert_eq!(code, 201, "{body}");

    let mut doubling = vec![json!({"op": "add", "path": "/bomb", "value": ["x".repeat(64)]})];
    doubling.extend((0..60).map(|_| json!({"op": "copy", "from": "/bomb", "path": "/bomb/-"})));
    let many: Vec<serde_json::Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "APIService"}))
        .collect();
    let mut yaml = format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: {name}\nspec:\n  a: &a ["
    );
    yaml.push_str(&vec!["x"; 20_000].join(","));
    yaml.push_str("]\n  b: [");
    yaml.push_str(&vec!["*a"; 20_000].join(","));
    yaml.push_str("]\n");
    let bombs = [
        (
            "60 doubling copies",
            "application/json-patch+json",
            serde_json::to_vec(&doubling).expect("json"),
            "",
        ),
        (
            "10,001 operations",
            "application/json-patch+json",
            serde_json::to_vec(&many).expect("json"),
            "The allowed maximum operations in a JSON patch is 10000, got 10001",
        ),
        (
            "alias bomb",
            "application/apply-patch+yaml",
            yaml.clone().into_bytes(),
            "its aliases expanded",
        ),
    ];
    for (what, content_type, body, message) in bombs {
        let size = body.len();
        let url = format!("{api}/{name}?fieldManager=bomb");
        let (code, _, answer, took) =
            common::api::send_bytes(Method::PATCH, &url, content_type, body).await;
        assert_eq!(code, 413, "{what}: {answer}");
        assert!(
            answer["message"].as_str().unwrap_or("").contains(message),
            "{what}: {answer}"
        );
        assert!(
            took < Duration::from_secs(1),
            "{what} ({size} bytes) took {took:?}"
        );
        eprintln!("{what}: {size} bytes refused in {took:?}");
        assert_eq!(status_code(&gw.url("/readyz")).await, 200, "after {what}");
    }
    // Sixteen alias bombs at once: each is refused (they take turns, memory stays bounded).
    let mut at_once = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (url, body) = (format!("{api}/{name}?fieldManager=bomb"), yaml.clone());
        at_once.spawn(async move {
            let yaml = "application/apply-patch+yaml";
            common::api::send_bytes(Method::PATCH, &url, yaml, body.into_bytes())
                .await
                .0
        });
    }
    while let Some(code) = at_once.join_next().await {
        assert_eq!(code.expect("a bomb's request"), 413);
    }
    assert_eq!(status_code(&gw.url("/readyz")).await, 200);
    let peak = common::api::peak_rss_kib(gw.proc.child.id());
    eprintln!(
        "apiagg peak RSS: {} MiB ({} MiB before the bombs)",
        peak / 1024,
        baseline / 1024
    );
    assert!(peak < 150 * 1024, "apiagg peaked at {peak} KiB");
    let (_, stored) = send(Method::GET, &format!("{api}/{name}"), None).await;
    assert!(
        stored["spec"].get("bomb").is_none() && stored["spec"].get("a").is_none(),
        "{stored}"
    );
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    assert!(
        eventually(Duration::from_secs(10), || async {
            status_code(&flunders).await == 200
        })
        .await
    );
    assert!(backend.requests(&format!("/apis/{G}/{V}/flunders")).await >= 1);
}
