//! Authorization (`authorization.mode: Webhook`): every request but health and `/version` is
//! authorized by a SubjectAccessReview at the delegate, which answers from a policy file the way
//! RBAC does; refusals are kube-apiserver's 403 Status; decisions are cached for the configured
//! TTLs; caller-sent impersonation is authorized first, then honoured.

use std::process::{Command, Stdio};
use std::time::Duration;

use apiagg_tests::trust::{Cluster, POLICY_FILE, STATIC_TOKEN};
use apiagg_tests::{G, V};
use serde_json::{json, Value};

/// Where apiagg posts its reviews (the delegate counts requests by path).
const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// alice may do anything in the sample group, read discovery and metrics, and impersonate dave
/// (and the group ops); bob may only read discovery; dave may read `whoami` on the backend and
/// the delegate; eve and carol may do nothing.
const POLICY: &str = r#"{"rules": [
    {"users": ["alice"], "verbs": ["*"], "apiGroups": ["wardle.example.com"], "resources": ["*"]},
    {"users": ["alice"], "verbs": ["get"], "nonResourceURLs": ["/metrics", "/debug/*"]},
    {"users": ["alice"], "verbs": ["impersonate"], "resources": ["users"], "resourceNames": ["dave"]},
    {"users": ["alice"], "verbs": ["impersonate"], "resources": ["groups"], "resourceNames": ["ops"]},
    {"groups": ["discoverers"], "verbs": ["get"],
     "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi/*"]},
    {"users": ["dave"], "verbs": ["get", "list"], "apiGroups": ["wardle.example.com"], "resources": ["whoami"]},
    {"users": ["dave"], "verbs": ["get"], "nonResourceURLs": ["/debug/whoami"]}
]}"#;

async fn cluster(authorization: &str) -> Cluster {
    Cluster::start_authorizing(true, authorization, POLICY).await
}

/// A client with a certificate of the callers' CA for `user` in `group` (if any).
fn caller(c: &Cluster, user: &str, group: Option<&str>) -> reqwest::Client {
    let groups: Vec<&str> = group.into_iter().collect();
    c.client(Some(&c.client_ca.client(user, &groups)))
}

async fn reviews(c: &Cluster) -> u64 {
    c.delegate.requests(REVIEWS).await
}

fn whoami() -> String {
    format!("/apis/{G}/{V}/whoami")
}

