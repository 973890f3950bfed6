//! The cases of upstream's `rbac_test.go` (TestAuthorizer, TestRuleMatches) and
//! `subject_locator_test.go`, restated as our own tables.

use super::super::{allowed_subjects, rule_allows};
use super::*;

/// A user, a request, and whether upstream allows it.
type Row = (User, Attributes, bool);

fn check_rows(policy: &Policy, rows: Vec<Row>) {
    for (user, request, expected) in rows {
        assert_eq!(
            allowed(policy, &user, &request),
            expected,
            "{} {:?} {:?} {}/{} in {:?}",
            user.name,
            user.groups,
            request.verb,
            request.resource,
            request.subresource,
            request.namespace
        );
    }
}

/// A RoleBinding in ns1 to an all-powerful ClusterRole grants everything in ns1, to its user
/// and to members of its group, and nothing in other namespaces or cluster-wide.
#[test]
fn role_binding_to_a_cluster_role_grants_in_its_namespace_only() {
    let all = PolicyRule {
        non_resource_urls: Some(vec!["*".into()]),
        ..rule(&["*"], &["*"], &["*"])
    };
    let policy = policy_of(vec![
        cluster_role("admin", vec![all]),
        role_binding(
            "ns1",
            "admins",
            "ClusterRole",
            "admin",
            &["User:admin", "Group:admins"],
        ),
    ]);
    check_rows(
        &policy,
        vec![
            (
                user("admin", &[]),
                resource("get", "", "Pods", "ns1", ""),
                true,
            ),
            (
                user("admin", &[]),
                resource("watch", "", "Pods", "ns1", ""),
                true,
            ),
            (
                user("admin", &["group1"]),
                resource("watch", "", "Foobar", "ns1", ""),
                true,
            ),
            (
                user("joe", &["admins"]),
                resource("watch", "", "Foobar", "ns1", ""),
                true,
            ),
            (
                user("joe", &["group1", "admins"]),
                resource("watch", "", "Foobar", "ns1", ""),
                true,
            ),
            (
                user("admin", &[]),
                resource("GET", "", "Pods", "ns2", ""),
                false,
            ),
            (
                user("admin", &[]),
                resource("GET", "", "Nodes", "", ""),
                false,
            ),
            (
                user("admin", &["admins"]),
                resource("GET", "", "Pods", "ns2", ""),
                false,
            ),
            (
                user("admin", &["admins"]),
                resource("GET", "", "Nodes", "", ""),
                false,
            ),
        ],
    );
}

/// Non-resource URLs granted by ClusterRoleBindings: exact paths, `*` verbs, a `/apis/*` prefix.
#[test]
fn non_resource_urls_through_cluster_role_bindings() {
    let policy = policy_of(vec![
        cluster_role("url-getter", vec![url_rule(&["get"], &["/apis"])]),
        cluster_role("url-any-verb", vec![url_rule(&["*"], &["/apis"])]),
        cluster_role("url-prefix", vec![url_rule(&["get"], &["/apis/*"])]),
        cluster_binding("getter", "url-getter", &["User:foo", "Group:bar"]),
        cluster_binding("any-verb", "url-any-verb", &["User:admin", "Group:admin"]),
        cluster_binding("prefix", "url-prefix", &["User:prefixed", "Group:prefixed"]),
    ]);
    let named = |name: &str| user(name, &[]);
    let member = |group: &str| user("", &[group]);
    check_rows(
        &policy,
        vec![
            (named("foo"), url("get", "/apis"), true),
            (member("bar"), url("get", "/apis"), true),
            (named("admin"), url("get", "/apis"), true),
            (member("admin"), url("get", "/apis"), true),
            (named("admin"), url("watch", "/apis"), true),
            (member("admin"), url("watch", "/apis"), true),
            (named("prefixed"), url("get", "/apis/v1"), true),
            (member("prefixed"), url("get", "/apis/v1"), true),
            (named("prefixed"), url("get", "/apis/v1/foobar"), true),
            (member("prefixed"), url("get", "/apis/v1/foorbar"), true),
            // A verb the rule does not list.
            (named("foo"), url("watch", "/apis"), false),
            (member("bar"), url("watch", "/apis"), false),
            // A path no rule names.
            (named("foo"), url("get", "/api/v1"), false),
            (member("bar"), url("get", "/api/v1"), false),
            (named("admin"), url("get", "/api/v1"), false),
            (member("admin"), url("get", "/api/v1"), false),
            // Outside the prefix.
            (named("prefixed"), url("get", "/api/v1"), false),
            (member("prefixed"), url("get", "/api/v1"), false),
        ],
    );
}

