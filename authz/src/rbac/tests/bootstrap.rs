//! Upstream's bootstrap policy (`tests/testdata/rbac`) as the cluster's objects, and the
//! decisions it gives.

use super::super::{allowed_subjects, PolicyCounts};
use super::*;

const AUTHENTICATED: &str = "system:authenticated";
const SA_GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:kube-system",
    AUTHENTICATED,
];

fn anonymous() -> User {
    user("system:anonymous", &["system:unauthenticated"])
}

fn alice() -> User {
    user("alice", &[AUTHENTICATED])
}

fn controller(name: &str) -> User {
    user(
        &format!("system:serviceaccount:kube-system:{name}"),
        &SA_GROUPS,
    )
}

fn scheduler() -> User {
    user("system:kube-scheduler", &[AUTHENTICATED])
}

/// (who, request, allowed, why)
#[rustfmt::skip]
fn rows() -> Vec<(User, Attributes, bool, &'static str)> {
    vec![
        (anonymous(), url("get", "/healthz"), true, "public-info-viewer binds system:unauthenticated"),
        (anonymous(), url("get", "/version"), true, "public-info-viewer"),
        (anonymous(), url("get", "/version/"), true, "public-info-viewer lists /version/ too"),
        (anonymous(), url("get", "/readyz"), true, "public-info-viewer"),
        (anonymous(), url("get", "/livez"), true, "public-info-viewer"),
        (anonymous(), url("get", "/readyz/etcd"), false, "/readyz is exact, not a prefix"),
        (anonymous(), url("post", "/healthz"), false, "only get"),
        (anonymous(), url("get", "/api"), false, "system:discovery binds authenticated users only"),
        (anonymous(), resource("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", ""), false, "basic-user binds authenticated users only"),
        (alice(), resource("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", ""), true, "system:basic-user"),
        (alice(), resource("create", "authentication.k8s.io", "selfsubjectreviews", "", ""), true, "system:basic-user"),
        (alice(), url("get", "/apis/apps/v1"), true, "system:discovery has /apis/*"),
        (alice(), url("get", "/openapi/v3"), true, "system:discovery has /openapi/*"),
        (alice(), resource("list", "", "secrets", "default", ""), false, "no binding grants secrets"),
        (alice(), url("get", "/metrics"), false, "system:monitoring exists but these bindings do not bind it"),
        (scheduler(), resource("create", "", "pods/binding", "default", "p"), true, "system:kube-scheduler binds pods"),
        (scheduler(), resource("create", "", "pods", "default", ""), false, "the scheduler does not create pods"),
        (scheduler(), resource("patch", "", "persistentvolumes", "", "pv1"), true, "system:volume-scheduler"),
        (scheduler(), resource("update", "coordination.k8s.io", "leases", "default", "kube-scheduler"), true, "its own lease, by name"),
        (scheduler(), resource("update", "coordination.k8s.io", "leases", "default", "other"), false, "another lease, outside kube-system"),
        (scheduler(), resource("update", "coordination.k8s.io", "leases", "kube-system", "other"), true, "the leader-locking RoleBinding in kube-system"),
        (user("system:kube-controller-manager", &[AUTHENTICATED]), resource("list", "example.com", "widgets", "", ""), true, "list and watch of */*"),
        (user("system:kube-controller-manager", &[AUTHENTICATED]), resource("delete", "", "pods", "default", "p"), false, "the controllers' own accounts delete pods"),
        (user("system:node:n1", &["system:nodes", AUTHENTICATED]), resource("get", "", "pods", "default", "p"), false, "system:node is bound to nobody"),
        (user("system:node:n1", &["system:nodes", AUTHENTICATED]), url("get", "/healthz"), true, "authenticated"),
        (user("bob", &["system:masters", AUTHENTICATED]), resource("delete", "", "nodes", "", "n1"), true, "cluster-admin"),
        (user("bob", &["system:masters", AUTHENTICATED]), url("put", "/any/path"), true, "cluster-admin has nonResourceURLs *"),
        (controller("deployment-controller"), resource("update", "apps", "replicasets", "default", "rs"), true, "controller ClusterRoleBinding to its ServiceAccount"),
        (controller("deployment-controller"), resource("delete", "apps", "deployments", "default", "d"), false, "deployments: get, list, update, watch"),
        (user("system:serviceaccount:default:deployment-controller", &["system:serviceaccounts", AUTHENTICATED]), resource("update", "apps", "replicasets", "default", "rs"), false, "same name, another namespace"),
        (controller("disruption-controller"), resource("get", "apps", "deployments/scale", "default", "d"), true, "*/scale"),
        (controller("disruption-controller"), resource("update", "apps", "deployments/scale", "default", "d"), false, "get only"),
        (controller("horizontal-pod-autoscaler"), resource("update", "apps", "statefulsets/scale", "default", "s"), true, "*/scale get and update"),
        (controller("namespace-controller"), resource("deletecollection", "", "configmaps", "gone", ""), true, "*/* deletecollection"),
        (controller("generic-garbage-collector"), resource("patch", "example.com", "widgets", "ns", "w"), true, "*/*"),
        (controller("bootstrap-signer"), resource("update", "", "configmaps", "kube-public", "cluster-info"), true, "RoleBinding in kube-public, by name"),
        (controller("bootstrap-signer"), resource("update", "", "configmaps", "kube-public", "other"), false, "another name"),
        (controller("bootstrap-signer"), resource("get", "", "secrets", "kube-system", "s"), true, "RoleBinding in kube-system"),
        (controller("bootstrap-signer"), resource("get", "", "secrets", "kube-public", "s"), false, "the kube-public Role has no secrets"),
        (controller("kube-dns"), resource("list", "", "services", "", ""), true, "system:kube-dns"),
        (controller("certificate-controller"), resource("sign", "certificates.k8s.io", "signers", "", "kubernetes.io/kubelet-serving"), true, "a listed signer"),
        (controller("certificate-controller"), resource("sign", "certificates.k8s.io", "signers", "", "example.com/custom"), false, "an unlisted signer"),
        (controller("legacy-service-account-token-cleaner"), resource("get", "", "configmaps", "kube-system", "kube-apiserver-legacy-service-account-token-tracking"), true, "by name"),
        (controller("legacy-service-account-token-cleaner"), resource("list", "", "configmaps", "kube-system", ""), false, "resourceNames: a list has no name"),
    ]
}

