//! Flow control against kube-apiserver's own: apiagg reads the cluster's FlowSchemas and
//! PriorityLevelConfigurations (`--flow-control-from-cluster`) and must classify a request as
//! kube-apiserver does: the same FlowSchema and PriorityLevel UIDs in the
//! `X-Kubernetes-PF-*` headers for the same caller and request. Callers are the admin
//! impersonating the identities the suggested FlowSchemas name, and users the test's own
//! FlowSchemas match (by user, by group with resource and namespace rules, by a non-resource
//! path); then a FlowSchema created while apiagg runs, and how soon apiagg applies it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use apiagg_tests::real_kube::{Front, RealKube, WARDLE};
use apiagg_tests::wait_until;
use serde_json::{json, Value};

const FLOWCONTROL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";
const NAMESPACE: &str = "flow-ns";

/// A caller: impersonated user and groups (none: the admin itself).
type Caller = (&'static str, &'static [&'static str]);

const CALLERS: [Caller; 9] = [
    ("", &[]),
    (
        "system:serviceaccount:kube-system:ctrl",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
        ],
    ),
    (
        "system:serviceaccount:flow-ns:app",
        &["system:serviceaccounts", "system:serviceaccounts:flow-ns"],
    ),
    ("system:kube-controller-manager", &[]),
    ("system:kube-scheduler", &[]),
    ("system:node:n1", &["system:nodes"]),
    ("flow-alice", &[]),
    ("flow-bob", &["flow-team"]),
    ("flow-carol", &[]),
];

/// The test's PriorityLevel and FlowSchemas: a user, a group on configmaps in one namespace,
/// a non-resource path, at precedences between the suggested ones.
fn objects() -> Vec<(&'static str, Value)> {
    let level = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration", "metadata": {"name": "flow-diff"},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 8, "handSize": 2,
                "queueLengthLimit": 20}}}}});
    let schema = |name: &str, precedence: u32, subjects: Value, rules: Value| {
        let mut rule = json!({"subjects": subjects});
        for (key, value) in rules.as_object().into_iter().flatten() {
            rule[key] = value.clone();
        }
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": "flow-diff"},
                "matchingPrecedence": precedence, "distinguisherMethod": {"type": "ByUser"},
                "rules": [rule]}})
    };
    let user = |name: &str| json!([{"kind": "User", "user": {"name": name}}]);
    let every_resource = json!({"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
        "resources": ["*"], "namespaces": ["*"], "clusterScope": true}]});
    vec![
        ("prioritylevelconfigurations", level),
        (
            "flowschemas",
            schema("flow-diff-alice", 500, user("flow-alice"), every_resource),
        ),
        (
            "flowschemas",
            schema(
                "flow-diff-team",
                600,
                json!([{"kind": "Group", "group": {"name": "flow-team"}}]),
                json!({"resourceRules": [{"verbs": ["get", "list"], "apiGroups": [""],
                "resources": ["configmaps"], "namespaces": [NAMESPACE]}]}),
            ),
        ),
        (
            "flowschemas",
            schema(
                "flow-diff-path",
                700,
                user("flow-carol"),
                json!({"nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/custom/*", "/version"]}]}),
            ),
        ),
    ]
}

/// What each caller asks.
fn requests() -> Vec<(&'static str, String)> {
    let ns = format!("/api/v1/namespaces/{NAMESPACE}");
    vec![
        ("GET", format!("{ns}/configmaps")),
        ("GET", format!("{ns}/pods")),
        (
            "GET",
            "/api/v1/namespaces/kube-system/configmaps".to_string(),
        ),
        ("GET", "/api/v1/nodes".to_string()),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases".to_string(),
        ),
        ("GET", format!("{WARDLE}/namespaces/{NAMESPACE}/flunders")),
        ("POST", format!("{ns}/configmaps?dryRun=All")),
        ("GET", "/version".to_string()),
        ("GET", "/custom/thing".to_string()),
        ("GET", "/apis".to_string()),
    ]
}

/// The admin's client and the `Impersonate-*` headers of `caller`.
fn client_as(
    kube: &RealKube,
    (user, groups): Caller,
) -> (reqwest::Client, reqwest::header::HeaderMap) {
    let mut headers = reqwest::header::HeaderMap::new();
    if !user.is_empty() {
        headers.insert("impersonate-user", user.parse().expect("user"));
    }
    for group in groups {
        headers.append("impersonate-group", group.parse().expect("group"));
    }
    (kube.client(Some(&kube.admin)), headers)
}