/// `pods` does not cover `pods/status`, and `pods/status` does not cover `pods`.
#[test]
fn a_resource_and_its_subresource_are_distinct() {
    for (granted, asked, expected) in [
        ("pods", "pods", true),
        ("pods", "pods/status", false),
        ("pods/status", "pods/status", true),
        ("pods/status", "pods", false),
    ] {
        let policy = policy_of(vec![
            cluster_role("admin", vec![rule(&["*"], &["*"], &[granted])]),
            role_binding(
                "ns1",
                "admins",
                "ClusterRole",
                "admin",
                &["User:admin", "Group:admins"],
            ),
        ]);
        let request = resource("get", "", asked, "ns1", "");
        assert_eq!(
            allowed(&policy, &user("admin", &[]), &request),
            expected,
            "{granted} / {asked}"
        );
    }
}

/// TestRuleMatches: each rule against requests varying verb, group and resource.
#[test]
fn rule_matching_table() {
    let combos = |verb: &str, group: &str, res: &str| resource(verb, group, res, "", "");
    let verbs = ["verb1", "verb2"];
    let groups = ["group1", "group2"];
    let resources = ["resource1", "resource2"];
    // (rule, which (verb, group, resource) it covers)
    type Covers = fn(&str, &str, &str) -> bool;
    let cases: Vec<(&str, PolicyRule, Covers)> = vec![
        (
            "any verb",
            rule(&["*"], &["group1"], &["resource1"]),
            |_, g, r| g == "group1" && r == "resource1",
        ),
        (
            "any group",
            rule(&["verb1"], &["*"], &["resource1"]),
            |v, _, r| v == "verb1" && r == "resource1",
        ),
        (
            "any resource",
            rule(&["verb1"], &["group1"], &["*"]),
            |v, g, _| v == "verb1" && g == "group1",
        ),
        (
            "every pair listed",
            rule(
                &["verb1", "verb2"],
                &["group1", "group2"],
                &["resource1", "resource2"],
            ),
            |_, _, _| true,
        ),
    ];
    for (what, rule, covers) in &cases {
        for verb in verbs {
            for group in groups {
                for res in resources {
                    let request = combos(verb, group, res);
                    assert_eq!(
                        rule_allows(rule, &request),
                        covers(verb, group, res),
                        "{what}: {verb} {group} {res}"
                    );
                }
            }
        }
    }

    let subresource_rule = rule(&["*"], &["*"], &["resource1/subresource1"]);
    for (verb, group, asked, expected) in [
        ("verb1", "group1", "resource1/subresource1", true),
        ("verb1", "group2", "resource1/subresource2", false),
        ("verb1", "group1", "resource2/subresource1", false),
        ("verb1", "group2", "resource2/subresource1", false),
        ("verb2", "group1", "resource1/subresource1", true),
        ("verb2", "group2", "resource1/subresource2", false),
        ("verb2", "group1", "resource2/subresource1", false),
        ("verb2", "group2", "resource2/subresource1", false),
    ] {
        let request = combos(verb, group, asked);
        assert_eq!(
            rule_allows(&subresource_rule, &request),
            expected,
            "{verb} {group} {asked}"
        );
    }
}