#[test]
fn bootstrap_policy_decisions() {
    let policy = bootstrap_builder().snapshot();
    for (who, request, expected, why) in rows() {
        let decision = decide(&policy, &who, &request);
        assert_eq!(
            decision.allowed(),
            expected,
            "{} {:?}: {why}; got {decision:?}",
            who.name,
            request
        );
        if !expected {
            // Every binding of the bootstrap policy resolves: no errors to report.
            assert_eq!(decision, Decision::NoOpinion(String::new()), "{why}");
        }
    }
}

#[test]
fn bootstrap_reasons_name_the_grant() {
    let policy = bootstrap_builder().snapshot();
    let reason =
        |who: &User, request: &Attributes| decide(&policy, who, request).reason().to_string();
    assert_eq!(
        reason(&anonymous(), &url("get", "/healthz")),
        r#"RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole "system:public-info-viewer" to Group "system:unauthenticated""#
    );
    assert_eq!(
        reason(
            &controller("deployment-controller"),
            &resource("update", "apps", "replicasets", "default", "rs")
        ),
        r#"RBAC: allowed by ClusterRoleBinding "system:controller:deployment-controller" of ClusterRole "system:controller:deployment-controller" to ServiceAccount "deployment-controller/kube-system""#
    );
    assert_eq!(
        reason(
            &scheduler(),
            &resource(
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-system",
                "other"
            )
        ),
        r#"RBAC: allowed by RoleBinding "system::leader-locking-kube-scheduler/kube-system" of Role "system::leader-locking-kube-scheduler" to User "system:kube-scheduler""#
    );
}

#[test]
fn bootstrap_counts_and_who_can() {
    let policy = bootstrap_builder().snapshot();
    assert_eq!(
        policy.counts(),
        PolicyCounts {
            roles: 7,
            cluster_roles: 31 + 38,
            role_bindings: 7,
            cluster_role_bindings: 10 + 38,
        }
    );
    // Who may bind pods: system:masters, the daemon set controller and the scheduler
    // (bindings in name order).
    let bind = resource("create", "", "pods/binding", "default", "p");
    let who: Vec<String> = allowed_subjects(&policy, &bind)
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        who,
        [
            "system:masters",
            "daemon-set-controller",
            "system:kube-scheduler"
        ]
    );
}

/// The index must give the scan's answer for every user and request of the table, crossed.
#[test]
fn bootstrap_index_agrees_with_a_full_scan() {
    let policy = bootstrap_builder().snapshot();
    let rows = rows();
    for (who, _, _, _) in &rows {
        for (_, request, _, _) in &rows {
            decide(&policy, who, request);
        }
    }
}
