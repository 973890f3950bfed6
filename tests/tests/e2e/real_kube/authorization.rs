//! Differential authorization: apiagg deciding at its door with its own RBAC authorizer
//! (`--authorization-config`: one `RBAC` authorizer over the cluster's Roles and bindings) and
//! kube-apiserver's SubjectAccessReview, on the same identities and request attributes.
//!
//! Each row is a request sent through apiagg by the admin impersonating a caller (or by an
//! anonymous client): apiagg's decision and reason are read from its audit event (the
//! `authorization.k8s.io/decision` and `…/reason` annotations, as kube-apiserver writes them)
//! and compared with kube-apiserver's answer to a SubjectAccessReview of the identity
//! kube-apiserver itself gives that impersonation (its SelfSubjectReview).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use apiagg_tests::real_kube::{Front, RealKube};
use apiagg_tests::wait_until;
use serde_json::{json, Value};

/// The chain at apiagg's door: `system:masters`, then the cluster's RBAC.
const RBAC_CHAIN: &str =
    "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n\
    authorizers:\n- type: RBAC\n  name: rbac\n";
/// Every request audited at `Metadata`: the decision annotations are on each event.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
    omitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

mod table;

use table::{attributes, grants, request, targets, Caller, Target, CALLERS, NAMESPACES, RBAC};

/// A client and the headers each of its requests carries.
type As = (reqwest::Client, reqwest::header::HeaderMap);

/// The admin's client with the `Impersonate-*` headers of `caller` (set on each request:
/// reqwest's default headers keep one value of a repeated header), or a client without
/// credentials for `system:anonymous`.
fn client_as(kube: &RealKube, (user, groups): Caller) -> As {
    let mut headers = reqwest::header::HeaderMap::new();
    if user == "system:anonymous" {
        return (kube.client(None), headers);
    }
    headers.insert("impersonate-user", user.parse().expect("user"));
    for group in groups {
        headers.append("impersonate-group", group.parse().expect("group"));
    }
    (kube.client(Some(&kube.admin)), headers)
}

/// The identity kube-apiserver gives `caller` (its SelfSubjectReview): user name and groups.
/// The anonymous user may not ask: its identity is kube-apiserver's anonymous authenticator's.
async fn identity_at_kube(kube: &RealKube, caller: Caller) -> (String, Vec<String>) {
    if caller.0 == "system:anonymous" {
        return (
            caller.0.to_string(),
            vec!["system:unauthenticated".to_string()],
        );
    }
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let url = kube.kube_url("/apis/authentication.k8s.io/v1/selfsubjectreviews");
    let (client, headers) = client_as(kube, caller);
    let sent = client
        .post(&url)
        .headers(headers)
        .json(&review)
        .send()
        .await;
    let answer = sent.expect("SelfSubjectReview");
    let code = answer.status().as_u16();
    let answer: Value = answer.json().await.expect("SelfSubjectReview's answer");
    assert_eq!(code, 201, "SelfSubjectReview of {caller:?}: {answer}");
    user_info(&answer["status"]["userInfo"])
}

fn user_info(info: &Value) -> (String, Vec<String>) {
    let groups = info["groups"].as_array().into_iter().flatten();
    let groups = groups
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    (
        info["username"].as_str().unwrap_or_default().to_string(),
        groups,
    )
}