/// The FlowSchema and PriorityLevel UIDs of the answer to `method path` at `url`.
async fn classified(
    (client, headers): &(reqwest::Client, reqwest::header::HeaderMap),
    method: &str,
    url: &str,
) -> (Option<String>, Option<String>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = client.request(method.clone(), url).headers(headers.clone());
    if method == reqwest::Method::POST {
        request = request
            .header("content-type", "application/json")
            .body("{}");
    }
    let answer = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let header = |name: &str| {
        let value = answer.headers().get(name)?;
        value.to_str().ok().map(str::to_string)
    };
    (
        header("x-kubernetes-pf-flowschema-uid"),
        header("x-kubernetes-pf-prioritylevel-uid"),
    )
}

/// The names of the cluster's FlowSchemas and PriorityLevels by UID.
async fn names(kube: &RealKube) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for kind in ["flowschemas", "prioritylevelconfigurations"] {
        let (_, list) = kube
            .admin("GET", &format!("{FLOWCONTROL}/{kind}"), None)
            .await;
        for item in list["items"].as_array().into_iter().flatten() {
            let uid = item["metadata"]["uid"].as_str().unwrap_or_default();
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            names.insert(uid.to_string(), name.to_string());
        }
    }
    names
}

/// Waits until apiagg classifies `caller`'s `GET path` under the FlowSchema `uid`; how long.
async fn applied(
    kube: &RealKube,
    front: &Front,
    caller: Caller,
    path: &str,
    uid: &str,
) -> Duration {
    let began = Instant::now();
    let client = client_as(kube, caller);
    let url = front.url(path);
    wait_until(
        &format!("apiagg to classify {caller:?} GET {path} by FlowSchema {uid}"),
        Duration::from_secs(30),
        || classified(&client, "GET", &url),
        |(schema, _)| schema.as_deref() == Some(uid),
    )
    .await;
    began.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiagg_classifies_requests_as_kube_apiservers_flow_control() {
    let kube = RealKube::shared().await;
    kube.namespace(NAMESPACE).await;
    for (kind, object) in objects() {
        kube.create(&format!("{FLOWCONTROL}/{kind}"), object).await;
    }
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let (_, alice) = kube
        .admin(
            "GET",
            &format!("{FLOWCONTROL}/flowschemas/flow-diff-alice"),
            None,
        )
        .await;
    let alice_uid = alice["metadata"]["uid"].as_str().expect("uid").to_string();
    let wait = applied(
        kube,
        &front,
        ("flow-alice", &[]),
        "/api/v1/nodes",
        &alice_uid,
    )
    .await;
    let names = names(kube).await;
    let name = |uid: &Option<String>| match uid {
        Some(uid) => names
            .get(uid)
            .cloned()
            .unwrap_or_else(|| format!("uid {uid}")),
        None => "-".to_string(),
    };
    let (mut table, mut differ, mut rows) = (String::new(), Vec::new(), 0);
    for caller in CALLERS {
        let client = client_as(kube, caller);
        for (method, path) in requests() {
            let theirs = classified(&client, method, &kube.kube_url(&path)).await;
            let ours = classified(&client, method, &front.url(&path)).await;
            rows += 1;
            let line = format!(
                "{caller:?} {method} {path}: kube-apiserver {}/{}, apiagg {}/{}\n",
                name(&theirs.0),
                name(&theirs.1),
                name(&ours.0),
                name(&ours.1)
            );
            if theirs != ours {
                differ.push(line.clone());
            }
            table += &line;
        }
    }
    eprintln!(
        "flow control ({rows} rows, the test's objects applied at apiagg in {wait:?}):\n{table}"
    );
    assert!(
        differ.is_empty(),
        "classified differently:\n{}",
        differ.concat()
    );

    // A FlowSchema created while apiagg runs.
    let late = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": "flow-diff-late"},
        "spec": {"priorityLevelConfiguration": {"name": "flow-diff"}, "matchingPrecedence": 400,
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "flow-dave"}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "namespaces": ["*"], "clusterScope": true}]}]}});
    let late_path = format!("{FLOWCONTROL}/flowschemas/flow-diff-late");
    let _ = kube.admin("DELETE", &late_path, None).await;
    let created = Instant::now();
    let (code, object) = kube
        .admin("POST", &format!("{FLOWCONTROL}/flowschemas"), Some(late))
        .await;
    assert!(code == 201, "{object}");
    let uid = object["metadata"]["uid"].as_str().expect("uid").to_string();
    applied(kube, &front, ("flow-dave", &[]), "/api/v1/nodes", &uid).await;
    let took = created.elapsed();
    let _ = kube.admin("DELETE", &late_path, None).await;
    eprintln!("a FlowSchema created at kube-apiserver classifies at apiagg after {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}
