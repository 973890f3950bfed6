//! Structured authorization (`--authorization-config`): a chain `Webhook(match: service
//! accounts) → RBAC → AlwaysDeny` deciding for kubectl as three users, the delegate's RBAC
//! objects (kube-apiserver's bootstrap policy plus the test's grants) followed live, reloads
//! of the file, failure policies with a webhook that hangs, and RBAC deciding through a
//! delegate outage. Every row is asserted on what the backend and the delegate received.

use std::process::{Command, Stdio};
use std::time::Duration;

use apiagg_tests::rbac::{bootstrap_objects, cluster_grant, role_binding, RbacWriter};
use apiagg_tests::trust::{Cluster, Setup, AUTHORIZATION_CONFIG};
use apiagg_tests::{answer_code, wait_until, G, V};
use serde_json::{json, Value};

/// Where the webhook (the delegate here) is asked.
const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// apiagg's token at the delegate (a cluster admin writes the RBAC objects with it).
const ADMIN_TOKEN: &str = "apiagg-token-1";
/// The service account the webhook decides for.
const ROBOT: &str = "system:serviceaccount:team:robot";

/// The webhook's policy: the robot may do anything in the sample group (bob is added by the
/// reload test).
fn webhook_policy(users: &[&str]) -> String {
    json!({"rules": [{"users": users, "verbs": ["*"], "apiGroups": [G], "resources": ["*"]}]})
        .to_string()
}

/// The chain of the issue: service accounts by the webhook, everybody by RBAC, then deny.
fn chain(matching: &str, failure: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n\
         - type: Webhook\n  name: service-accounts\n  webhook:\n    timeout: 3s\n    \
         subjectAccessReviewVersion: v1\n    matchConditionSubjectAccessReviewVersion: v1\n    \
         failurePolicy: {failure}\n    connectionInfo: {{type: InClusterConfig}}\n    \
         matchConditions:\n    - expression: \"{matching}\"\n\
         - type: RBAC\n  name: rbac\n- type: AlwaysDeny\n  name: alwaysdeny\n"
    )
}

const SERVICE_ACCOUNTS: &str = "request.user.startsWith('system:serviceaccount:')";

/// Reads flunders in `default`.
fn flunder_reader() -> [Value; 2] {
    cluster_grant(
        "flunder-reader",
        json!({"kind": "User", "name": "alice"}),
        json!([{"apiGroups": [G], "resources": ["flunders"], "verbs": ["get", "list", "watch"]}]),
    )
}

fn flunders() -> String {
    format!("/apis/{G}/{V}/namespaces/default/flunders")
}

/// A cluster running `config`, its delegate serving the bootstrap policy and `grants`.
async fn cluster(config: &str, policy: &str, grants: &[Value]) -> Cluster {
    let c = Cluster::start_setup(Setup {
        authorization_config: Some(config),
        policy: Some(policy),
        cluster_objects: true,
        ..Setup::default()
    })
    .await;
    let writer = RbacWriter::new(&c.delegate, ADMIN_TOKEN);
    writer
        .create_all(&bootstrap_objects(&[
            "cluster-roles.yaml",
            "cluster-role-bindings.yaml",
        ]))
        .await;
    // The monitoring role is in the bootstrap policy; the test's Prometheus gets it bound.
    let monitoring = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:monitoring"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:monitoring"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:monitoring"}]});
    writer.create(&monitoring).await;
    writer.create_all(grants).await;
    // apiagg learns the objects through its watch of the delegate: the test reads /metrics
    // (as a member of system:monitoring) only once the binding reached it.
    let monitor = c.client(Some(
        &c.client_ca.client("prometheus", &["system:monitoring"]),
    ));
    wait_until(
        "apiagg's RBAC to let system:monitoring read /metrics (the answer's code observed)",
        Duration::from_secs(20),
        || answer_code(monitor.get(c.url("/metrics"))),
        |code| *code == 200,
    )
    .await;
    c
}

