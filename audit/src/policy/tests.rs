use super::*;

const HEADER: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";

fn policy(body: &str) -> Policy {
    Policy::parse(&format!("{HEADER}{body}")).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

fn problem(body: &str) -> String {
    Policy::parse(&format!("{HEADER}{body}"))
        .expect_err("refused")
        .to_string()
}

/// The level for `user` in `groups` sending `method path?query`.
fn level_of(p: &Policy, user: &str, groups: &[&str], method: &str, target: &str) -> Level {
    decide(p, user, groups, method, target).level
}

fn decide(p: &Policy, user: &str, groups: &[&str], method: &str, target: &str) -> Decision {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let info = RequestInfo::new(method, path, query).expect("request info");
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    p.evaluate(&Attributes {
        user,
        groups: &groups,
        info: &info,
    })
}

fn anyone(p: &Policy, method: &str, target: &str) -> Level {
    level_of(p, "someone", &["system:authenticated"], method, target)
}

#[test]
fn users_and_groups_select() {
    let p = policy(
        "rules:
- level: RequestResponse
  users: [alice, bob]
- level: Request
  userGroups: [ops]
- level: Metadata
",
    );
    assert_eq!(
        level_of(&p, "alice", &[], "GET", "/api/v1/pods"),
        Level::RequestResponse
    );
    assert_eq!(
        level_of(&p, "bob", &["ops"], "GET", "/healthz"),
        Level::RequestResponse
    );
    assert_eq!(
        level_of(&p, "carol", &["dev", "ops"], "GET", "/api"),
        Level::Request
    );
    assert_eq!(
        level_of(&p, "carol", &["dev"], "GET", "/api"),
        Level::Metadata
    );
}

#[test]
fn no_matching_rule_is_none_with_the_policy_stages() {
    let p = policy(
        "omitStages: [RequestReceived]
omitManagedFields: true
rules:
- level: Metadata
  users: [alice]
",
    );
    let d = decide(&p, "bob", &[], "GET", "/api");
    assert_eq!(d.level, Level::None);
    assert!(d.omit_stages.contains(Stage::RequestReceived));
    assert!(d.omit_managed_fields);
}

#[test]
fn verbs_select_upstream_verbs() {
    let p = policy(
        "rules:
- level: None
  verbs: [watch]
- level: Request
  verbs: [list, deletecollection]
- level: Metadata
  verbs: [get, post]
",
    );
    assert_eq!(anyone(&p, "GET", "/api/v1/pods?watch=true"), Level::None);
    assert_eq!(anyone(&p, "GET", "/api/v1/watch/pods"), Level::None);
    assert_eq!(anyone(&p, "GET", "/api/v1/pods"), Level::Request);
    assert_eq!(
        anyone(&p, "DELETE", "/api/v1/namespaces/a/pods"),
        Level::Request
    );
    assert_eq!(
        anyone(&p, "GET", "/api/v1/namespaces/a/pods/p"),
        Level::Metadata
    );
    // Non-resource requests have the lower-case method as their verb.
    assert_eq!(anyone(&p, "POST", "/some/path"), Level::Metadata);
    assert_eq!(anyone(&p, "PUT", "/some/path"), Level::None);
    assert_eq!(anyone(&p, "POST", "/api/v1/namespaces/a/pods"), Level::None);
}

#[test]
fn resources_subresources_and_wildcards() {
    let p = policy(
        r#"rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: ["pods/log"]
- level: Request
  resources:
  - group: ""
    resources: ["*/status"]
- level: Metadata
  resources:
  - group: "apps"
    resources: ["deployments/*"]
- level: None
  resources:
  - group: ""
    resources: ["pods"]
- level: Request
  resources:
  - group: "*"
    resources: ["*"]
"#,
    );
    let pods = "/api/v1/namespaces/a/pods";
    assert_eq!(
        anyone(&p, "GET", &format!("{pods}/p/log")),
        Level::RequestResponse
    );
    assert_eq!(
        anyone(&p, "PUT", &format!("{pods}/p/status")),
        Level::Request
    );
    assert_eq!(anyone(&p, "GET", &format!("{pods}/p")), Level::None);
    assert_eq!(anyone(&p, "GET", pods), Level::None);
    // `pods` alone does not match a subresource: `pods/exec` falls through to `*`.
    assert_eq!(
        anyone(&p, "POST", &format!("{pods}/p/exec")),
        Level::Request
    );
    let deployments = "/apis/apps/v1/namespaces/a/deployments";
    assert_eq!(
        anyone(&p, "GET", &format!("{deployments}/d/scale")),
        Level::Metadata
    );
    // `resource/*` also matches the resource itself, as upstream.
    assert_eq!(
        anyone(&p, "GET", &format!("{deployments}/d")),
        Level::Metadata
    );
    assert_eq!(anyone(&p, "GET", "/apis/batch/v1/jobs"), Level::Request);
    assert_eq!(anyone(&p, "GET", "/version"), Level::None);
}

#[test]
fn groups_must_match_exactly() {
    let p = policy(
        r#"rules:
- level: Metadata
  resources:
  - group: "apps"
- level: Request
  resources:
  - group: ""
"#,
    );
    assert_eq!(
        anyone(&p, "GET", "/apis/apps/v1/deployments"),
        Level::Metadata
    );
    assert_eq!(anyone(&p, "GET", "/api/v1/pods"), Level::Request);
    assert_eq!(anyone(&p, "GET", "/apis/batch/v1/jobs"), Level::None);
}

#[test]
fn resource_names_narrow_a_resource() {
    let p = policy(
        r#"rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["controller-leader"]
- level: Metadata
"#,
    );
    let cms = "/api/v1/namespaces/kube-system/configmaps";
    assert_eq!(
        anyone(&p, "PUT", &format!("{cms}/controller-leader")),
        Level::RequestResponse
    );
    assert_eq!(anyone(&p, "PUT", &format!("{cms}/other")), Level::Metadata);
    // A list selecting one name by field selector carries that name, as upstream.
    let selected = format!("{cms}?fieldSelector=metadata.name%3Dcontroller-leader");
    assert_eq!(anyone(&p, "GET", &selected), Level::RequestResponse);
    assert_eq!(anyone(&p, "GET", cms), Level::Metadata);
}

#[test]
fn namespaces_with_the_empty_one_for_cluster_scope() {
    let p = policy(
        r#"rules:
- level: Request
  namespaces: ["kube-system"]
- level: Metadata
  namespaces: [""]
"#,
    );
    assert_eq!(
        anyone(&p, "GET", "/api/v1/namespaces/kube-system/pods"),
        Level::Request
    );
    assert_eq!(anyone(&p, "GET", "/api/v1/nodes"), Level::Metadata);
    assert_eq!(anyone(&p, "GET", "/api/v1/pods"), Level::Metadata);
    assert_eq!(
        anyone(&p, "GET", "/api/v1/namespaces/default/pods"),
        Level::None
    );
    // A namespace rule never matches a non-resource request.
    assert_eq!(anyone(&p, "GET", "/healthz"), Level::None);
}

#[test]
fn non_resource_urls_exact_prefix_and_any() {
    let p = policy(
        r#"rules:
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: Request
  nonResourceURLs: ["/openapi/*"]
- level: Metadata
  nonResourceURLs: ["*"]
"#,
    );
    assert_eq!(anyone(&p, "GET", "/healthz"), Level::None);
    assert_eq!(anyone(&p, "GET", "/healthz/etcd"), Level::None);
    assert_eq!(anyone(&p, "GET", "/version"), Level::None);
    assert_eq!(anyone(&p, "GET", "/version/x"), Level::Metadata);
    assert_eq!(anyone(&p, "GET", "/openapi/v2"), Level::Request);
    assert_eq!(anyone(&p, "GET", "/openapi"), Level::Metadata);
    assert_eq!(anyone(&p, "GET", "/apis"), Level::Metadata);
    // Resource requests never match non-resource rules.
    assert_eq!(anyone(&p, "GET", "/api/v1/pods"), Level::None);
}

#[test]
fn first_match_wins_and_stages_are_unions() {
    let p = policy(
        r#"omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [alice]
  omitStages: [ResponseStarted]
  omitManagedFields: false
- level: RequestResponse
  users: [alice, bob]
"#,
    );
    let alice = decide(&p, "alice", &[], "GET", "/api/v1/pods");
    assert_eq!(alice.level, Level::Metadata);
    assert!(alice.omit_stages.contains(Stage::RequestReceived));
    assert!(alice.omit_stages.contains(Stage::ResponseStarted));
    assert!(!alice.omit_stages.contains(Stage::ResponseComplete));
    let bob = decide(&p, "bob", &[], "GET", "/api/v1/pods");
    assert_eq!(bob.level, Level::RequestResponse);
    assert!(bob.omit_stages.contains(Stage::RequestReceived));
    assert!(!bob.omit_stages.contains(Stage::ResponseStarted));
}

#[test]
fn omit_managed_fields_rule_overrides_policy() {
    let p = policy(
        "omitManagedFields: true
rules:
- level: Request
  users: [alice]
  omitManagedFields: false
- level: Request
",
    );
    assert!(!decide(&p, "alice", &[], "GET", "/api").omit_managed_fields);
    assert!(decide(&p, "bob", &[], "GET", "/api").omit_managed_fields);
}

#[test]
fn nulls_read_as_empty_and_json_is_accepted() {
    let p = policy("rules:\n- level: Metadata\n  users:\n  verbs: null\n");
    assert_eq!(anyone(&p, "GET", "/api"), Level::Metadata);
    let json = r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"Request"}]}"#;
    let p = Policy::parse(json).expect("json");
    assert_eq!(anyone(&p, "GET", "/api"), Level::Request);
}

