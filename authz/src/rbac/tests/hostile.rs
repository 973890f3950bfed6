//! Edge cases where a lax or a stricter reading would differ from upstream: URL patterns,
//! namespace boundaries, subject kinds, resource names, missing roles.

use super::super::rule_allows;
use super::*;

#[test]
fn url_patterns_follow_upstream_exactly() {
    for (pattern, path, expected) in [
        // A trailing `*` is a plain prefix: no path-segment boundary.
        ("/healthz*", "/healthz", true),
        ("/healthz*", "/healthz/etcd", true),
        ("/healthz*", "/healthzX", true),
        ("/healthz*", "/health", false),
        ("/apis*", "/apis", true),
        ("/apis*", "/apisX/secret", true),
        ("/apis*", "/api", false),
        ("/apis/*", "/apis", false),
        // Several trailing `*`s count as one.
        ("/foo**", "/foobar", true),
        // A `*` anywhere else is a literal character.
        ("/api/*/foo", "/api/v1/foo", false),
        ("/api/*/foo", "/api/*/foo", true),
        ("*/healthz", "/healthz", false),
        // `*` alone is everything, the empty path too; `**` likewise (its prefix is empty).
        ("*", "", true),
        ("**", "/anything", true),
        // No normalisation: case, trailing slash, dot segments are compared as written.
        ("/healthz", "/healthz/", false),
        ("/healthz", "/HEALTHZ", false),
        ("/version/*", "/version/../secrets", true),
    ] {
        let rule = url_rule(&["get"], &[pattern]);
        assert_eq!(
            rule_allows(&rule, &url("get", path)),
            expected,
            "{pattern} vs {path:?}"
        );
    }
}

#[test]
fn resource_rules_and_url_rules_never_cross() {
    let urls_only = url_rule(&["*"], &["*"]);
    let resources_only = rule(&["*"], &["*"], &["*"]);
    assert!(!rule_allows(
        &urls_only,
        &resource("get", "", "pods", "ns", "p")
    ));
    assert!(!rule_allows(&resources_only, &url("get", "/healthz")));
    // Verbs are case-sensitive.
    assert!(!rule_allows(
        &rule(&["get"], &["*"], &["*"]),
        &resource("GET", "", "pods", "", "")
    ));
}

#[test]
fn resource_wildcards_follow_upstream_exactly() {
    for (granted, asked, expected) in [
        ("pods/*", "pods/log", false),
        ("pods/*", "pods/*", true),
        ("*/log", "pods/log", true),
        ("*/log", "pods", false),
        ("*/log", "log", false),
        ("*", "pods/log", true),
        ("pods", "pods/log", false),
        ("pods/log", "pods", false),
        ("Pods", "pods", false),
    ] {
        let rule = rule(&["get"], &["*"], &[granted]);
        assert_eq!(
            rule_allows(&rule, &resource("get", "", asked, "ns", "p")),
            expected,
            "{granted} vs {asked}"
        );
    }
}

#[test]
fn resource_names_need_a_name() {
    let rule = named_rule(
        &["get", "list", "watch", "create"],
        &[""],
        &["secrets"],
        &["s1"],
    );
    assert!(rule_allows(
        &rule,
        &resource("get", "", "secrets", "ns", "s1")
    ));
    assert!(!rule_allows(
        &rule,
        &resource("get", "", "secrets", "ns", "s2")
    ));
    assert!(!rule_allows(
        &rule,
        &resource("list", "", "secrets", "ns", "")
    ));
    assert!(!rule_allows(
        &rule,
        &resource("create", "", "secrets", "ns", "")
    ));
    // A watch narrowed to one name by a field selector carries that name.
    assert!(rule_allows(
        &rule,
        &resource("watch", "", "secrets", "ns", "s1")
    ));
}

#[test]
fn a_role_binding_stays_in_its_namespace() {
    let all = PolicyRule {
        non_resource_urls: Some(vec!["*".into()]),
        ..rule(&["*"], &["*"], &["*"])
    };
    let policy = policy_of(vec![
        cluster_role("everything", vec![all.clone()]),
        role("a", "local", vec![all]),
        role_binding(
            "a",
            "to-cluster-role",
            "ClusterRole",
            "everything",
            &["User:alice"],
        ),
        role_binding("a", "to-role", "Role", "local", &["User:bob"]),
    ]);
    for who in [user("alice", &[]), user("bob", &[])] {
        assert!(allowed(
            &policy,
            &who,
            &resource("delete", "", "secrets", "a", "s")
        ));
        assert!(!allowed(
            &policy,
            &who,
            &resource("delete", "", "secrets", "b", "s")
        ));
        assert!(!allowed(
            &policy,
            &who,
            &resource("delete", "", "nodes", "", "n")
        ));
        // Non-resource URLs are cluster-wide: a RoleBinding never grants them, even were a
        // namespace set on such a request.
        assert!(!allowed(&policy, &who, &url("get", "/healthz")));
        let mut with_namespace = url("get", "/healthz");
        with_namespace.namespace = "a".into();
        assert!(!allowed(&policy, &who, &with_namespace));
    }
}

#[test]
fn a_role_binding_cannot_reach_a_role_of_another_namespace() {
    let policy = policy_of(vec![
        role("b", "reader", vec![rule(&["get"], &[""], &["pods"])]),
        role_binding("a", "borrow", "Role", "reader", &["User:alice"]),
    ]);
    for ns in ["a", "b"] {
        let decision = decide(
            &policy,
            &user("alice", &[]),
            &resource("get", "", "pods", ns, "p"),
        );
        assert!(!decision.allowed(), "{ns}");
    }
    let decision = decide(
        &policy,
        &user("alice", &[]),
        &resource("get", "", "pods", "a", "p"),
    );
    assert_eq!(
        decision.reason(),
        r#"RBAC: role.rbac.authorization.k8s.io "reader" not found"#
    );
}