fn caller(c: &Cluster, user: &str, groups: &[&str]) -> reqwest::Client {
    c.client(Some(&c.client_ca.client(user, groups)))
}

fn kubeconfig(c: &Cluster, user: &str, groups: &[&str]) -> std::path::PathBuf {
    let name = format!("{}.kubeconfig", user.replace(':', "-"));
    c.kubeconfig(&name, &c.client_ca.client(user, groups))
}

/// `kubectl get flunders` as `user`: whether it worked, and stderr.
fn kubectl_get(c: &Cluster, user: &str, groups: &[&str]) -> (bool, String) {
    let mut command = Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(kubeconfig(c, user, groups))
        .stdin(Stdio::null());
    let (ok, _, stderr) = apiagg_tests::kubectl_output(command, &["get", "flunders"]);
    (ok, stderr)
}

async fn code(c: &Cluster, client: &reqwest::Client, path: &str) -> u16 {
    c.get(client, path, &[]).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_rbac_and_deny_decide_for_three_kubectl_users() {
    let c = cluster(
        &chain(SERVICE_ACCOUNTS, "Deny"),
        &webhook_policy(&[ROBOT]),
        &flunder_reader(),
    )
    .await;

    // The service account: the webhook (the delegate's policy) allows it.
    let before = c.delegate.requests(REVIEWS).await;
    let (ok, stderr) = kubectl_get(&c, ROBOT, &["system:serviceaccounts"]);
    assert!(ok, "{stderr}");
    assert!(
        c.delegate.requests(REVIEWS).await > before,
        "the webhook was asked"
    );

    // alice: RBAC allows her (bootstrap discovery plus her grant); the webhook is never asked.
    let before = c.delegate.requests(REVIEWS).await;
    let (ok, stderr) = kubectl_get(&c, "alice", &[]);
    assert!(ok, "{stderr}");
    assert_eq!(
        c.delegate.requests(REVIEWS).await,
        before,
        "alice is not a service account"
    );
    assert!(
        c.metric_sum("apiserver_authorization_match_condition_exclusions_total")
            .await
            >= 1.0
    );

    // bob: nobody allows him; AlwaysDeny's reason ends the message.
    let listed = c.backend.requests(&flunders()).await;
    let (ok, stderr) = kubectl_get(&c, "bob", &[]);
    assert!(!ok);
    let expected = format!(
        "Error from server (Forbidden): flunders.{G} is forbidden: User \"bob\" cannot list \
         resource \"flunders\" in API group \"{G}\" in the namespace \"default\": Everything is \
         forbidden."
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(
        c.backend.requests(&flunders()).await,
        listed,
        "nothing reached the backend"
    );

    let list = flunders();
    // A grant to bob comes with the watch event, and goes at once with the delete.
    let bob = caller(&c, "bob", &[]);
    let writer = RbacWriter::new(&c.delegate, ADMIN_TOKEN);
    let binding = role_binding(
        "default",
        "bob-reads",
        "flunder-reader",
        json!({"kind": "User", "name": "bob"}),
    );
    writer.create(&binding).await;
    let limit = Duration::from_secs(5);
    wait_until(
        "bob allowed",
        limit,
        || code(&c, &bob, &list),
        |code| *code == 200,
    )
    .await;
    writer.delete(&binding).await;
    wait_until(
        "bob denied",
        Duration::from_secs(2),
        || code(&c, &bob, &list),
        |code| *code == 403,
    )
    .await;
    // The binding was in `default` only.
    let elsewhere = format!("/apis/{G}/{V}/namespaces/other/flunders");
    assert_eq!(
        code(&c, &caller(&c, "alice", &[]), &elsewhere).await,
        200,
        "a ClusterRoleBinding"
    );

    let listed = c.backend.requests(&list).await;
    // A group named by front-proxy headers on a connection without the proxy's certificate is
    // not bob's: a binding to it grants nothing, and the backend sees no request.
    writer
        .create_all(&cluster_grant(
            "admins-delete",
            json!({"kind": "Group", "name": "flunder-admins"}),
            json!([{"apiGroups": [G], "resources": ["flunders"], "verbs": ["*"]}]),
        ))
        .await;
    let smuggled = c
        .get(
            &bob,
            &flunders(),
            &[
                ("X-Remote-User", "alice"),
                ("X-Remote-Group", "flunder-admins"),
            ],
        )
        .await;
    assert_eq!(smuggled.0, 403, "{}", smuggled.1);
    assert_eq!(c.backend.requests(&flunders()).await, listed);

    // A query servers read differently (a `;` pair Go skips) is refused before anyone reads it.
    let alice = caller(&c, "alice", &[]);
    let twice = format!(
        "{}?fieldSelector=metadata.name%3Da;&fieldSelector=metadata.name%3Db",
        flunders()
    );
    assert_eq!(code(&c, &alice, &twice).await, 400);
    assert_eq!(c.backend.requests(&flunders()).await, listed);

    assert!(
        c.metric_sum("apiserver_authorization_decisions_total{decision=\"allowed\",name=\"rbac\",type=\"RBAC\"}")
            .await
            >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_chain_and_a_bad_file_keeps_it() {
    let c = cluster(
        &chain(SERVICE_ACCOUNTS, "Deny"),
        &webhook_policy(&[ROBOT, "bob"]),
        &[],
    )
    .await;
    let bob = caller(&c, "bob", &[]);
    let list = flunders();
    assert_eq!(code(&c, &bob, &list).await, 403);
    let file = c.dir.join(AUTHORIZATION_CONFIG);
    let reloads = "apiserver_authorization_config_controller_automatic_reloads_total";

    // The webhook now also decides for bob, whom its policy allows.
    let matching = "request.user == 'bob' || request.user.startsWith('system:serviceaccount:')";
    std::fs::write(&file, chain(matching, "Deny")).expect("rewrite");
    let limit = Duration::from_secs(5);
    wait_until(
        "bob allowed",
        limit,
        || code(&c, &bob, &list),
        |code| *code == 200,
    )
    .await;
    let ok = format!("{reloads}{{status=\"success\"}}");
    assert!(c.metric_sum(&ok).await >= 2.0, "start and reload");

    // A bad file is refused and counted; the chain before it keeps deciding.
    std::fs::write(&file, "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: RBAC\n  name: rbac\n  bogus: 1\n").expect("rewrite");
    let failed = format!("{reloads}{{status=\"failure\"}}");
    wait_until(
        "the failure counted",
        limit,
        || c.metric_sum(&failed),
        |n| *n >= 1.0,
    )
    .await;
    assert_eq!(code(&c, &bob, &flunders()).await, 200);
}

/// A webhook that accepts connections and never answers.
async fn hanging_webhook(c: &Cluster) -> (tokio::task::JoinHandle<()>, std::path::PathBuf) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let kubeconfig = c.dir.join("hanging-webhook.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: w\nclusters:\n- name: w\n  cluster: \
         {{server: \"http://127.0.0.1:{port}/authorize\"}}\nusers:\n- name: w\n  user: {{}}\n\
         contexts:\n- name: w\n  context: {{cluster: w, user: w}}\n"
    );
    std::fs::write(&kubeconfig, text).expect("kubeconfig");
    (task, kubeconfig)
}

/// A chain of the hanging webhook (for every caller but the test's Prometheus, and those
/// `conditions` select), then RBAC.
fn hanging_chain(kubeconfig: &std::path::Path, failure: &str, conditions: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n\
         - type: Webhook\n  name: hangs\n  webhook:\n    timeout: 1s\n    \
         subjectAccessReviewVersion: v1\n    matchConditionSubjectAccessReviewVersion: v1\n    \
         failurePolicy: {failure}\n    connectionInfo: {{type: KubeConfigFile, kubeConfigFile: \
         \"{}\"}}\n    matchConditions:\n    - expression: \"request.user != 'prometheus'\"\n\
         {conditions}- type: RBAC\n  name: rbac\n",
        kubeconfig.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_with_a_webhook_that_hangs() {
    // The chain is written once the hanging webhook listens (its kubeconfig names it).
    let c = cluster(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: RBAC\n  name: rbac\n",
        &webhook_policy(&[]),
        &flunder_reader(),
    )
    .await;
    let (_webhook, kubeconfig) = hanging_webhook(&c).await;
    let file = c.dir.join(AUTHORIZATION_CONFIG);
    let (alice, bob) = (caller(&c, "alice", &[]), caller(&c, "bob", &[]));
    let limit = Duration::from_secs(10);
    let list = flunders();

    // Each rewrite is waited for: the reload is counted before the next request.
    let reloads =
        "apiserver_authorization_config_controller_automatic_reloads_total{status=\"success\"}";
    let reload = |text: String, count: f64| {
        let (c, file) = (&c, &file);
        async move {
            std::fs::write(file, text).expect("rewrite");
            wait_until(
                "the reload",
                limit,
                || c.metric_sum(reloads),
                |n| *n >= count,
            )
            .await;
        }
    };

    // NoOpinion: after the timeout RBAC decides; alice is allowed, bob's request met an error
    // and nobody allowed it: 500, as upstream.
    reload(hanging_chain(&kubeconfig, "NoOpinion", ""), 2.0).await;
    let fail_open = "apiserver_authorization_webhook_evaluations_fail_open_total{name=\"hangs\",result=\"timeout\"}";
    let started = std::time::Instant::now();
    assert_eq!(code(&c, &alice, &list).await, 200);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the webhook's timeout was waited"
    );
    assert!(c.metric_sum(fail_open).await >= 1.0);
    let (status, body) = c.get(&bob, &list, &[]).await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("webhook \"hangs\""),
        "{body}"
    );

    // Deny: the same timeout is a 500 for alice too; nothing reaches the backend.
    let listed = c.backend.requests(&list).await;
    reload(hanging_chain(&kubeconfig, "Deny", ""), 3.0).await;
    assert_eq!(code(&c, &alice, &list).await, 500);
    assert_eq!(c.backend.requests(&list).await, listed);

    // A match condition that cannot be evaluated (a division by zero) follows the failure
    // policy without calling the webhook: Deny is a 500, and the error is counted.
    let calls = c
        .metric_sum("apiserver_authorization_webhook_evaluations_total")
        .await;
    let erring = "    - expression: \"1 / (request.user.size() - request.user.size()) == 1\"\n";
    reload(hanging_chain(&kubeconfig, "Deny", erring), 4.0).await;
    let errors = "apiserver_authorization_match_condition_evaluation_errors_total";
    assert_eq!(code(&c, &alice, &list).await, 500);
    assert!(c.metric_sum(errors).await >= 1.0);
    assert_eq!(
        c.metric_sum("apiserver_authorization_webhook_evaluations_total")
            .await,
        calls
    );
    assert_eq!(c.backend.requests(&list).await, listed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_keeps_deciding_while_the_delegate_is_away() {
    let c = cluster(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: RBAC\n  name: rbac\n",
        &webhook_policy(&[]),
        &flunder_reader(),
    )
    .await;
    let (alice, bob) = (caller(&c, "alice", &[]), caller(&c, "bob", &[]));
    let whoami = format!("/apis/{G}/{V}/whoami");
    let limit = Duration::from_secs(5);
    let reader = json!([{"apiGroups": [G], "resources": ["whoami"], "verbs": ["get", "list"]}]);
    let writer = RbacWriter::new(&c.delegate, ADMIN_TOKEN);
    writer
        .create_all(&cluster_grant(
            "whoami",
            json!({"kind": "User", "name": "alice"}),
            reader,
        ))
        .await;
    wait_until(
        "alice allowed",
        limit,
        || code(&c, &alice, &whoami),
        |code| *code == 200,
    )
    .await;

    // The delegate goes away: the last known grants keep deciding for the backend's requests.
    c.delegate.proc.signal("KILL");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        assert_eq!(code(&c, &alice, &whoami).await, 200);
        assert_eq!(code(&c, &bob, &whoami).await, 403);
    }
}

/// Security issue 42, finding 1: a chain holding `AlwaysAllow` never lends apiagg's own
/// `impersonate` right. Requests without credentials are refused beside it (kube-apiserver
/// turns anonymous authentication off), so no anonymous caller becomes `system:masters` at the
/// delegate; an impersonation only `AlwaysAllow` allowed is not honoured by apiagg: a caller
/// only apiagg authenticates gets 403, and neither the backend nor the delegate sees it; a
/// caller the delegate authenticates itself is sent with its own token, and the delegate
/// decides (the test delegate honours it: `impersonatedBy` is the caller, never apiagg).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_never_lends_apiaggs_impersonation() {
    use apiagg_tests::trust::{APIAGG_USER, REVIEWED_TOKEN, STATIC_TOKEN};
    let config = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n\
                  authorizers:\n- type: AlwaysAllow\n  name: alwaysallow\n";
    let c = Cluster::start_setup(Setup {
        anonymous: true,
        authorization_config: Some(config),
        ..Setup::default()
    })
    .await;
    let as_admin = [
        ("Impersonate-User", "admin"),
        ("Impersonate-Group", "system:masters"),
    ];
    let secrets = "/api/v1/namespaces/kube-system/secrets";
    let whoami = format!("/apis/{G}/{V}/whoami");
    let seen_before = (
        c.delegate.requests(secrets).await,
        c.delegate.requests("/debug/whoami").await,
        c.backend.requests(&whoami).await,
    );

    // Anonymous: 401 with the headers and without them.
    let anonymous = c.client(None);
    let (refused, body) = c.get(&anonymous, secrets, &as_admin).await;
    assert_eq!(refused, 401, "{body}");
    assert_eq!(c.get(&anonymous, secrets, &[]).await.0, 401);
    assert_eq!(
        code(&c, &anonymous, "/readyz").await,
        200,
        "health stays open"
    );

    // A token only apiagg knows (its token file) and a client certificate: 403, to the
    // delegate and to the backend alike.
    let certificate = caller(&c, "mallory", &[]);
    let static_token = format!("Bearer {STATIC_TOKEN}");
    for (who, client, auth) in [
        ("certificate", &certificate, None),
        ("token file", &anonymous, Some(static_token.as_str())),
    ] {
        for path in ["/debug/whoami", whoami.as_str(), secrets] {
            let mut headers = as_admin.to_vec();
            if let Some(auth) = auth {
                headers.push(("Authorization", auth));
            }
            let (refused, body) = c.get(client, path, &headers).await;
            assert_eq!(refused, 403, "{who} {path}: {body}");
        }
    }
    let seen_after = (
        c.delegate.requests(secrets).await,
        c.delegate.requests("/debug/whoami").await,
        c.backend.requests(&whoami).await,
    );
    assert_eq!(seen_before, seen_after, "nobody saw the refused requests");

    // A token the delegate reviews: it goes with that token, and the delegate decides.
    let reviewed = format!("Bearer {REVIEWED_TOKEN}");
    let mut headers = as_admin.to_vec();
    headers.push(("Authorization", &reviewed));
    let (answered, seen) = c.get(&anonymous, "/debug/whoami", &headers).await;
    assert_eq!(answered, 200, "{seen}");
    assert_eq!(seen["user"], "admin", "{seen}");
    assert_ne!(seen["impersonatedBy"], APIAGG_USER, "{seen}");
    assert_eq!(
        seen["impersonatedBy"], "system:serviceaccount:default:app",
        "the caller itself asked the delegate: {seen}"
    );
}
