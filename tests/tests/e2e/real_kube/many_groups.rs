//! Users in many groups against kube-apiserver 1.37 (issue 46, item 1): a certificate user in
//! 600 groups reaches kube-apiserver (the delegate, as apiagg's `Impersonate-Group` lines) and
//! sample-apiserver (as `X-Remote-Group` lines, from kube-apiserver's aggregator or from
//! apiagg) with every group, over HTTP/1.1 and HTTP/2 alike: only its 600th group may list
//! flunders, and it may, through both. 600 `Impersonate-Group` values sent by the admin are
//! honoured by kube-apiserver and refused by apiagg with a 431 naming its limit (64 values;
//! over HTTP/1.1 already 256 header lines).

use std::time::Duration;

use apiagg_tests::real_kube::{send, RealKube, WARDLE};
use apiagg_tests::wait_until;
use serde_json::{json, Value};

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const GROUPS: usize = 600;
const NAMESPACE: &str = "many-groups";
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/many-groups";

/// In [`NAMESPACE`], the group `group` may list flunders (and nobody else here may).
async fn grant(kube: &RealKube, group: &str) {
    kube.namespace(NAMESPACE).await;
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "flunder-reader"},
        "rules": [{"apiGroups": ["wardle.example.com"], "resources": ["flunders"],
                   "verbs": ["get", "list"]}]});
    kube.create(&format!("{RBAC}/roles"), role).await;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "flunder-readers"},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}],
        "roleRef": {"kind": "Role", "apiGroup": "rbac.authorization.k8s.io",
                    "name": "flunder-reader"}});
    kube.create(&format!("{RBAC}/rolebindings"), binding).await;
}

/// A client of the control plane with `identity`, speaking only HTTP/1.1 or only HTTP/2.
fn client(kube: &RealKube, identity: &(String, String), h2: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(kube.serving_ca.cert_pem.as_bytes()).expect("CA");
    let pem = format!("{}{}", identity.0, identity.1);
    let builder = reqwest::Client::builder()
        .add_root_certificate(ca)
        .identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"))
        .timeout(Duration::from_secs(30));
    let builder = if h2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    builder.build().expect("client")
}

/// A SelfSubjectReview at `url` with `headers`: the status and the user it names (the Status of
/// a refusal).
async fn review(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let mut request = client.post(url).json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let code = answer.status().as_u16();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    match code {
        201 => (code, body["status"]["userInfo"].clone()),
        _ => (code, body),
    }
}

fn group_count(user: &Value) -> usize {
    user["groups"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_in_600_groups_is_served_as_kube_apiserver_serves_it() {
    let kube = RealKube::shared().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let teams: Vec<String> = (0..GROUPS).map(|i| format!("team-{i:03}")).collect();
    let names: Vec<&str> = teams.iter().map(String::as_str).collect();
    grant(kube, &teams[GROUPS - 1]).await;
    let many = kube.client_ca.client("many", &names);
    let mut impersonating = vec![("Impersonate-User", "frank")];
    impersonating.extend(names.iter().map(|g| ("Impersonate-Group", *g)));
    let flunders = format!("{WARDLE}/namespaces/{NAMESPACE}/flunders");

    for h2 in [false, true] {
        let wire = if h2 { "HTTP/2" } else { "HTTP/1.1" };
        let many = client(kube, &many, h2);
        // The delegate: kube-apiserver authenticates the certificate itself, or apiagg
        // impersonates its user with 600 `Impersonate-Group` lines. The same identity.
        let theirs = review(&many, &kube.kube_url(REVIEWS), &[]).await;
        let ours = review(&many, &front.url(REVIEWS), &[]).await;
        assert_eq!(theirs.0, 201, "{wire}: kube-apiserver: {}", theirs.1);
        assert_eq!(group_count(&theirs.1), GROUPS + 1, "{wire}: {}", theirs.1);
        assert_eq!(ours, theirs, "{wire}: the identity at the delegate");

        // sample-apiserver: 600 `X-Remote-Group` lines from either aggregator; the 600th group
        // is the one the cluster's RBAC lets list (sample-apiserver asks kube-apiserver).
        let listed = |(code, _): &(u16, Value)| *code == 200;
        let url = kube.kube_url(&flunders);
        let theirs = wait_until(
            "kube-apiserver's aggregator to list flunders for the 600th group",
            Duration::from_secs(20),
            || send(&many, "GET", &url, None),
            listed,
        )
        .await;
        let ours = send(&many, "GET", &front.url(&flunders), None).await;
        assert_eq!(ours.0, 200, "{wire}: apiagg: {}", ours.1);
        assert_eq!(ours.1["items"], theirs.1["items"], "{wire}: the flunders");

        // 600 `Impersonate-Group` values from the admin: kube-apiserver honours them; apiagg
        // refuses them before any check, naming its limit.
        let admin = client(kube, &kube.admin, h2);
        let theirs = review(&admin, &kube.kube_url(REVIEWS), &impersonating).await;
        assert_eq!(theirs.0, 201, "{wire}: kube-apiserver: {}", theirs.1);
        assert_eq!(group_count(&theirs.1), GROUPS + 1, "{wire}: {}", theirs.1);
        let (code, status) = review(&admin, &front.url(REVIEWS), &impersonating).await;
        assert_eq!(code, 431, "{wire}: apiagg: {status}");
        assert_eq!(status["reason"], "RequestHeaderFieldsTooLarge", "{status}");
        let limit = if h2 { "limit of 64" } else { "limit of 256" };
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains(limit), "{wire}: {status}");
    }
}
