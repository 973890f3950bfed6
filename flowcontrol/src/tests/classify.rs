//! Classification: the built-in configuration as kube-apiserver classifies typical requests,
//! and every subject and rule kind of a custom configuration.

use super::{builtin, classify, decide, objects};
use crate::{flow_hash, Distinguisher, Request};
use apiagg_requestinfo::RequestInfo;

const KUBELET: &str = "system:node:worker-1";
const NODE_GROUPS: [&str; 2] = ["system:nodes", "system:authenticated"];
const KCM: &str = "system:kube-controller-manager";
const KUBE_SYSTEM_SA: &str = "system:serviceaccount:kube-system:deployment-controller";
const SA_GROUPS: [&str; 3] = [
    "system:serviceaccounts",
    "system:serviceaccounts:kube-system",
    "system:authenticated",
];

/// `(user, groups, method, path, (flow schema, priority level))`
type Case<'a> = (&'a str, &'a [&'a str], &'a str, &'a str, (&'a str, &'a str));

fn pair(schema: &str, level: &str) -> (String, String) {
    (schema.to_string(), level.to_string())
}

#[test]
fn builtin_configuration_classifies_like_kube_apiserver() {
    let flow = builtin(600);
    let cases: &[Case] = &[
        // kubelet: its node and lease go high, the rest is "system".
        (
            KUBELET,
            &NODE_GROUPS,
            "GET",
            "/api/v1/namespaces/default/pods",
            ("system-nodes", "system"),
        ),
        (
            KUBELET,
            &NODE_GROUPS,
            "PATCH",
            "/api/v1/nodes/worker-1/status",
            ("system-node-high", "node-high"),
        ),
        (
            KUBELET,
            &NODE_GROUPS,
            "GET",
            "/api/v1/nodes/worker-1",
            ("system-node-high", "node-high"),
        ),
        (
            KUBELET,
            &NODE_GROUPS,
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/worker-1",
            ("system-node-high", "node-high"),
        ),
        (
            KUBELET,
            &NODE_GROUPS,
            "GET",
            "/metrics",
            ("system-nodes", "system"),
        ),
        // kube-controller-manager: leader election, then everything else (1.37 has no
        // `endpoint-controller` schema any more).
        (
            KCM,
            &["system:authenticated"],
            "GET",
            "/api/v1/pods",
            ("kube-controller-manager", "workload-high"),
        ),
        (
            KCM,
            &["system:authenticated"],
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager",
            ("system-leader-election", "leader-election"),
        ),
        (
            KCM,
            &["system:authenticated"],
            "PUT",
            "/api/v1/namespaces/default/endpoints/web",
            ("kube-controller-manager", "workload-high"),
        ),
        (
            "system:kube-scheduler",
            &["system:authenticated"],
            "POST",
            "/api/v1/namespaces/default/pods/p/binding",
            ("kube-scheduler", "workload-high"),
        ),
        // kube-system service accounts.
        (
            KUBE_SYSTEM_SA,
            &SA_GROUPS,
            "GET",
            "/apis/apps/v1/deployments",
            ("kube-system-service-accounts", "workload-high"),
        ),
        (
            KUBE_SYSTEM_SA,
            &SA_GROUPS,
            "PUT",
            "/api/v1/namespaces/team/configmaps/lock",
            ("kube-system-service-accounts", "workload-high"),
        ),
        (
            "system:serviceaccount:kube-system:endpoint-controller",
            &SA_GROUPS,
            "PUT",
            "/api/v1/namespaces/a/endpoints/b",
            ("kube-system-service-accounts", "workload-high"),
        ),
        // Any other service account.
        (
            "system:serviceaccount:default:app",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated",
            ],
            "GET",
            "/api/v1/namespaces/default/pods",
            ("service-accounts", "workload-low"),
        ),
        // People and anonymous callers.
        (
            "alice",
            &["system:authenticated"],
            "GET",
            "/api/v1/namespaces/default/pods",
            ("global-default", "global-default"),
        ),
        (
            "system:anonymous",
            &["system:unauthenticated"],
            "GET",
            "/apis",
            ("global-default", "global-default"),
        ),
        (
            "admin",
            &["system:masters", "system:authenticated"],
            "DELETE",
            "/api/v1/namespaces/x",
            ("exempt", "exempt"),
        ),
        // Probes are exempt for everyone, but only for GET.
        (
            "system:anonymous",
            &["system:unauthenticated"],
            "GET",
            "/healthz",
            ("probes", "exempt"),
        ),
        (
            "alice",
            &["system:authenticated"],
            "GET",
            "/readyz",
            ("probes", "exempt"),
        ),
        (
            "alice",
            &["system:authenticated"],
            "POST",
            "/healthz",
            ("global-default", "global-default"),
        ),
        (
            "alice",
            &["system:authenticated"],
            "GET",
            "/healthz/etcd",
            ("global-default", "global-default"),
        ),
        // A caller in no group at all matches nothing: catch-all, as a last resort.
        ("nobody", &[], "GET", "/api", ("catch-all", "catch-all")),
    ];
    for (user, groups, method, path, (schema, level)) in cases {
        let got = classify(&flow, user, groups, method, path);
        assert_eq!(got, pair(schema, level), "{user} {method} {path}");
    }
}

