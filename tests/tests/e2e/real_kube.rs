//! apiagg in front of the real Kubernetes (`apiagg_tests::real_kube`): etcd, kube-apiserver
//! 1.37 and k8s.io/sample-apiserver built from Go modules, RBAC and API Priority and Fairness on.
//! Adapted from upstream's aggregator e2e (test/e2e/apimachinery/aggregator.go, the sample API
//! server test): flunders created, listed, patched and deleted through apiagg; the caller's
//! identity reaching sample-apiserver through its request-header authenticator and its
//! SubjectAccessReview decided by the real RBAC. Beside them: the same requests sent to
//! kube-apiserver's own aggregator and to apiagg (`differential`), discovery and OpenAPI
//! documents (`documents`), an unavailable APIService (`unavailable`), the `Available` condition
//! of a backend up, down, behind a wrong CA or SAN, expired, and a missing Service
//! (`availability`), the validation errors of invalid APIServices (`invalid_apiservices`),
//! identities (`authentication`), RBAC decisions (`authorization`), flow-control classification
//! (`flow_control`), every OpenAPI document (`openapi`), client-go v0.37.2 (`client_go`: an
//! informer with WatchListClient, discovery v2, a RESTMapper) and kubectl 1.37 (`kubectl_137`)
//! through both.
//!
//! The control plane is shared by the tests of the process; each test works in namespaces of its
//! own.

mod authentication;
mod authorization;
mod availability;
mod check_backend;
mod client_go;
mod differential;
mod documents;
mod dry_run;
mod flow_control;
mod invalid_apiservices;
mod kubectl_137;
mod kubectl_writes;
mod many_groups;
mod openapi;
mod unavailable;

use std::time::{Duration, Instant};

use apiagg_tests::real_kube::{send, Front, RealKube, WARDLE};
use apiagg_tests::{metric_at, wait_until};
use serde_json::{json, Value};

/// A flunder named `name` (with `labels`).
fn flunder(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": name, "labels": labels}})
}

fn flunders(namespace: &str) -> String {
    format!("{WARDLE}/namespaces/{namespace}/flunders")
}

/// Grants `get`, `list` and `watch` on flunders in `namespace` to the user `narrow` and the group
/// `flunder-readers`; waits until kube-apiserver's RBAC says so.
async fn grant_flunder_reading(kube: &RealKube, namespace: &str) {
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "flunder-reader", "namespace": namespace},
        "rules": [{"apiGroups": ["wardle.example.com"], "resources": ["flunders"],
            "verbs": ["get", "list", "watch"]}]});
    let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}");
    kube.create(&format!("{rbac}/roles"), role).await;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "flunder-reader", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flunder-reader"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "narrow"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "flunder-readers"}]});
    kube.create(&format!("{rbac}/rolebindings"), binding).await;
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "narrow", "resourceAttributes": {"namespace": namespace,
            "verb": "list", "group": "wardle.example.com", "resource": "flunders"}}});
    let reviews = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    wait_until(
        "kube-apiserver's RBAC to grant the new Role",
        Duration::from_secs(20),
        || kube.admin("POST", reviews, Some(review.clone())),
        |(_, answer)| answer["status"]["allowed"] == true,
    )
    .await;
}

/// Requests apiagg proxied to wardle with status `code` (its `/metrics`, read as the admin).
async fn proxied(kube: &RealKube, front: &Front, code: u16) -> f64 {
    let series = format!(
        "apiagg_proxy_requests_total{{code=\"{code}\",group=\"wardle.example.com\",version=\"v1alpha1\"}}"
    );
    let admin = kube.client(Some(&kube.admin));
    metric_at(&admin, &front.url("/metrics"), &series)
        .await
        .unwrap_or(0.0)
}

