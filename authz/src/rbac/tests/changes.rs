//! Changes: each published policy reflects the objects at that time, shares what did not change,
//! and keeps its index consistent with its objects.

use std::sync::Arc;

use super::super::{ObjectError, PolicyCounts, RbacKind};
use super::*;

fn get_pods(ns: &str) -> Attributes {
    resource("get", "", "pods", ns, "p")
}

#[test]
fn policies_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Policy>();
    shareable::<PolicyBuilder>();
}

#[test]
fn deleting_a_binding_or_role_removes_the_grant_in_the_next_policy() {
    let mut builder = builder_of(vec![
        cluster_role("reader", vec![rule(&["get"], &[""], &["pods"])]),
        cluster_binding("readers", "reader", &["User:alice"]),
        role("ns", "local", vec![rule(&["get"], &[""], &["pods"])]),
        role_binding("ns", "local", "Role", "local", &["User:bob"]),
    ]);
    let alice = user("alice", &[]);
    let bob = user("bob", &[]);
    let before = builder.snapshot();
    assert!(allowed(&before, &alice, &get_pods("ns")));
    assert!(allowed(&before, &bob, &get_pods("ns")));

    assert!(builder.remove(RbacKind::ClusterRoleBinding, "", "readers"));
    assert!(!builder.remove(RbacKind::ClusterRoleBinding, "", "readers"));
    assert!(builder.remove(RbacKind::Role, "ns", "local"));
    let after = builder.snapshot();
    assert!(!allowed(&after, &alice, &get_pods("ns")));
    let decision = decide(&after, &bob, &get_pods("ns"));
    assert_eq!(
        decision,
        Decision::NoOpinion(r#"RBAC: role.rbac.authorization.k8s.io "local" not found"#.into())
    );
    // A published policy never changes.
    assert!(allowed(&before, &alice, &get_pods("ns")));
    assert!(allowed(&before, &bob, &get_pods("ns")));

    // The role coming back restores the grant; deleting the ClusterRole breaks no other binding.
    builder
        .apply(role("ns", "local", vec![rule(&["get"], &[""], &["pods"])]))
        .expect("valid");
    assert!(builder.remove(RbacKind::ClusterRole, "", "reader"));
    assert!(allowed(&builder.snapshot(), &bob, &get_pods("ns")));
}

#[test]
fn modifying_objects_moves_the_grant() {
    let mut builder = builder_of(vec![
        cluster_role("reader", vec![rule(&["get"], &[""], &["pods"])]),
        role_binding("ns", "b", "ClusterRole", "reader", &["User:alice"]),
    ]);
    builder
        .apply(role_binding(
            "ns",
            "b",
            "ClusterRole",
            "reader",
            &["User:bob"],
        ))
        .expect("valid");
    let policy = builder.snapshot();
    assert!(!allowed(&policy, &user("alice", &[]), &get_pods("ns")));
    assert!(allowed(&policy, &user("bob", &[]), &get_pods("ns")));

    builder
        .apply(cluster_role(
            "reader",
            vec![rule(&["list"], &[""], &["pods"])],
        ))
        .expect("valid");
    let policy = builder.snapshot();
    assert!(!allowed(&policy, &user("bob", &[]), &get_pods("ns")));
    assert!(allowed(
        &policy,
        &user("bob", &[]),
        &resource("list", "", "pods", "ns", "")
    ));
}

#[test]
fn a_relist_replaces_every_object_of_its_kind() {
    let mut builder = builder_of(vec![
        cluster_role("reader", vec![rule(&["get"], &[""], &["pods"])]),
        role_binding("a", "one", "ClusterRole", "reader", &["User:alice"]),
        role_binding("b", "two", "ClusterRole", "reader", &["User:bob"]),
        cluster_binding("everywhere", "reader", &["User:carol"]),
    ]);
    let kept = role_binding("b", "two", "ClusterRole", "reader", &["User:bob"]);
    let added = role_binding("c", "three", "ClusterRole", "reader", &["User:dave"]);
    let before = builder.snapshot();
    builder
        .replace_all(RbacKind::RoleBinding, vec![kept, added])
        .expect("valid");
    let policy = builder.snapshot();
    assert!(!allowed(&policy, &user("alice", &[]), &get_pods("a")));
    assert!(allowed(&policy, &user("bob", &[]), &get_pods("b")));
    assert!(allowed(&policy, &user("dave", &[]), &get_pods("c")));
    assert!(
        allowed(&policy, &user("carol", &[]), &get_pods("a")),
        "other kinds untouched"
    );
    // The namespace that emptied is gone; the unchanged one is still shared.
    assert!(policy.namespaces.get("a").is_none());
    let (old_b, new_b) = (before.namespaces.get("b"), policy.namespaces.get("b"));
    assert!(Arc::ptr_eq(old_b.expect("b"), new_b.expect("b")));

    builder
        .replace_all(RbacKind::ClusterRoleBinding, Vec::new())
        .expect("empty relist");
    builder
        .replace_all(RbacKind::ClusterRole, Vec::new())
        .expect("empty relist");
    assert_eq!(
        builder.snapshot().counts(),
        PolicyCounts {
            role_bindings: 2,
            ..PolicyCounts::default()
        }
    );
}

#[test]
fn a_relist_with_a_bad_object_changes_nothing() {
    let mut builder = builder_of(vec![role_binding(
        "a",
        "one",
        "ClusterRole",
        "r",
        &["User:alice"],
    )]);
    let before = builder.snapshot();
    let nameless = role_binding("a", "", "ClusterRole", "r", &["User:bob"]);
    let error = builder
        .replace_all(RbacKind::RoleBinding, vec![nameless])
        .expect_err("no name");
    assert!(matches!(
        error,
        ObjectError::MissingName {
            kind: RbacKind::RoleBinding
        }
    ));
    let wrong = cluster_role("r", vec![]);
    let error = builder
        .replace_all(RbacKind::RoleBinding, vec![wrong])
        .expect_err("wrong kind");
    assert_eq!(
        error.to_string(),
        "expected a RoleBinding, got a ClusterRole"
    );
    assert_eq!(builder.snapshot().counts(), before.counts());
}

#[test]
fn a_change_shares_what_it_did_not_touch() {
    let mut builder = PolicyBuilder::new();
    builder
        .apply(cluster_role(
            "reader",
            vec![rule(&["get"], &[""], &["pods"])],
        ))
        .expect("valid");
    for ns in 0..200 {
        for b in 0..5 {
            let binding = role_binding(
                &format!("ns{ns}"),
                &format!("b{b}"),
                "ClusterRole",
                "reader",
                &[&format!("User:u{ns}-{b}")],
            );
            builder.apply(binding).expect("valid");
        }
    }
    let before = builder.snapshot();
    builder
        .apply(role_binding(
            "ns7",
            "b9",
            "ClusterRole",
            "reader",
            &["User:new"],
        ))
        .expect("valid");
    let after = builder.snapshot();
    let shared = (0..200)
        .filter(|ns| {
            let name = format!("ns{ns}");
            Arc::ptr_eq(
                before.namespaces.get(&name).expect("old"),
                after.namespaces.get(&name).expect("new"),
            )
        })
        .count();
    assert_eq!(shared, 199, "only ns7 was copied");
    assert!(allowed(&after, &user("new", &[]), &get_pods("ns7")));
    assert!(!allowed(&before, &user("new", &[]), &get_pods("ns7")));

    // Applying an object equal to the held one copies nothing.
    let again = builder.snapshot();
    builder
        .apply(role_binding(
            "ns7",
            "b9",
            "ClusterRole",
            "reader",
            &["User:new"],
        ))
        .expect("valid");
    let same = builder.snapshot();
    assert!(Arc::ptr_eq(
        again.namespaces.get("ns7").expect("ns7"),
        same.namespaces.get("ns7").expect("ns7")
    ));
}

/// A long pseudo-random sequence of applies and removes over a small universe: after each step
/// the index must give the answer of a scan of every binding.
#[test]
fn the_index_stays_consistent_through_random_changes() {
    let mut seed: u64 = 0x5eed;
    let mut next = |bound: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % bound
    };
    let namespaces = ["a", "b"];
    let names = ["x", "y", "z"];
    let subjects = [
        "User:u1",
        "User:u2",
        "Group:g1",
        "ServiceAccount:a/sa",
        "ServiceAccount:sa",
    ];
    let users = [
        user("u1", &[]),
        user("u2", &["g1"]),
        user("system:serviceaccount:a:sa", &[]),
        user("system:serviceaccount:b:sa", &["g1"]),
    ];
    let requests = [
        get_pods("a"),
        get_pods("b"),
        get_pods(""),
        resource("list", "", "pods", "a", ""),
    ];
    let mut builder = PolicyBuilder::new();
    for step in 0..600 {
        let ns = namespaces[next(2) as usize];
        let name = names[next(3) as usize];
        let mut picked: Vec<&str> = Vec::new();
        for _ in 0..next(3) + 1 {
            picked.push(subjects[next(subjects.len() as u64) as usize]);
        }
        let verbs: &[&str] = if next(2) == 0 {
            &["get"]
        } else {
            &["get", "list"]
        };
        let role_kind = if next(2) == 0 { "Role" } else { "ClusterRole" };
        match next(8) {
            0 => builder
                .apply(cluster_role(name, vec![rule(verbs, &[""], &["pods"])]))
                .expect("valid"),
            1 => builder
                .apply(role(ns, name, vec![rule(verbs, &[""], &["pods"])]))
                .expect("valid"),
            2 | 3 => builder
                .apply(role_binding(ns, name, role_kind, name, &picked))
                .expect("valid"),
            4 => builder
                .apply(cluster_binding(name, name, &picked))
                .expect("valid"),
            5 => {
                builder.remove(RbacKind::RoleBinding, ns, name);
            }
            6 => {
                builder.remove(RbacKind::ClusterRoleBinding, "", name);
            }
            _ => {
                let kind = if next(2) == 0 {
                    RbacKind::Role
                } else {
                    RbacKind::ClusterRole
                };
                builder.remove(kind, ns, name);
            }
        }
        let policy = builder.snapshot();
        for who in &users {
            for request in &requests {
                // `decide` asserts that the index agrees with the scan.
                let _ = decide(&policy, who, request);
            }
        }
        assert!(step < 600);
    }
}
