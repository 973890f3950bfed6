//! The rows of the authorization differential: the callers, the verbs and targets, the
//! requests that ask them, and the Roles and bindings that decide them.

use serde_json::{json, Value};

pub(super) const NAMESPACES: [&str; 2] = ["authz-a", "authz-b"];
pub(super) const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// A caller: impersonated by the admin (`user` and `groups` as `Impersonate-*` headers), or,
/// for `system:anonymous`, a client without credentials.
pub(super) type Caller = (&'static str, &'static [&'static str]);

pub(super) const CALLERS: [Caller; 7] = [
    ("alice", &[]),
    ("Alice", &[]),
    ("bob", &["team-b"]),
    ("carol", &["team-c"]),
    (
        "system:serviceaccount:authz-a:robot",
        &["system:serviceaccounts", "system:serviceaccounts:authz-a"],
    ),
    ("dave", &["team-b-not"]),
    ("system:anonymous", &[]),
];

/// What a request asks: a verb on a resource (group, version, resource, subresource,
/// namespace, name) or on a non-resource path.
#[derive(Clone, Debug)]
pub(super) enum Target {
    Resource(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
    ),
    Path(&'static str),
}

/// The rows' verbs and targets, per namespace and cluster-wide.
pub(super) fn targets() -> Vec<(&'static str, Target)> {
    use Target::{Path, Resource};
    let mut all = Vec::new();
    for ns in NAMESPACES {
        let n = Some(ns);
        let one = |g, v, r, s, name| Resource(g, v, r, s, n, Some(name));
        let many = |g, v, r| Resource(g, v, r, "", n, None);
        for verb in ["get", "delete", "patch"] {
            all.push((verb, one("", "v1", "pods", "", "p1")));
        }
        for verb in ["list", "watch", "create"] {
            all.push((verb, many("", "v1", "pods")));
        }
        all.push(("get", one("", "v1", "pods", "log", "p1")));
        for verb in ["get", "update", "delete"] {
            all.push((verb, one("", "v1", "secrets", "", "s1")));
        }
        all.push(("get", one("", "v1", "secrets", "", "s2")));
        all.push(("list", many("", "v1", "secrets")));
        for verb in ["get", "patch"] {
            all.push((verb, one("", "v1", "configmaps", "", "c1")));
        }
        for verb in ["create", "deletecollection", "list"] {
            all.push((verb, many("", "v1", "configmaps")));
        }
        for verb in ["get", "patch"] {
            all.push((verb, one("apps", "v1", "deployments", "", "d1")));
        }
        for verb in ["list", "create"] {
            all.push((verb, many("apps", "v1", "deployments")));
        }
        for verb in ["get", "update"] {
            all.push((verb, one("apps", "v1", "deployments", "scale", "d1")));
        }
        let wardle = ("wardle.example.com", "v1alpha1");
        all.push(("get", one(wardle.0, wardle.1, "flunders", "", "f1")));
        for verb in ["list", "create", "watch"] {
            all.push((verb, many(wardle.0, wardle.1, "flunders")));
        }
        for verb in ["patch", "get"] {
            all.push((verb, one(wardle.0, wardle.1, "flunders", "status", "f1")));
        }
    }
    all.push((
        "get",
        Resource("", "v1", "namespaces", "", None, Some("authz-a")),
    ));
    all.push(("list", Resource("", "v1", "namespaces", "", None, None)));
    all.push(("list", Resource("", "v1", "nodes", "", None, None)));
    let role = Some("authz-diff-pod-reader");
    all.push((
        "get",
        Resource(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "",
            None,
            role,
        ),
    ));
    for path in [
        "/version",
        "/healthz",
        "/metrics",
        "/logs/kube-apiserver.log",
        "/logs",
        "/custom/exact",
        "/openapi/v2",
        "/api",
        "/apis/wardle.example.com",
    ] {
        all.push(("get", Path(path)));
    }
    all.push(("post", Path("/custom/exact")));
    all
}

/// The method, path and body of the request kube-apiserver's RequestInfo reads as `verb` on
/// `target`; writes are dry runs.
pub(super) fn request(
    verb: &str,
    target: &Target,
) -> (reqwest::Method, String, Option<&'static str>) {
    use reqwest::Method;
    let (path, written) = match target {
        Target::Path(path) => (path.to_string(), false),
        Target::Resource(group, version, resource, sub, namespace, name) => {
            let mut path = match *group {
                "" => format!("/api/{version}"),
                group => format!("/apis/{group}/{version}"),
            };
            if let Some(ns) = namespace {
                path += &format!("/namespaces/{ns}");
            }
            path += &format!("/{resource}");
            if let Some(name) = name {
                path += &format!("/{name}");
            }
            if !sub.is_empty() {
                path += &format!("/{sub}");
            }
            (path, true)
        }
    };
    let dry = |path: String| match written {
        true => format!("{path}?dryRun=All"),
        false => path,
    };
    match verb {
        "get" | "list" => (Method::GET, path, None),
        "watch" => (
            Method::GET,
            format!("{path}?watch=true&timeoutSeconds=1"),
            None,
        ),
        "create" | "post" => (Method::POST, dry(path), Some("{}")),
        "update" => (Method::PUT, dry(path), Some("{}")),
        "patch" => (Method::PATCH, dry(path), Some("{}")),
        _ => (Method::DELETE, dry(path), None),
    }
}

/// The SubjectAccessReview's attributes of `verb` on `target`.
pub(super) fn attributes(verb: &str, target: &Target) -> Value {
    match target {
        Target::Path(path) => json!({"nonResourceAttributes": {"path": path, "verb": verb}}),
        Target::Resource(group, version, resource, sub, namespace, name) => json!({
            "resourceAttributes": {"group": group, "version": version, "resource": resource,
                "subresource": sub, "namespace": namespace.unwrap_or_default(),
                "name": name.unwrap_or_default(), "verb": verb}}),
    }
}

/// The Roles, ClusterRoles and bindings the rows are decided by.
pub(super) fn grants() -> Vec<(String, Value)> {
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    let cluster_role = |name: &str, rules: Value| {
        (
            format!("{RBAC}/clusterroles"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}),
        )
    };
    let subject = |kind: &str, name: &str| match kind {
        "ServiceAccount" => {
            let (ns, name) = name.split_once('/').unwrap_or(("default", name));
            json!({"kind": kind, "name": name, "namespace": ns})
        }
        _ => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}),
    };
    let binding = |ns: Option<&str>, name: &str, role: (&str, &str), who: Value| {
        let (collection, kind, metadata) = match ns {
            Some(ns) => (
                format!("{RBAC}/namespaces/{ns}/rolebindings"),
                "RoleBinding",
                json!({"name": name, "namespace": ns}),
            ),
            None => (
                format!("{RBAC}/clusterrolebindings"),
                "ClusterRoleBinding",
                json!({"name": name}),
            ),
        };
        (
            collection,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": metadata, "subjects": [who],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1}}),
        )
    };
    let wardle = "wardle.example.com";
    vec![
        cluster_role(
            "authz-diff-pod-reader",
            json!([rule(
                &[""],
                &["pods", "pods/log"],
                &["get", "list", "watch"]
            )]),
        ),
        cluster_role(
            "authz-diff-deployer",
            json!([rule(
                &["apps"],
                &["deployments", "deployments/scale"],
                &["*"]
            )]),
        ),
        cluster_role(
            "authz-diff-flunders",
            json!([
                rule(&[wardle], &["flunders"], &["get", "list", "create"]),
                rule(&[wardle], &["flunders/status"], &["update", "patch"])
            ]),
        ),
        cluster_role(
            "authz-diff-non-resource",
            json!([
            {"nonResourceURLs": ["/logs/*", "/metrics"], "verbs": ["get"]},
            {"nonResourceURLs": ["/custom/exact"], "verbs": ["get", "post"]}]),
        ),
        cluster_role(
            "authz-diff-any-group",
            json!([rule(&["*"], &["configmaps"], &["get"])]),
        ),
        (
            format!("{RBAC}/namespaces/authz-a/roles"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role", "metadata": {"name": "authz-diff-secrets", "namespace": "authz-a"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"],
                    "verbs": ["get", "update", "delete"]},
                rule(&[""], &["configmaps"], &["create", "delete", "deletecollection", "patch", "update"])]}),
        ),
        binding(
            Some("authz-a"),
            "alice-pods",
            ("ClusterRole", "authz-diff-pod-reader"),
            subject("User", "alice"),
        ),
        binding(
            Some("authz-a"),
            "alice-secrets",
            ("Role", "authz-diff-secrets"),
            subject("User", "alice"),
        ),
        binding(
            Some("authz-b"),
            "capital-alice",
            ("ClusterRole", "authz-diff-pod-reader"),
            subject("User", "Alice"),
        ),
        binding(
            None,
            "authz-diff-team-b",
            ("ClusterRole", "authz-diff-deployer"),
            subject("Group", "team-b"),
        ),
        binding(
            None,
            "authz-diff-carol",
            ("ClusterRole", "authz-diff-non-resource"),
            subject("User", "carol"),
        ),
        binding(
            Some("authz-b"),
            "robot-flunders",
            ("ClusterRole", "authz-diff-flunders"),
            subject("ServiceAccount", "authz-a/robot"),
        ),
        binding(
            None,
            "authz-diff-authz-a-accounts",
            ("ClusterRole", "authz-diff-any-group"),
            subject("Group", "system:serviceaccounts:authz-a"),
        ),
    ]
}