/// Waits until apiagg counts `count` requests proxied to wardle with status `code` (counted when
/// the answer has been sent: a moment after the client read it).
async fn wait_proxied(kube: &RealKube, front: &Front, code: u16, count: f64) {
    wait_until(
        &format!("apiagg to count {count} requests proxied to wardle with {code}"),
        Duration::from_secs(5),
        || proxied(kube, front, code),
        |seen| *seen == count,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flunders_created_listed_patched_deleted_through_apiagg() {
    let kube = RealKube::shared().await;
    let began = Instant::now();
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let admin = kube.client(Some(&kube.admin));
    let namespace = "real-kube-flunders";
    kube.namespace(namespace).await;
    let collection = front.url(&flunders(namespace));

    // Discovery through apiagg lists the group, as kube-apiserver's does.
    let (code, groups) = send(&admin, "GET", &front.url("/apis"), None).await;
    assert_eq!(code, 200, "{groups}");
    let wardle = groups["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["name"] == "wardle.example.com");
    let wardle = wardle.unwrap_or_else(|| panic!("no wardle.example.com in {groups}"));
    assert_eq!(
        wardle["preferredVersion"]["version"], "v1alpha1",
        "{wardle}"
    );
    let (code, resources) = send(&admin, "GET", &front.url(WARDLE), None).await;
    assert_eq!(code, 200, "{resources}");
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"flunders") && names.contains(&"fischers"),
        "{names:?}"
    );

    let before = proxied(kube, &front, 201).await;
    let (code, created) = send(
        &admin,
        "POST",
        &collection,
        Some(flunder("rest-flunder", json!({"sample": "e2e"}))),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["namespace"], namespace, "{created}");
    // It went to sample-apiserver by apiagg's own route, not through kube-apiserver.
    wait_proxied(kube, &front, 201, before + 1.0).await;
    // The same object, read through kube-apiserver's aggregator: one sample-apiserver, one etcd.
    let item = format!("{}/rest-flunder", flunders(namespace));
    let (code, direct) = kube.admin("GET", &item, None).await;
    assert_eq!(
        (code, &direct["metadata"]["uid"]),
        (200, &created["metadata"]["uid"]),
        "{direct}"
    );

    let (code, list) = send(&admin, "GET", &collection, None).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "FlunderList", "{list}");
    let items: Vec<&Value> = list["items"].as_array().expect("items").iter().collect();
    assert_eq!(items.len(), 1, "{list}");

    let patch = json!({"metadata": {"labels": {"patched": "yes"}}});
    let (code, patched) = send(&admin, "PATCH", &front.url(&item), Some(patch)).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"sample": "e2e", "patched": "yes"}),
        "{patched}"
    );
    let selected = format!("{collection}?labelSelector=patched%3Dyes");
    let (code, list) = send(&admin, "GET", &selected, None).await;
    assert_eq!(
        (code, list["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{list}"
    );

    let (code, deleted) = send(&admin, "DELETE", &front.url(&item), None).await;
    assert_eq!(code, 200, "{deleted}");
    let (code, gone) = send(&admin, "GET", &front.url(&item), None).await;
    assert_eq!((code, &gone["reason"]), (404, &json!("NotFound")), "{gone}");
    let (code, list) = send(&admin, "GET", &collection, None).await;
    assert_eq!(
        (code, list["items"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{list}"
    );
    eprintln!(
        "flunders round trip: {:?} after the control plane was up",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_identity_reaches_sample_apiserver_and_real_rbac_decides() {
    let kube = RealKube::shared().await;
    let began = Instant::now();
    // No authorizer at apiagg: every request goes on, and sample-apiserver's delegated
    // SubjectAccessReview (kube-apiserver's RBAC) is the only decision.
    let front = kube.apiagg(None).await;
    let (granted, other) = ("real-kube-identity", "real-kube-identity-other");
    kube.namespace(granted).await;
    kube.namespace(other).await;
    grant_flunder_reading(kube, granted).await;
    let narrow = kube.client(Some(&kube.client_ca.client("narrow", &[])));
    let reader = kube.client(Some(
        &kube.client_ca.client("grouped", &["flunder-readers"]),
    ));
    let anonymous = kube.client(None);

    let forbidden_before = proxied(kube, &front, 403).await;
    for (who, client) in [("narrow", &narrow), ("grouped", &reader)] {
        let (code, list) = send(client, "GET", &front.url(&flunders(granted)), None).await;
        assert_eq!(code, 200, "{who} lists flunders in {granted}: {list}");
    }
    let refusals = [
        ("narrow", &narrow, "POST", granted, "create"),
        ("narrow", &narrow, "GET", other, "list"),
        ("grouped", &reader, "POST", other, "create"),
        ("system:anonymous", &anonymous, "GET", granted, "list"),
    ];
    for (who, client, method, namespace, verb) in refusals {
        let body = (method == "POST").then(|| flunder("refused", json!({})));
        let (code, status) = send(client, method, &front.url(&flunders(namespace)), body).await;
        assert_eq!(
            (code, &status["reason"]),
            (403, &json!("Forbidden")),
            "{who} {verb}: {status}"
        );
        let says = format!("User \"{who}\" cannot {verb} resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"{namespace}\"");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains(&says), "{who} {verb}: {message}");
    }
    // Each refusal was sample-apiserver's answer, proxied (apiagg decided nothing).
    wait_proxied(kube, &front, 403, forbidden_before + refusals.len() as f64).await;
    eprintln!(
        "identity and RBAC through sample-apiserver: {:?}",
        began.elapsed()
    );
}