#[test]
fn decisions_carry_stable_uids_and_header_values() {
    let flow = builtin(600);
    let d = decide(&flow, "alice", &["system:authenticated"], "GET", "/api");
    assert_eq!(d.flow_schema_uid().len(), 36);
    assert_eq!(
        d.flow_schema_header().to_str().ok(),
        Some(d.flow_schema_uid())
    );
    assert_eq!(
        d.priority_level_header().to_str().ok(),
        Some(d.priority_level_uid())
    );
    let again = builtin(600);
    let e = decide(&again, "bob", &["system:authenticated"], "GET", "/api");
    assert_eq!(d.flow_schema_uid(), e.flow_schema_uid());
    // Schema and level of one name are different objects with different uids.
    assert_ne!(d.flow_schema_uid(), d.priority_level_uid());
}

const CUSTOM: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: lane}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: b-users}
spec:
  matchingPrecedence: 50
  priorityLevelConfiguration: {name: lane}
  rules:
  - subjects:
    - {kind: User, user: {name: carol}}
    - {kind: Group, group: {name: team}}
    - {kind: ServiceAccount, serviceAccount: {namespace: apps, name: "*"}}
    - {kind: ServiceAccount, serviceAccount: {namespace: ops, name: robot}}
    resourceRules:
    - verbs: [get, list]
      apiGroups: ["", apps]
      resources: [pods, pods/log, deployments]
      namespaces: [prod]
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: [nodes]
      clusterScope: true
    nonResourceRules:
    - verbs: [get]
      nonResourceURLs: [/version, "/debug/*"]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: a-same-precedence}
spec:
  matchingPrecedence: 50
  priorityLevelConfiguration: {name: global-default}
  rules:
  - subjects: [{kind: User, user: {name: dave}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

#[test]
fn every_subject_and_rule_kind_matches_as_upstream() {
    let flow = builtin(600);
    flow.configure(objects(CUSTOM)).expect("configure");
    let authn = ["system:authenticated"];
    let in_lane = |user: &str, groups: &[&str], method: &str, path: &str| {
        classify(&flow, user, groups, method, path).0 == "b-users"
    };
    // Subjects.
    assert!(in_lane(
        "carol",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods"
    ));
    assert!(in_lane(
        "erin",
        &["team"],
        "GET",
        "/api/v1/namespaces/prod/pods"
    ));
    assert!(in_lane(
        "system:serviceaccount:apps:any",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods"
    ));
    assert!(in_lane(
        "system:serviceaccount:ops:robot",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods"
    ));
    assert!(!in_lane(
        "system:serviceaccount:ops:other",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods"
    ));
    assert!(!in_lane(
        "mallory",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods"
    ));
    // Verbs, groups, resources and subresources, namespaces.
    assert!(in_lane(
        "carol",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods/p1"
    ));
    assert!(!in_lane(
        "carol",
        &authn,
        "DELETE",
        "/api/v1/namespaces/prod/pods/p1"
    ));
    assert!(in_lane(
        "carol",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods/p1/log"
    ));
    assert!(!in_lane(
        "carol",
        &authn,
        "GET",
        "/api/v1/namespaces/prod/pods/p1/status"
    ));
    assert!(in_lane(
        "carol",
        &authn,
        "GET",
        "/apis/apps/v1/namespaces/prod/deployments"
    ));
    assert!(!in_lane(
        "carol",
        &authn,
        "GET",
        "/apis/batch/v1/namespaces/prod/jobs"
    ));
    assert!(!in_lane(
        "carol",
        &authn,
        "GET",
        "/api/v1/namespaces/dev/pods"
    ));
    // Cluster scope: only the rule that allows it.
    assert!(in_lane("carol", &authn, "DELETE", "/api/v1/nodes/n1"));
    assert!(!in_lane("carol", &authn, "GET", "/api/v1/pods"));
    // Non-resource URLs: exact and prefix.
    assert!(in_lane("carol", &authn, "GET", "/version"));
    assert!(in_lane("carol", &authn, "GET", "/debug/pprof/heap"));
    assert!(!in_lane("carol", &authn, "GET", "/debug"));
    assert!(!in_lane("carol", &authn, "POST", "/version"));
    // Equal precedence: the name decides ("a-…" before "b-…").
    assert_eq!(
        classify(&flow, "dave", &["team"], "GET", "/version").0,
        "a-same-precedence"
    );
    // The built-in exempt schema (precedence 1) still comes first.
    assert_eq!(
        classify(&flow, "carol", &["system:masters"], "GET", "/version").0,
        "exempt"
    );
}

#[test]
fn distinguishers_pick_the_user_or_the_namespace() {
    let info = RequestInfo::new("GET", "/api/v1/namespaces/ns1/pods", None).expect("info");
    let groups = vec![];
    let request = Request {
        user: "alice",
        groups: &groups,
        info: &info,
    };
    assert_eq!(Distinguisher::ByUser.of(&request), "alice");
    assert_eq!(Distinguisher::ByNamespace.of(&request), "ns1");
    assert_eq!(Distinguisher::None.of(&request), "");
    let cluster = RequestInfo::new("GET", "/api/v1/nodes", None).expect("info");
    let request = Request {
        info: &cluster,
        ..request
    };
    assert_eq!(Distinguisher::ByNamespace.of(&request), "");
    // Flows of one schema differ by distinguisher, and the same flow differs by schema.
    assert_ne!(flow_hash("s", "alice"), flow_hash("s", "bob"));
    assert_ne!(flow_hash("s1", "alice"), flow_hash("s2", "alice"));
    assert_ne!(flow_hash("ab", ""), flow_hash("a", "b"));
}
