//! Secure by default: nobody but an administrator changes routes, nobody but monitoring reads
//! `/metrics` and `/debug`, without an authorizer (apiagg's built-in rule) and with the deploy
//! example (`authorization.mode: Webhook`, rendered by `kubectl kustomize deploy/base`). Each row
//! is an attack or a legitimate call, with what apiagg answered and what the backend, the
//! delegate and the store saw.

use std::process::Command;

use apiagg_tests::trust::Cluster;
use apiagg_tests::{G, V};
use reqwest::Client;
use serde_json::{json, Value};

/// An APIService that would take the sample group-version to an attacker's Service.
fn hijack(name: &str, version: &str) -> Value {
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("{version}.{name}")},
        "spec": {"group": name, "version": version, "groupPriorityMinimum": 20000,
            "versionPriority": 1000, "insecureSkipTLSVerify": true,
            "service": {"namespace": "attacker", "name": "evil", "port": 443}}})
}

const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

async fn post(c: &Cluster, client: &Client, path: &str, body: &Value) -> (u16, Value) {
    let resp = client
        .post(c.url(path))
        .json(body)
        .send()
        .await
        .expect("post");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

async fn delete(c: &Cluster, client: &Client, path: &str) -> u16 {
    let resp = client.delete(c.url(path)).send().await.expect("delete");
    resp.status().as_u16()
}

/// The names of the APIServices apiagg stores and serves (as an administrator reads them).
async fn names(c: &Cluster, admin: &Client) -> Vec<String> {
    let (code, list) = c.get(admin, APISERVICES, &[]).await;
    assert_eq!(code, 200, "{list}");
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_refused((code, status): &(u16, Value), who: &str) {
    assert_eq!(*code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden", "{status}");
    let message = status["message"].as_str().unwrap_or("");
    assert!(message.contains(&format!("User \"{who}\"")), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authorizer_only_administrators_change_routes() {
    let c = Cluster::start(true).await;
    let anonymous = c.client(None);
    let alice = c.client(Some(&c.client_ca.client("alice", &[])));
    let monitor = c.client(Some(
        &c.client_ca.client("prometheus", &["system:monitoring"]),
    ));
    let admin = c.client(Some(&c.client_ca.client("root", &["system:masters"])));
    let target = hijack("evil.example.com", "v1");
    let path = |name: &str| format!("{APISERVICES}/{name}");

    // Row: an anonymous caller creates an APIService → 403, nothing stored.
    let refused = post(&c, &anonymous, APISERVICES, &target).await;
    assert_refused(&refused, "system:anonymous");
    let message = refused.1["message"].as_str().unwrap_or("");
    assert!(
        message.contains("only to members of system:masters"),
        "{message}"
    );
    // Row: an authenticated caller outside system:masters creates one → 403.
    assert_refused(&post(&c, &alice, APISERVICES, &target).await, "alice");
    // Row: anonymous reads APIServices (backends, CA bundles) → 403; alice may read.
    assert_refused(
        &c.get(&anonymous, APISERVICES, &[]).await,
        "system:anonymous",
    );
    assert_eq!(c.get(&alice, APISERVICES, &[]).await.0, 200);
    // Row: alice deletes the sample's APIService → 403 (it stays routed).
    let sample = format!("{V}.{G}");
    assert_eq!(delete(&c, &alice, &path(&sample)).await, 403);
    // Row: a watch through the `/watch/` prefix is a read for alice, a 403 for anonymous.
    let watch = "/apis/apiregistration.k8s.io/v1/watch/apiservices?timeoutSeconds=1";
    assert_eq!(c.get(&anonymous, watch, &[]).await.0, 403);

    // Rows: /metrics, /statusz, /flagz and /debug/apiagg/status: 403 to anonymous and alice,
    // 200 to monitoring.
    for monitoring in ["/metrics", "/statusz", "/flagz", "/debug/apiagg/status"] {
        assert_refused(
            &c.get(&anonymous, monitoring, &[]).await,
            "system:anonymous",
        );
        assert_refused(&c.get(&alice, monitoring, &[]).await, "alice");
        let resp = monitor.get(c.url(monitoring)).send().await.expect("get");
        assert_eq!(resp.status(), 200, "{monitoring}");
    }

    // Nothing the refused callers sent was stored; the delegate was never asked to decide
    // (no SubjectAccessReview) and never saw the APIService API.
    let stored = names(&c, &admin).await;
    assert!(
        !stored.iter().any(|n| n == "v1.evil.example.com"),
        "{stored:?}"
    );
    assert!(stored.contains(&sample), "{stored:?}");
    let reviews = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    assert_eq!(c.delegate.requests(reviews).await, 0);
    assert_eq!(c.delegate.requests(APISERVICES).await, 0);

    // Row: an administrator (system:masters) may: create, then delete.
    let (code, created) = post(&c, &admin, APISERVICES, &target).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(delete(&c, &admin, &path("v1.evil.example.com")).await, 200);

    // The start-up log says what is open to whom.
    let log = c.gw.log();
    for line in [
        "access: requests without credentials: allowed, as system:anonymous",
        "access: APIService writes: members of system:masters",
        "access: /metrics, /statusz, /flagz and /debug/apiagg: members of system:masters or \
         system:monitoring",
    ] {
        assert!(log.contains(line), "{line} missing from the log:\n{log}");
    }
}

/// The RBAC a cluster gives: admin may change APIServices, the monitoring group reads metrics,
/// everybody reads discovery.
const RBAC: &str = r#"{"rules": [
    {"users": ["admin"], "verbs": ["*"], "apiGroups": ["apiregistration.k8s.io"], "resources": ["*"]},
    {"groups": ["system:monitoring"], "verbs": ["get"], "nonResourceURLs": ["/metrics"]},
    {"groups": ["system:authenticated", "system:unauthenticated"], "verbs": ["get"],
     "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi/*", "/version"]}
]}"#;

/// `apiagg.yaml` of the ConfigMap `kubectl kustomize deploy/base` renders.
fn deploy_example() -> String {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/base");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&base)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_yaml_ng::Value =
            serde::Deserialize::deserialize(doc).expect("rendered YAML");
        if value["kind"].as_str() == Some("ConfigMap") {
            if let Some(config) = value["data"]["apiagg.yaml"].as_str() {
                return config.to_string();
            }
        }
    }
    panic!("no ConfigMap with apiagg.yaml in the rendered deploy example");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_example_lets_only_what_rbac_grants_change_routes() {
    let example = deploy_example();
    assert!(example.contains("mode: Webhook"), "{example}");
    let c = Cluster::start_deploy_example(&example, RBAC).await;
    let anonymous = c.client(None);
    let bob = c.client(Some(&c.client_ca.client("bob", &[])));
    let admin = c.client(Some(&c.client_ca.client("admin", &[])));
    let monitor = c.client(Some(
        &c.client_ca.client("prometheus", &["system:monitoring"]),
    ));
    let target = hijack(G, "v2");

    // Rows: anonymous and bob (no RBAC rule) cannot create, delete or read APIServices, or
    // read /metrics: 403 Status, decided by the delegate's SubjectAccessReview.
    for (client, who) in [(&anonymous, "system:anonymous"), (&bob, "bob")] {
        assert_refused(&post(&c, client, APISERVICES, &target).await, who);
        assert_refused(&c.get(client, APISERVICES, &[]).await, who);
        assert_refused(&c.get(client, "/metrics", &[]).await, who);
        let name = format!("{APISERVICES}/v2.{G}");
        assert_eq!(delete(&c, client, &name).await, 403);
    }
    // The group's discovery is untouched: no v2 was stored.
    let (code, group) = c.get(&bob, &format!("/apis/{G}"), &[]).await;
    assert_eq!(code, 404, "{group}");

    // Rows: what RBAC grants works: admin creates and deletes; the monitoring group reads
    // /metrics.
    let (code, created) = post(&c, &admin, APISERVICES, &target).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        delete(&c, &admin, &format!("{APISERVICES}/v2.{G}")).await,
        200
    );
    let resp = monitor
        .get(c.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(resp.status(), 200);
    let reviews = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    assert!(c.delegate.requests(reviews).await > 0);
}

/// `lister` may list and watch one APIService by name; `reader` may list all but not watch.
const NARROW: &str = r#"{"rules": [
    {"users": ["lister"], "verbs": ["list", "watch"], "apiGroups": ["apiregistration.k8s.io"],
     "resources": ["apiservices"], "resourceNames": ["v1alpha1.wardle.example.com"]},
    {"users": ["reader"], "verbs": ["list"], "apiGroups": ["apiregistration.k8s.io"],
     "resources": ["apiservices"]}
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_and_the_api_read_one_parse_of_the_query() {
    let c = Cluster::start_authorizing(true, "{mode: Webhook}", NARROW).await;
    let lister = c.client(Some(&c.client_ca.client("lister", &[])));
    let reader = c.client(Some(&c.client_ca.client("reader", &[])));
    let one = format!("{V}.{G}");

    // Row: lister asks for its one name AND not another: authorized for that name, and the
    // API applies every term, so it gets that one object only (was: every APIService).
    for selector in [
        format!("metadata.name%3D{one},metadata.name!%3Dy"),
        format!("metadata.name!%3Dy,metadata.name%3D{one}"),
    ] {
        let (code, list) = c
            .get(
                &lister,
                &format!("{APISERVICES}?fieldSelector={selector}"),
                &[],
            )
            .await;
        assert_eq!(code, 200, "{list}");
        let items = list["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 1, "{list}");
        assert_eq!(items[0]["metadata"]["name"], one.as_str());
    }
    // Row: a second fieldSelector is ignored by both (the first value wins).
    let doubled = format!("{APISERVICES}?fieldSelector=metadata.name%3D{one}&fieldSelector=x%3Dy");
    assert_eq!(c.get(&lister, &doubled, &[]).await.0, 200);
    // Row: without a name it is a list of everything: 403.
    assert_refused(&c.get(&lister, APISERVICES, &[]).await, "lister");
    // Row: a field APIServices do not have is a 400, never ignored (which would widen it).
    let bogus = format!("{APISERVICES}?fieldSelector=metadata.name%3D{one},spec.group%3Dx");
    assert_eq!(c.get(&lister, &bogus, &[]).await.0, 400);

    // Row: reader may list, not watch: `watch=false&watch=true` is a list for both
    // (the first value wins), answered as a list, not a stream.
    let (code, list) = c
        .get(
            &reader,
            &format!("{APISERVICES}?watch=false&watch=true"),
            &[],
        )
        .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "APIServiceList", "{list}");
    assert_refused(
        &c.get(
            &reader,
            &format!("{APISERVICES}?watch=true&watch=false"),
            &[],
        )
        .await,
        "reader",
    );
    let watch_path = "/apis/apiregistration.k8s.io/v1/watch/apiservices";
    assert_refused(&c.get(&reader, watch_path, &[]).await, "reader");
}