/// TestRuleMatches, the non-resource half.
#[test]
fn url_rule_matching_table() {
    let paths = [
        "/foo",
        "/foo/bar",
        "/foo/baz",
        "/foo/bar/one",
        "/foo/baz/one",
    ];
    let any_url = url_rule(&["verb1"], &["*"]);
    for path in paths {
        assert!(rule_allows(&any_url, &url("verb1", path)), "{path}");
        assert!(!rule_allows(&any_url, &url("verb2", path)), "{path}");
    }

    let under_foo = url_rule(&["verb1"], &["/foo/*"]);
    for (path, expected) in [
        ("/foo", false),
        ("/foo/bar", true),
        ("/foo/baz", true),
        ("/foo/bar/one", true),
        ("/foo/baz/one", true),
        ("/notfoo", false),
        ("/notfoo/bar", false),
        ("/notfoo/baz", false),
        ("/notfoo/bar/one", false),
        ("/notfoo/baz/one", false),
    ] {
        assert_eq!(
            rule_allows(&under_foo, &url("verb1", path)),
            expected,
            "{path}"
        );
    }

    let two_exact = url_rule(&["*"], &["/foo", "/foo/bar/one"]);
    for verb in ["verb1", "verb2"] {
        for (path, expected) in [
            ("/foo", true),
            ("/foo/bar", false),
            ("/foo/baz", false),
            ("/foo/bar/one", true),
            ("/foo/baz/one", false),
        ] {
            assert_eq!(
                rule_allows(&two_exact, &url(verb, path)),
                expected,
                "{verb} {path}"
            );
        }
    }
}

fn names(subjects: &[RbacSubject]) -> Vec<String> {
    subjects
        .iter()
        .map(|s| format!("{}:{}", s.kind, s.name))
        .collect()
}

/// subject_locator_test, first case: who may act, through a ClusterRoleBinding everywhere and a
/// RoleBinding in ns1 only. (Upstream's "super user" is a flag of its evaluator; there is none
/// here, so its second case is restated without it.)
#[test]
fn allowed_subjects_with_a_cluster_role_everywhere() {
    let policy = policy_of(vec![
        cluster_role("admin", vec![rule(&["*"], &["*"], &["*"])]),
        cluster_binding(
            "super",
            "admin",
            &["User:super-admin", "Group:super-admins"],
        ),
        role_binding(
            "ns1",
            "local",
            "ClusterRole",
            "admin",
            &["User:admin", "Group:admins"],
        ),
    ]);
    let everyone = [
        "Group:system:masters",
        "User:super-admin",
        "Group:super-admins",
        "User:admin",
        "Group:admins",
    ];
    let get_pods = resource("get", "", "Pods", "ns1", "");
    assert_eq!(names(&allowed_subjects(&policy, &get_pods)), everyone);
    // A namespace literally named "*" is just another namespace.
    let in_star = resource("*", "", "Pods", "*", "");
    assert_eq!(names(&allowed_subjects(&policy, &in_star)), everyone[..3]);
    let cluster_wide = resource("*", "", "Pods", "", "");
    assert_eq!(
        names(&allowed_subjects(&policy, &cluster_wide)),
        everyone[..3]
    );
    // The User and Group subjects come back as written, with their API group.
    let subjects = allowed_subjects(&policy, &get_pods);
    assert!(subjects
        .iter()
        .all(|s| s.api_group.as_deref() == Some("rbac.authorization.k8s.io")));
}

/// subject_locator_test, second case: a Role in ns1 limited to `get`.
#[test]
fn allowed_subjects_with_a_local_role() {
    let policy = policy_of(vec![
        cluster_role("admin", vec![rule(&["*"], &["*"], &["*"])]),
        cluster_binding(
            "super",
            "admin",
            &["User:super-admin", "Group:super-admins"],
        ),
        role("ns1", "admin", vec![rule(&["get"], &["*"], &["Pods"])]),
        role_binding(
            "ns1",
            "local",
            "Role",
            "admin",
            &["User:admin", "Group:admins"],
        ),
    ]);
    let cluster_only = [
        "Group:system:masters",
        "User:super-admin",
        "Group:super-admins",
    ];
    let get = resource("get", "", "Pods", "ns1", "");
    let mut with_local = cluster_only.to_vec();
    with_local.extend(["User:admin", "Group:admins"]);
    assert_eq!(names(&allowed_subjects(&policy, &get)), with_local);
    // The Role does not list `create`.
    let create = resource("create", "", "Pods", "ns1", "");
    assert_eq!(names(&allowed_subjects(&policy, &create)), cluster_only);
    // The RoleBinding is in ns1 only.
    let elsewhere = resource("get", "", "Pods", "ns2", "");
    assert_eq!(names(&allowed_subjects(&policy, &elsewhere)), cluster_only);
}