/// kube-apiserver's SubjectAccessReview answer for `identity`: allowed, and the reason.
async fn review_at_kube(
    kube: &RealKube,
    identity: &(String, Vec<String>),
    verb: &str,
    target: &Target,
) -> (bool, String) {
    let mut spec = attributes(verb, target);
    spec["user"] = json!(identity.0);
    spec["groups"] = json!(identity.1);
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
    let (code, answer) = kube
        .admin(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            Some(review),
        )
        .await;
    assert_eq!(code, 201, "SubjectAccessReview: {answer}");
    let status = &answer["status"];
    (
        status["allowed"] == true,
        status["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// An identity: user name and groups.
type Identity = (String, Vec<String>);

/// apiagg's decision at its door: allowed, the reason, and the identity decided for.
type Decided = (bool, String, Identity);

/// apiagg's audit events so far, by audit ID: decision, reason, and the identity decided for
/// (the impersonated user when there is one).
fn door_decisions(front: &Front) -> HashMap<String, Decided> {
    let log = std::fs::read_to_string(front.gw.dir.path().join("audit.log")).unwrap_or_default();
    let mut decided = HashMap::new();
    for event in log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
    {
        let annotations = &event["annotations"];
        let Some(decision) = annotations["authorization.k8s.io/decision"].as_str() else {
            continue;
        };
        let reason = annotations["authorization.k8s.io/reason"]
            .as_str()
            .unwrap_or_default();
        let who = match event["impersonatedUser"].is_object() {
            true => user_info(&event["impersonatedUser"]),
            false => user_info(&event["user"]),
        };
        let id = event["auditID"].as_str().unwrap_or_default().to_string();
        decided.insert(id, (decision == "allow", reason.to_string(), who));
    }
    decided
}

/// Sends `verb` on `target` through apiagg as `client`: the answer's audit ID (none for the
/// health endpoints, which apiagg answers to everybody before auditing).
async fn through_apiagg(
    front: &Front,
    (client, headers): &As,
    verb: &str,
    target: &Target,
) -> Option<String> {
    let (method, path, body) = request(verb, target);
    let mut sent = client
        .request(method, front.url(&path))
        .headers(headers.clone());
    if let Some(body) = body {
        let kind = match verb {
            "patch" => "application/merge-patch+json",
            _ => "application/json",
        };
        sent = sent.header("content-type", kind).body(body);
    }
    let answer = (sent.send().await).unwrap_or_else(|e| panic!("{verb} {path}: {e}"));
    let id = answer.headers().get("audit-id");
    let id = id.map(|v| v.to_str().unwrap_or_default().to_string());
    let health = ["/healthz", "/livez", "/readyz"].contains(&path.as_str());
    assert!(
        id.is_some() != health,
        "{verb} {path}: Audit-Id {id:?} ({})",
        answer.status()
    );
    id
}

/// Waits until apiagg's audit log holds the events of `ids`; their decisions.
async fn decisions_of(front: &Front, ids: &[String]) -> HashMap<String, Decided> {
    wait_until(
        "apiagg's audit log to hold every row's event",
        Duration::from_secs(20),
        || async { door_decisions(front) },
        |decided| ids.iter().all(|id| decided.contains_key(id)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiaggs_rbac_decides_as_kube_apiservers_subject_access_review() {
    let kube = RealKube::shared().await;
    for ns in NAMESPACES {
        kube.namespace(ns).await;
    }
    for (collection, object) in grants() {
        kube.create(&collection, object).await;
    }
    let files = [
        ("authorization.yaml", RBAC_CHAIN),
        ("audit-policy.yaml", AUDIT_POLICY),
    ];
    let args = [
        "--authorization-config",
        "{dir}/authorization.yaml",
        "--audit-policy-file",
        "{dir}/audit-policy.yaml",
        "--audit-log-path",
        "{dir}/audit.log",
    ];
    let front = kube.apiagg_configured(None, &[], &files, &args).await;
    let began = Instant::now();
    let targets = targets();
    let mut rows = Vec::new();
    for caller in CALLERS {
        let identity = identity_at_kube(kube, caller).await;
        let client = client_as(kube, caller);
        for (verb, target) in &targets {
            let id = through_apiagg(&front, &client, verb, target).await;
            let theirs = review_at_kube(kube, &identity, verb, target).await;
            rows.push((identity.clone(), *verb, target.clone(), id, theirs));
        }
    }
    let ids: Vec<String> = rows.iter().filter_map(|row| row.3.clone()).collect();
    let decided = decisions_of(&front, &ids).await;
    let (mut differ, mut allowed, mut open) = (Vec::new(), 0, 0);
    for (identity, verb, target, id, theirs) in &rows {
        allowed += usize::from(theirs.0);
        let Some(id) = id else {
            // A health endpoint: open to everybody at apiagg, as the cluster's
            // system:public-info-viewer binding opens it at kube-apiserver.
            open += 1;
            if !theirs.0 {
                differ.push(format!("{identity:?} {verb} {target:?}: kube-apiserver refuses {theirs:?}, apiagg opens it"));
            }
            continue;
        };
        let (ours_allowed, ours_reason, who) = &decided[id];
        // `/version` is open to all at apiagg without a review (no reason), as the cluster's
        // system:public-info-viewer binding opens it at kube-apiserver.
        let open = matches!(target, Target::Path("/version"));
        let reason_differs = ours_reason != &theirs.1 && !(open && ours_reason.is_empty());
        if *ours_allowed != theirs.0 || reason_differs || who != identity {
            differ.push(format!(
                "{identity:?} {verb} {target:?}: kube-apiserver {theirs:?}, apiagg ({ours_allowed}, {ours_reason:?}) as {who:?}"
            ));
        }
    }
    eprintln!(
        "{} rows ({allowed} allowed by kube-apiserver, {open} health checks open at apiagg), {} differ, in {:?}",
        rows.len(),
        differ.len(),
        began.elapsed()
    );
    assert!(rows.len() >= 200, "{} rows", rows.len());
    assert!(
        differ.is_empty(),
        "decisions differ:\n{}",
        differ.join("\n")
    );
    revoked_binding_stops_granting(kube, &front).await;
}

/// A RoleBinding deleted at kube-apiserver: how long until apiagg's door and kube-apiserver's
/// SubjectAccessReview stop granting it.
async fn revoked_binding_stops_granting(kube: &RealKube, front: &Front) {
    let alice: Caller = ("alice", &[]);
    let client = client_as(kube, alice);
    let target = Target::Resource("", "v1", "pods", "", Some("authz-a"), None);
    let identity = identity_at_kube(kube, alice).await;
    let id = through_apiagg(front, &client, "list", &target)
        .await
        .expect("id");
    let before = decisions_of(front, std::slice::from_ref(&id)).await;
    assert!(
        before[&id].0,
        "alice lists pods in authz-a before: {:?}",
        before[&id]
    );
    let binding = format!("{RBAC}/namespaces/authz-a/rolebindings/alice-pods");
    let deleted = Instant::now();
    let (code, answer) = kube.admin("DELETE", &binding, None).await;
    assert_eq!(code, 200, "delete {binding}: {answer}");
    let mut sent = Vec::new();
    let ours = loop {
        let id = through_apiagg(front, &client, "list", &target)
            .await
            .expect("id");
        sent.push((deleted.elapsed(), id));
        let decided = door_decisions(front);
        let refused = sent
            .iter()
            .find(|(_, id)| decided.get(id).is_some_and(|d| !d.0));
        if refused.is_some() {
            let ids: Vec<String> = sent.iter().map(|(_, id)| id.clone()).collect();
            let decided = decisions_of(front, &ids).await;
            let first = sent.iter().find(|(_, id)| !decided[id].0);
            break first.map(|(at, _)| *at).unwrap_or_default();
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(30),
            "apiagg still grants after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let theirs = wait_until(
        "kube-apiserver's RBAC to stop granting the deleted binding",
        Duration::from_secs(30),
        || async {
            (
                review_at_kube(kube, &identity, "list", &target).await,
                deleted.elapsed(),
            )
        },
        |((allowed, _), _)| !allowed,
    )
    .await
    .1;
    eprintln!("deleted RoleBinding: apiagg stops granting after {ours:?}, kube-apiserver after at most {theirs:?}");
    assert!(
        ours < Duration::from_secs(5),
        "apiagg granted the deleted binding for {ours:?}"
    );
}

/// Hostile row: a caller who may not impersonate asks for the admin's identity on a path open
/// to everybody (`/version`). kube-apiserver checks impersonation on every path and refuses
/// it; so does apiagg (it skipped the check there before), so the headers never act as the
/// admin anywhere behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_on_an_open_path_is_checked_as_kube_apiserver_checks_it() {
    let kube = RealKube::shared().await;
    let files = [("authorization.yaml", RBAC_CHAIN)];
    let args = ["--authorization-config", "{dir}/authorization.yaml"];
    let front = kube.apiagg_configured(None, &[], &files, &args).await;
    let mallory = kube.client(Some(&kube.client_ca.client("mallory", &[])));
    let mut answers = Vec::new();
    for url in [kube.kube_url("/version"), front.url("/version")] {
        let answer = mallory
            .get(&url)
            .header("Impersonate-User", "admin")
            .header("Impersonate-Group", "system:masters")
            .send()
            .await
            .expect(&url);
        let code = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        answers.push((code, body["reason"].clone(), body["message"].clone()));
    }
    eprintln!(
        "impersonation on /version: kube-apiserver {:?}, apiagg {:?}",
        answers[0], answers[1]
    );
    // Both refuse with a 403 Forbidden; the message names another first check (kube-apiserver
    // 1.37 asks `impersonate-on` the path first, apiagg the impersonated names first:
    // docs/differences-from-kube-aggregator.md).
    assert_eq!(answers[0].0, 403, "{answers:?}");
    assert_eq!(
        (answers[0].0, &answers[0].1),
        (answers[1].0, &answers[1].1),
        "kube-apiserver, then apiagg"
    );
    // Without the headers, /version is open to the same caller at both.
    for url in [kube.kube_url("/version"), front.url("/version")] {
        let code = mallory.get(&url).send().await.expect(&url).status();
        assert_eq!(code.as_u16(), 200, "{url}");
    }
}