/// Asserts a 403 Status with `message` and `details`.
fn assert_forbidden((code, status): &(u16, Value), message: &str, details: Value) {
    assert_eq!(*code, 403, "{status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["reason"], "Forbidden", "{status}");
    assert_eq!(status["code"], 403, "{status}");
    assert_eq!(status["message"], message, "{status}");
    assert_eq!(status["details"], details, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_callers_get_kube_apiservers_403_and_allowed_ones_reach_the_backend() {
    let c = cluster("{mode: Webhook}").await;
    let (alice, bob, eve) = (
        caller(&c, "alice", Some("discoverers")),
        caller(&c, "bob", Some("discoverers")),
        caller(&c, "eve", None),
    );

    // A resource request, namespaced and by name.
    let list = format!("/apis/{G}/{V}/namespaces/default/flunders");
    assert_forbidden(
        &c.get(&bob, &list, &[]).await,
        &format!(
            "flunders.{G} is forbidden: User \"bob\" cannot list resource \"flunders\" in API \
             group \"{G}\" in the namespace \"default\""
        ),
        json!({"group": G, "kind": "flunders"}),
    );
    assert_forbidden(
        &c.get(&bob, &format!("{list}/x"), &[]).await,
        &format!(
            "flunders.{G} \"x\" is forbidden: User \"bob\" cannot get resource \"flunders\" in \
             API group \"{G}\" in the namespace \"default\""
        ),
        json!({"name": "x", "group": G, "kind": "flunders"}),
    );
    // Non-resource requests: metrics and discovery.
    assert_forbidden(
        &c.get(&bob, "/metrics", &[]).await,
        "forbidden: User \"bob\" cannot get path \"/metrics\"",
        json!({}),
    );
    assert_forbidden(
        &c.get(&eve, "/apis", &[]).await,
        "forbidden: User \"eve\" cannot get path \"/apis\"",
        json!({}),
    );
    assert_forbidden(
        &c.get(&eve, &format!("/apis/{G}"), &[]).await,
        &format!("forbidden: User \"eve\" cannot get path \"/apis/{G}\""),
        json!({}),
    );
    // An anonymous caller is authorized as system:anonymous.
    let anonymous = c.client(None);
    assert_forbidden(
        &c.get(&anonymous, "/api", &[]).await,
        "forbidden: User \"system:anonymous\" cannot get path \"/api\"",
        json!({}),
    );
    // Discovery is allowed to bob; the backend, metrics and the delegate to alice.
    assert_eq!(c.get(&bob, "/apis", &[]).await.0, 200);
    let (code, seen) = c.get(&alice, &whoami(), &[]).await;
    assert_eq!((code, &seen["user"]), (200, &json!("alice")), "{seen}");
    assert_eq!(c.get(&alice, "/metrics", &[]).await.0, 200);
    let (code, seen) = c.get(&alice, "/debug/whoami", &[]).await;
    assert_eq!((code, &seen["user"]), (200, &json!("alice")), "{seen}");
    let (code, _) = c.get(&alice, &list, &[]).await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_review_per_decision_within_its_ttl() {
    // TTLs of a second: each run of twenty requests below takes a few tens of milliseconds.
    let c = cluster("{mode: Webhook, cacheAuthorizedTTL: 1s, cacheUnauthorizedTTL: 1s}").await;
    let (alice, eve) = (
        caller(&c, "alice", Some("discoverers")),
        caller(&c, "eve", None),
    );
    let before = reviews(&c).await;
    for _ in 0..20 {
        assert_eq!(c.get(&alice, &whoami(), &[]).await.0, 200);
    }
    assert_eq!(reviews(&c).await, before + 1, "allowed: one review");
    for _ in 0..20 {
        assert_eq!(c.get(&eve, &whoami(), &[]).await.0, 403);
    }
    assert_eq!(reviews(&c).await, before + 2, "denied: one review");
    // Another request of the same caller is another decision.
    assert_eq!(c.get(&alice, "/metrics", &[]).await.0, 200);
    assert_eq!(reviews(&c).await, before + 3);

    // Past the TTLs both are asked again. The wait is what is tested: just past the TTL.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(c.get(&alice, &whoami(), &[]).await.0, 200);
    assert_eq!(c.get(&eve, &whoami(), &[]).await.0, 403);
    assert_eq!(reviews(&c).await, before + 5, "a new review after the TTL");

    // Cache hits and misses are counted.
    let (code, _) = c.get(&alice, "/metrics", &[]).await;
    assert_eq!(code, 200);
    let text = alice
        .get(c.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let series = |decision: &str, cache: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("apiagg_authorization_decisions_total{"))
            .find(|l| {
                l.contains(&format!("decision=\"{decision}\""))
                    && l.contains(&format!("cache=\"{cache}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {decision}/{cache} series in {text}"))
    };
    assert!(series("allowed", "hit") >= 20.0, "{text}");
    assert!(series("denied", "hit") >= 19.0, "{text}");
    assert_eq!(series("denied", "miss"), 2.0, "{text}");
    assert_eq!(series("error", "miss"), 0.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_that_cannot_decide_is_a_500_that_is_not_remembered() {
    let c = cluster("{mode: Webhook}").await;
    let alice = caller(&c, "alice", Some("discoverers"));
    let policy = c.dir.join(POLICY_FILE);
    std::fs::write(&policy, "{not json").expect("break the policy");
    let (code, status) = c.get(&alice, &whoami(), &[]).await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["reason"], "InternalError", "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("Internal Server Error: \"{}\": ", whoami()))
            && message.contains("500"),
        "{status}"
    );
    std::fs::write(&policy, POLICY).expect("restore the policy");
    let (code, seen) = c.get(&alice, &whoami(), &[]).await;
    assert_eq!((code, &seen["user"]), (200, &json!("alice")), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_is_authorized_before_it_is_honoured() {
    let c = cluster("{mode: Webhook}").await;
    let alice = caller(&c, "alice", Some("discoverers"));
    let carol = c.client(None);
    let carol_token = format!("Bearer {STATIC_TOKEN}");

    // Without the right: upstream's 403 for the impersonation itself. The constrained modes
    // (KEP-5284) are tried before the legacy `impersonate` verb, and the first refusal met is
    // the answer: carol may not even impersonate for this request; alice may (her wildcard
    // verbs cover `impersonate-on:…`) but not as dave in user-info mode.
    assert_forbidden(
        &c.get(
            &carol,
            &whoami(),
            &[
                ("Authorization", &carol_token),
                ("Impersonate-User", "dave"),
            ],
        )
        .await,
        &format!(
            "whoami.{G} is forbidden: User \"carol\" cannot impersonate-on:user-info:list \
             resource \"whoami\" in API group \"{G}\" at the cluster scope"
        ),
        json!({"group": G, "kind": "whoami"}),
    );
    assert_forbidden(
        &c.get(
            &alice,
            &whoami(),
            &[
                ("Impersonate-User", "dave"),
                ("Impersonate-Group", "admins"),
            ],
        )
        .await,
        "users.authentication.k8s.io \"dave\" is forbidden: User \"alice\" cannot \
         impersonate:user-info resource \"users\" in API group \"authentication.k8s.io\" at the \
         cluster scope",
        json!({"name": "dave", "group": "authentication.k8s.io", "kind": "users"}),
    );
    assert_forbidden(
        &c.get(
            &alice,
            &whoami(),
            &[("Impersonate-User", "system:serviceaccount:ns:builder")],
        )
        .await,
        "serviceaccounts.authentication.k8s.io \"builder\" is forbidden: User \"alice\" cannot \
         impersonate:serviceaccount resource \"serviceaccounts\" in API group \
         \"authentication.k8s.io\" in the namespace \"ns\"",
        json!({"name": "builder", "group": "authentication.k8s.io", "kind": "serviceaccounts"}),
    );

    // With it: the backend and the delegate see dave; the request is authorized as dave.
    let as_dave = [("Impersonate-User", "dave"), ("Impersonate-Group", "ops")];
    let (code, seen) = c.get(&alice, &whoami(), &as_dave).await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["user"], "dave", "{seen}");
    assert_eq!(
        seen["groups"],
        json!(["ops", "system:authenticated"]),
        "{seen}"
    );
    let (code, seen) = c.get(&alice, "/debug/whoami", &as_dave).await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(
        (&seen["user"], &seen["impersonatedBy"]),
        (&json!("dave"), &json!(apiagg_tests::trust::APIAGG_USER)),
        "{seen}"
    );
    // Issue 46, item 2: a group sent 200 times is one check; more than 64 distinct values
    // are a 431 before any review is asked.
    let before = reviews(&c).await;
    let mut repeated = as_dave.to_vec();
    repeated.extend(std::iter::repeat_n(("Impersonate-Group", "ops"), 200));
    let (code, seen) = c.get(&alice, &whoami(), &repeated).await;
    assert_eq!((code, &seen["user"]), (200, &json!("dave")), "{seen}");
    let groups: Vec<String> = (0..70).map(|i| format!("g{i}")).collect();
    let mut many = vec![("Impersonate-User", "dave")];
    many.extend(groups.iter().map(|g| ("Impersonate-Group", g.as_str())));
    let asked = reviews(&c).await;
    let (code, refused) = c.get(&alice, &whoami(), &many).await;
    assert_eq!(code, 431, "{refused}");
    assert_eq!(
        refused["reason"], "RequestHeaderFieldsTooLarge",
        "{refused}"
    );
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("limit of 64")),
        "{refused}"
    );
    assert_eq!(
        reviews(&c).await,
        asked,
        "no review for a refused impersonation"
    );
    assert!(reviews(&c).await >= before);

    // dave may not list flunders, although alice may.
    let list = format!("/apis/{G}/{V}/namespaces/default/flunders");
    assert_eq!(c.get(&alice, &list, &[]).await.0, 200);
    assert_forbidden(
        &c.get(&alice, &list, &as_dave).await,
        &format!(
            "flunders.{G} is forbidden: User \"dave\" cannot list resource \"flunders\" in API \
             group \"{G}\" in the namespace \"default\""
        ),
        json!({"group": G, "kind": "flunders"}),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_version_are_open_without_a_review() {
    let c = cluster("{mode: Webhook}").await;
    let anonymous = c.client(None);
    let before = reviews(&c).await;
    for path in [
        "/livez",
        "/readyz",
        "/healthz",
        "/livez/ping",
        "/readyz/ping",
        "/version",
    ] {
        let (code, body) = c.get(&anonymous, path, &[]).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (_, version) = c.get(&anonymous, "/version", &[]).await;
    assert_eq!(version["major"], "1", "{version}");
    assert_eq!(
        reviews(&c).await,
        before,
        "health and version were reviewed"
    );
}

/// A kubeconfig for apiagg with a client certificate.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_the_forbidden_error() {
    let c = cluster("{mode: Webhook}").await;
    let bob = c.kubeconfig(
        "bob.kubeconfig",
        &c.client_ca.client("bob", &["discoverers"]),
    );
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(&bob).stdin(Stdio::null());
    let (ok, stdout, stderr) = apiagg_tests::kubectl_output(command, &["get", "flunders"]);
    assert!(!ok, "{stdout}");
    let expected = format!(
        "Error from server (Forbidden): flunders.{G} is forbidden: User \"bob\" cannot list \
         resource \"flunders\" in API group \"{G}\" in the namespace \"default\""
    );
    assert!(stderr.contains(&expected), "{stderr}");

    let alice = c.kubeconfig(
        "alice.kubeconfig",
        &c.client_ca.client("alice", &["discoverers"]),
    );
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(&alice);
    let listed = apiagg_tests::kubectl_ok(command, &["get", "flunders", "-o", "name"]);
    assert!(!listed.contains("Forbidden"), "{listed}");
}