#[test]
fn unknown_fields_are_ignored_as_upstream_falls_back_to_lenient() {
    let p = policy("metadata:\n  name: x\nrules:\n- level: Metadata\n  levle: None\n");
    assert_eq!(p.rule_count(), 1);
}

#[test]
fn invalid_policies_are_refused_with_the_field() {
    assert_eq!(problem("rules: []"), "loaded illegal policy with 0 rules");
    assert_eq!(
        problem("rules:\n- users: [a]"),
        "rules[0].level: Required value"
    );
    assert!(problem("rules:\n- level: Everything")
        .starts_with("rules[0].level: Unsupported value: \"Everything\": supported values:"));
    assert!(problem("rules:\n- level: None\n  nonResourceURLs: [healthz]")
        .contains("rules[0].nonResourceURLs[0]: Invalid value: \"healthz\": non-resource URL rules must begin with a '/'"));
    assert!(
        problem("rules:\n- level: None\n  nonResourceURLs: [\"/a*b\"]")
            .contains("wildcards '*' must be the final character")
    );
    assert!(
        problem("rules:\n- level: None\n  nonResourceURLs: [/a]\n  namespaces: [x]")
            .contains("rules cannot apply to both regular resources and non-resource URLs")
    );
    assert!(
        problem("rules:\n- level: None\n  resources: [{group: Apps}]")
            .contains("rules[0].resources[0].group: Invalid value: \"Apps\"")
    );
    assert!(
        problem("rules:\n- level: None\n  resources: [{resourceNames: [a]}]")
            .contains("using resourceNames requires at least one resource")
    );
    let both = problem("omitStages: [Done]\nrules:\n- level: None\n  omitStages: [Never]");
    assert!(
        both.starts_with("[omitStages[0]: Invalid value: \"Done\""),
        "{both}"
    );
    assert!(
        both.contains(", rules[0].omitStages[0]: Invalid value: \"Never\""),
        "{both}"
    );
}

