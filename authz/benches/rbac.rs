//! One RBAC decision on upstream's bootstrap policy plus 5,000 RoleBindings across 500
//! namespaces, allowed and no-opinion cases; and the cost of one change.

use std::hint::black_box;
use std::path::PathBuf;

use apiagg_authz::rbac::{PolicyBuilder, RbacObject};
use apiagg_authz::{Attributes, Subject};
use criterion::{criterion_group, BatchSize, Criterion};
use serde_json::{json, Value};

const NAMESPACES: usize = 500;
const BINDINGS_PER_NAMESPACE: usize = 10;

fn bootstrap_objects() -> Vec<RbacObject> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/rbac");
    let mut objects = Vec::new();
    for file in [
        "cluster-roles.yaml",
        "cluster-role-bindings.yaml",
        "controller-roles.yaml",
        "controller-role-bindings.yaml",
        "namespace-roles.yaml",
        "namespace-role-bindings.yaml",
    ] {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("test data {} is missing: {e}", path.display()));
        let list: Value = serde_yaml_ng::from_str(&text).expect("a YAML list");
        for item in list["items"].as_array().expect("items") {
            objects.push(RbacObject::from_json(item.clone()).expect("an RBAC object"));
        }
    }
    objects
}

fn role_binding(ns: usize, index: usize) -> RbacObject {
    // Odd bindings refer to the namespace's Role, even ones to the shared ClusterRole.
    let (kind, role) = if index % 2 == 1 {
        ("Role", "tenant-reader")
    } else {
        ("ClusterRole", "tenant-editor")
    };
    RbacObject::from_json(json!({
        "kind": "RoleBinding",
        "metadata": {"name": format!("binding-{index}"), "namespace": format!("ns-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [
            {"kind": "User", "name": format!("user-{ns}-{index}")},
            {"kind": "Group", "name": format!("team-{ns}")},
            {"kind": "ServiceAccount", "name": format!("sa-{index}")},
        ],
    }))
    .expect("valid")
}

fn synthetic_objects() -> Vec<RbacObject> {
    let mut objects = vec![RbacObject::from_json(json!({
        "kind": "ClusterRole",
        "metadata": {"name": "tenant-editor"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "services", "configmaps"],
             "verbs": ["create", "delete", "patch", "update"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"],
             "verbs": ["create", "delete", "patch", "update"]},
        ],
    }))
    .expect("valid")];
    for ns in 0..NAMESPACES {
        objects.push(
            RbacObject::from_json(json!({
                "kind": "Role",
                "metadata": {"name": "tenant-reader", "namespace": format!("ns-{ns}")},
                "rules": [{"apiGroups": ["", "apps"], "resources": ["pods", "deployments"],
                           "verbs": ["get", "list", "watch"]}],
            }))
            .expect("valid"),
        );
        for index in 0..BINDINGS_PER_NAMESPACE {
            objects.push(role_binding(ns, index));
        }
    }
    objects
}

fn full_builder() -> PolicyBuilder {
    let mut builder = PolicyBuilder::new();
    for object in bootstrap_objects().into_iter().chain(synthetic_objects()) {
        builder.apply(object).expect("valid");
    }
    builder
}

fn resource(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource_request: true,
        namespace: ns.into(),
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

fn subject<'a>(name: &'a str, groups: &'a [String]) -> Subject<'a> {
    Subject {
        name,
        uid: "",
        groups,
        extra: &[],
    }
}

/// The decision cases: label, user name, groups, request, whether it is allowed.
fn cases() -> Vec<(&'static str, &'static str, Vec<String>, Attributes, bool)> {
    let groups = |names: &[&str]| names.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    let tenant = groups(&["team-250", "system:authenticated"]);
    let controller = groups(&[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ]);
    let healthz = Attributes {
        verb: "get".into(),
        path: "/healthz".into(),
        ..Attributes::default()
    };
    vec![
        (
            "allow/rolebinding-role",
            "user-250-3",
            tenant.clone(),
            resource("get", "", "pods", "ns-250", "p"),
            true,
        ),
        (
            "allow/rolebinding-clusterrole",
            "user-250-4",
            tenant.clone(),
            resource("update", "apps", "deployments", "ns-250", "d"),
            true,
        ),
        (
            "allow/controller-sa",
            "system:serviceaccount:kube-system:deployment-controller",
            controller,
            resource("update", "apps", "replicasets", "ns-1", "rs"),
            true,
        ),
        (
            "allow/anonymous-healthz",
            "system:anonymous",
            groups(&["system:unauthenticated"]),
            healthz,
            true,
        ),
        (
            "noopinion/other-namespace",
            "user-250-3",
            tenant.clone(),
            resource("get", "", "pods", "ns-251", "p"),
            false,
        ),
        (
            "noopinion/secrets",
            "user-250-3",
            tenant,
            resource("list", "", "secrets", "ns-250", ""),
            false,
        ),
    ]
}

fn decisions(c: &mut Criterion) {
    let policy = full_builder().snapshot();
    let mut group = c.benchmark_group("rbac_decision");
    for (label, name, groups, request, expected) in &cases() {
        let who = subject(name, groups);
        assert_eq!(
            policy.authorize(&who, request).allowed(),
            *expected,
            "{label}"
        );
        group.bench_function(*label, |b| {
            b.iter(|| black_box(policy.authorize(black_box(&who), black_box(request))))
        });
    }
    group.finish();
}

/// `RBAC_DECISIONS=n RBAC_CASE=label`: only make that decision n times (to count instructions
/// under callgrind with `--toggle-collect='*Policy::authorize*'`).
fn repeat_one_case(count: usize, label: &str) {
    let policy = full_builder().snapshot();
    let cases = cases();
    let Some((_, name, groups, request, _)) = cases.iter().find(|case| case.0 == label) else {
        panic!("no case {label:?}");
    };
    let who = subject(name, groups);
    for _ in 0..count {
        black_box(policy.authorize(black_box(&who), black_box(request)));
    }
}

fn changes(c: &mut Criterion) {
    let builder = full_builder();
    let mut group = c.benchmark_group("rbac_change");
    group.bench_function("apply_rolebinding_and_snapshot", |b| {
        b.iter_batched(
            || (builder.clone(), builder.snapshot(), role_binding(123, 99)),
            |(mut builder, published, object)| {
                builder.apply(object).expect("valid");
                (builder.snapshot(), published)
            },
            BatchSize::SmallInput,
        )
    });
    group.sample_size(10);
    let objects: Vec<RbacObject> = bootstrap_objects()
        .into_iter()
        .chain(synthetic_objects())
        .collect();
    group.bench_function("build_bootstrap_plus_5000_rolebindings", |b| {
        b.iter_batched(
            || objects.clone(),
            |objects| {
                let mut builder = PolicyBuilder::new();
                for object in objects {
                    builder.apply(object).expect("valid");
                }
                builder.snapshot()
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, decisions, changes);

fn main() {
    if let Ok(count) = std::env::var("RBAC_DECISIONS") {
        let label = std::env::var("RBAC_CASE").unwrap_or_else(|_| "allow/rolebinding-role".into());
        repeat_one_case(count.parse().expect("RBAC_DECISIONS is a count"), &label);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