#[test]
fn subject_kinds_follow_upstream() {
    let reader = rule(&["get"], &[""], &["pods"]);
    let policy = policy_of(vec![
        cluster_role("reader", vec![reader.clone()]),
        role("ns", "reader", vec![reader]),
        // A User subject spelled like a service account matches that service account.
        cluster_binding(
            "as-user",
            "reader",
            &["User:system:serviceaccount:ns:by-user"],
        ),
        cluster_binding("as-sa", "reader", &["ServiceAccount:ns/by-sa"]),
        // A ServiceAccount subject without namespace: nobody in a ClusterRoleBinding…
        cluster_binding("no-ns", "reader", &["ServiceAccount:orphan"]),
        // …the binding's namespace in a RoleBinding.
        role_binding(
            "ns",
            "local-sa",
            "Role",
            "reader",
            &["ServiceAccount:local"],
        ),
        // Kinds are case-sensitive; unknown kinds match nobody.
        cluster_binding("odd-kinds", "reader", &["user:lower", "Team:crew"]),
        // A namespace containing ':' makes the user name ambiguous; upstream compares the
        // joined string, and so do we.
        cluster_binding("colon", "reader", &["ServiceAccount:a:b/c"]),
    ]);
    let get_in = |ns: &str| resource("get", "", "pods", ns, "p");
    let sa = |ns: &str, name: &str| user(&format!("system:serviceaccount:{ns}:{name}"), &[]);
    for (who, ns, expected) in [
        (sa("ns", "by-user"), "x", true),
        (sa("ns", "by-sa"), "x", true),
        (sa("ns", "by-sa2"), "x", false),
        (
            user("system:serviceaccount:ns:by-sa:extra", &[]),
            "x",
            false,
        ),
        (sa("other", "by-sa"), "x", false),
        (user("by-sa", &[]), "x", false),
        (sa("", "orphan"), "x", false),
        (user("system:serviceaccount::orphan", &[]), "x", false),
        (sa("ns", "local"), "ns", true),
        (sa("ns", "local"), "other", false),
        (sa("other", "local"), "ns", false),
        (user("lower", &[]), "x", false),
        (user("crew", &["crew"]), "x", false),
        (sa("a:b", "c"), "x", true),
        (sa("a", "b:c"), "x", true),
        // A User subject is not matched by a group of that name.
        (
            user("nobody", &["system:serviceaccount:ns:by-user"]),
            "x",
            false,
        ),
    ] {
        assert_eq!(
            allowed(&policy, &who, &get_in(ns)),
            expected,
            "{} in {ns}",
            who.name
        );
    }
}

#[test]
fn a_missing_role_disables_only_its_own_binding() {
    let policy = policy_of(vec![
        cluster_role("reader", vec![rule(&["get"], &[""], &["pods"])]),
        cluster_binding("a-broken", "gone", &["Group:team"]),
        cluster_binding("b-broken-again", "gone", &["Group:team"]),
        cluster_binding("c-works", "reader", &["Group:team"]),
        cluster_binding_to("d-role-kind", "Role", "reader", &["Group:team"]),
        cluster_binding_to("e-odd-kind", "Policy", "reader", &["Group:team"]),
    ]);
    let member = user("carol", &["team"]);
    let decision = decide(&policy, &member, &resource("get", "", "pods", "ns", "p"));
    assert_eq!(
        decision.reason(),
        r#"RBAC: allowed by ClusterRoleBinding "c-works" of ClusterRole "reader" to Group "team""#
    );
    // Nothing allows a delete: the errors are listed once each, in binding order.
    let decision = decide(&policy, &member, &resource("delete", "", "pods", "ns", "p"));
    assert_eq!(
        decision,
        Decision::NoOpinion(
            r#"RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "reader" not found, unsupported role reference kind: "Policy"]"#
                .into()
        )
    );
}

#[test]
fn the_reason_names_the_first_subject_that_matches() {
    let policy = policy_of(vec![
        cluster_role("reader", vec![rule(&["get"], &[""], &["pods"])]),
        cluster_binding(
            "both",
            "reader",
            &["Group:readers", "User:dave", "User:dave"],
        ),
    ]);
    let dave = user("dave", &["readers"]);
    assert_eq!(
        decide(&policy, &dave, &resource("get", "", "pods", "", "p")).reason(),
        r#"RBAC: allowed by ClusterRoleBinding "both" of ClusterRole "reader" to Group "readers""#
    );
    let dave_alone = user("dave", &[]);
    assert_eq!(
        decide(&policy, &dave_alone, &resource("get", "", "pods", "", "p")).reason(),
        r#"RBAC: allowed by ClusterRoleBinding "both" of ClusterRole "reader" to User "dave""#
    );
}

#[test]
fn names_are_quoted_in_the_reason() {
    let policy = policy_of(vec![
        cluster_role("r\\x", vec![rule(&["get"], &[""], &["pods"])]),
        cluster_binding("we\"ird", "r\\x", &["User:\u{e9}ve\n"]),
    ]);
    let eve = user("\u{e9}ve\n", &[]);
    assert_eq!(
        decide(&policy, &eve, &resource("get", "", "pods", "", "p")).reason(),
        r#"RBAC: allowed by ClusterRoleBinding "we\"ird" of ClusterRole "r\\x" to User "éve\n""#
    );
}