#[test]
fn documents_that_are_not_policies_are_refused() {
    let wrong = |text: &str| Policy::parse(text).expect_err("refused").to_string();
    assert_eq!(wrong("kind: Policy\nrules: []"), "apiVersion is missing");
    assert!(wrong("apiVersion: audit.k8s.io/v1beta1\nkind: Policy").contains("unknown apiVersion"));
    assert!(wrong("apiVersion: audit.k8s.io/v1\nkind: Event").contains("unknown kind"));
    assert!(wrong("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: {").starts_with("decoding:"));
    assert!(wrong("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: 3").starts_with("decoding:"));
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    let missing = Policy::load(&path).expect_err("missing").to_string();
    assert!(
        missing.starts_with(&format!("audit policy file {path:?}: ")),
        "{missing}"
    );
    std::fs::write(&path, format!("{HEADER}rules:\n- level: Bad\n")).expect("write");
    let bad = Policy::load(&path).expect_err("invalid").to_string();
    assert!(
        bad.contains("policy.yaml\": rules[0].level: Unsupported value"),
        "{bad}"
    );
    std::fs::write(&path, format!("{HEADER}rules:\n- level: Metadata\n")).expect("write");
    assert_eq!(Policy::load(&path).expect("valid").rule_count(), 1);
}

#[test]
fn resource_patterns_compare_without_allocating() {
    assert!(equals_combined("pods/log", "pods", "log"));
    assert!(!equals_combined("pods/log", "pods", "logs"));
    assert!(!equals_combined("podsxlog", "pods", "log"));
    assert!(!equals_combined("pods", "pods", "log"));
    assert!(equals_combined("pods", "pods", ""));
    assert!(resource_matches("*", "pods", "log"));
    assert!(resource_matches("*/log", "pods", "log"));
    assert!(!resource_matches("*/log", "pods", ""));
    assert!(resource_matches("pods/*", "pods", ""));
    assert!(!resource_matches("pods/*", "nodes", "proxy"));
}
