//! The chain and impersonation on a real RBAC policy (the `apiagg-authz` index, fed JSON as the
//! cluster serves it): who decides, what a no-opinion and an error become, which impersonation
//! mode lets a caller in, and the `create` a pod connection needs.

use apiagg_authz::rbac::PolicyBuilder;

use super::super::chain::{Link, RbacSource};
use super::*;

fn metrics() -> AuthzMetrics {
    AuthzMetrics::register(&prometheus::Registry::new()).expect("metrics")
}

/// An RBAC source holding `objects` (JSON with `kind`), listed.
fn rbac(objects: &[Value]) -> Arc<RbacSource> {
    let mut builder = PolicyBuilder::new();
    for object in objects {
        builder.apply_json(object.clone()).expect("object");
    }
    let source = Arc::new(RbacSource::default());
    source.publish(builder.snapshot());
    source
}

fn authorizer(links: Vec<Link>) -> Authorizer {
    Authorizer {
        chain: Some(Arc::new(ArcSwap::from_pointee(Chain::new(
            links,
            metrics(),
        )))),
        builtin: Builtin::default(),
        modes: ModeCache::default(),
    }
}

/// A ClusterRole of `rules` bound to user `who`.
fn grant(name: &str, who: &str, rules: Value) -> [Value; 2] {
    [
        json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": name}, "rules": rules}),
        json!({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": who}]}),
    ]
}

struct World {
    clients: Clients,
    metrics: Metrics,
}

impl World {
    fn new() -> World {
        World {
            clients: Clients::new(1 << 20, Duration::from_secs(5)),
            metrics: Metrics::new().expect("metrics"),
        }
    }

    fn reviewer(&self) -> Reviewer<'_> {
        Reviewer {
            delegate: None,
            clients: &self.clients,
            metrics: &self.metrics,
            until: std::time::Instant::now() + ACCESS_CHECKS,
        }
    }
}

fn caller(name: &str, groups: &[&str]) -> Authenticated {
    let groups = groups.iter().map(|g| g.to_string()).collect();
    Authenticated {
        user: Arc::new(User::new(name.into(), String::new(), groups, Vec::new()).expect("user")),
        method: Method::ClientCertificate,
    }
}

async fn authorize(
    a: &Authorizer,
    who: &Authenticated,
    method: &str,
    target: &str,
) -> Result<(), Refusal> {
    let (path, query) = target
        .split_once('?')
        .map_or((target, None), |(p, q)| (p, Some(q)));
    let info = RequestInfo::new(method, path, query).expect("info");
    let headers = HeaderMap::new();
    let world = World::new();
    let request = AuthzRequest {
        info: &info,
        headers: &headers,
    };
    a.authorize(&request, who, world.reviewer())
        .await
        .map(|_reason| ())
}

#[tokio::test]
async fn the_first_allow_wins_a_no_opinion_passes_and_the_end_denies() {
    let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]);
    let source = rbac(&grant("reader", "alice", pods));
    let chain = authorizer(vec![Link::AlwaysDeny, Link::Rbac(source.clone())]);
    assert_eq!(
        authorize(
            &chain,
            &caller("alice", &[]),
            "GET",
            "/api/v1/namespaces/a/pods"
        )
        .await,
        Ok(())
    );
    let (text, _) = message(
        authorize(
            &chain,
            &caller("bob", &[]),
            "GET",
            "/api/v1/namespaces/a/pods",
        )
        .await
        .expect_err("bob"),
    );
    assert_eq!(
        text,
        r#"pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "a": Everything is forbidden."#
    );
    // system:masters is allowed before any authorizer is asked.
    let masters = caller("root", &["system:masters"]);
    assert_eq!(
        authorize(&chain, &masters, "DELETE", "/api/v1/nodes/n").await,
        Ok(())
    );
    // AlwaysAllow after a no-opinion allows.
    let open = authorizer(vec![Link::Rbac(source), Link::AlwaysAllow]);
    assert_eq!(
        authorize(&open, &caller("bob", &[]), "DELETE", "/api/v1/nodes/n").await,
        Ok(())
    );
}

#[tokio::test]
async fn objects_not_listed_yet_are_an_error_not_a_denial() {
    let unlisted = Arc::new(RbacSource::default());
    let chain = authorizer(vec![Link::Rbac(unlisted.clone())]);
    let refused = authorize(&chain, &caller("alice", &[]), "GET", "/api/v1/pods").await;
    assert!(
        matches!(&refused, Err(Refusal::Internal(m)) if m.contains("not listed yet")),
        "{refused:?}"
    );
    // A later authorizer that allows still allows (the error is only the answer when nobody
    // does).
    let chain = authorizer(vec![Link::Rbac(unlisted), Link::AlwaysAllow]);
    assert_eq!(
        authorize(&chain, &caller("alice", &[]), "GET", "/api/v1/pods").await,
        Ok(())
    );
}

#[tokio::test]
async fn a_pod_connection_opened_with_get_also_needs_create() {
    let get_only =
        json!([{"apiGroups": [""], "resources": ["pods/exec", "pods/attach"], "verbs": ["get"]}]);
    let both = json!([{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]);
    let mut objects = grant("get-only", "alice", get_only).to_vec();
    objects.extend(grant("both", "bob", both));
    let chain = authorizer(vec![Link::Rbac(rbac(&objects))]);
    let exec = "/api/v1/namespaces/a/pods/p/exec?command=ls&stdout=true";
    let (text, details) = message(
        authorize(&chain, &caller("alice", &[]), "GET", exec)
            .await
            .expect_err("alice may not create"),
    );
    assert_eq!(text, r#"pods "p" is forbidden: "#);
    assert_eq!(details, json!({"name": "p", "kind": "pods"}));
    assert_eq!(
        authorize(&chain, &caller("bob", &[]), "GET", exec).await,
        Ok(())
    );
    // A POST (SPDY) is a `create` already: one check.
    assert_eq!(
        authorize(&chain, &caller("bob", &[]), "POST", exec).await,
        Ok(())
    );
    // Other subresources read with GET are not connections.
    assert!(!is_pod_connect_get(&derive(
        "GET",
        "/api/v1/namespaces/a/pods/p/log"
    )));
    assert!(is_pod_connect_get(&derive(
        "GET",
        "/api/v1/namespaces/a/pods/p/portforward"
    )));
}

/// Impersonates per `headers` as `who` for `GET /api/v1/namespaces/a/pods`.
async fn impersonate(
    a: &Authorizer,
    who: &Authenticated,
    pairs: &[(&str, &str)],
) -> Result<Arc<User>, Refusal> {
    let info = RequestInfo::new("GET", "/api/v1/namespaces/a/pods", None).expect("info");
    let headers = headers(pairs);
    let world = World::new();
    let request = AuthzRequest {
        info: &info,
        headers: &headers,
    };
    let done = a.impersonate(&request, who, world.reviewer()).await?;
    Ok(done.expect("impersonated").user)
}

/// Security issue 42, finding 1: an impersonation only `AlwaysAllow` allowed is not honoured
/// by apiagg (it would act as the user with its own `impersonate` right at the delegate); one a
/// policy allowed, or a member of `system:masters` asked for, is.
#[tokio::test]
async fn always_allow_never_lends_apiaggs_impersonation() {
    let legacy = json!([{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["carol"]}]);
    let chain = authorizer(vec![
        Link::Rbac(rbac(&grant("legacy", "alice", legacy))),
        Link::AlwaysAllow,
    ]);
    assert!(chain.allows_everything());
    let info = RequestInfo::new("GET", "/api/v1/namespaces/a/pods", None).expect("info");
    let world = World::new();
    let asked = |pairs: &[(&str, &str)]| headers(pairs);
    let admin = asked(&[
        ("Impersonate-User", "admin"),
        ("Impersonate-Group", "system:masters"),
    ]);
    let request = AuthzRequest {
        info: &info,
        headers: &admin,
    };
    for who in [caller("mallory", &[]), caller("alice", &[])] {
        let done = chain.impersonate(&request, &who, world.reviewer()).await;
        assert!(matches!(done, Ok(None)), "{}: {done:?}", who.user.name);
    }
    // RBAC grants alice carol: apiagg acts as carol.
    let carol = impersonate(
        &chain,
        &caller("alice", &[]),
        &[("Impersonate-User", "carol")],
    )
    .await
    .expect("RBAC allows carol");
    assert_eq!(carol.name, "carol");
    // system:masters may impersonate anyone, AlwaysAllow or not.
    let admin = impersonate(
        &chain,
        &caller("root", &["system:masters"]),
        &[("Impersonate-User", "admin")],
    )
    .await
    .expect("system:masters");
    assert_eq!(admin.name, "admin");
    let policy_only = authorizer(vec![Link::Rbac(rbac(&[]))]);
    assert!(!policy_only.allows_everything());
}

#[tokio::test]
async fn constrained_modes_are_tried_before_the_legacy_verb() {
    let user_info = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["impersonate-on:user-info:list"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["users"], "verbs": ["impersonate:user-info"], "resourceNames": ["bob"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["groups"], "verbs": ["impersonate:user-info"], "resourceNames": ["dev"]},
    ]);
    let legacy = json!([{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["carol"]}]);
    let accounts = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["impersonate-on:serviceaccount:list"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["serviceaccounts"], "verbs": ["impersonate:serviceaccount"]},
    ]);
    let mut objects = grant("constrained", "alice", user_info).to_vec();
    objects.extend(grant("legacy", "alice", legacy));
    objects.extend(grant("accounts", "sam", accounts));
    let chain = authorizer(vec![Link::Rbac(rbac(&objects))]);
    let alice = caller("alice", &[]);

    let bob = impersonate(
        &chain,
        &alice,
        &[("Impersonate-User", "bob"), ("Impersonate-Group", "dev")],
    )
    .await
    .expect("user-info allows bob in dev");
    assert_eq!(
        (bob.name.as_str(), bob.groups.as_slice()),
        ("bob", &["dev".to_string(), AUTHENTICATED.to_string()][..])
    );
    // Only the legacy verb grants carol: the constrained refusals are passed over.
    let carol = impersonate(&chain, &alice, &[("Impersonate-User", "carol")])
        .await
        .expect("legacy");
    assert_eq!(carol.groups, [AUTHENTICATED]);
    // Nothing grants dave: the first refusal met is the answer. The mode that last allowed
    // alice (legacy, for carol) is tried first, so its refusal comes first...
    let (text, _) = message(
        impersonate(&chain, &alice, &[("Impersonate-User", "dave")])
            .await
            .expect_err("dave"),
    );
    assert_eq!(
        text,
        r#"users "dave" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    // ... while a caller with no remembered mode meets user-info's check of the user (its
    // check on the request itself is granted).
    let fresh = authorizer(vec![Link::Rbac(rbac(&objects))]);
    let (text, _) = message(
        impersonate(&fresh, &alice, &[("Impersonate-User", "dave")])
            .await
            .expect_err("dave"),
    );
    assert_eq!(
        text,
        r#"users.authentication.k8s.io "dave" is forbidden: User "alice" cannot impersonate:user-info resource "users" in API group "authentication.k8s.io" at the cluster scope"#
    );
    // system:masters is never given by user-info (and the legacy verb is not granted here).
    let masters = impersonate(
        &chain,
        &alice,
        &[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "system:masters"),
        ],
    )
    .await;
    assert!(
        matches!(masters, Err(Refusal::Forbidden { .. })),
        "{masters:?}"
    );
    // A service account gets its namespace's groups.
    let sa = impersonate(
        &chain,
        &caller("sam", &[]),
        &[("Impersonate-User", "system:serviceaccount:ns:builder")],
    )
    .await
    .expect("serviceaccount mode");
    assert_eq!(
        sa.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:ns",
            AUTHENTICATED
        ]
    );
}

#[test]
fn legacy_checks_name_each_thing_asked_for() {
    let wanted = wanted(&headers(&[
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Extra-Example.org%2Fscopes", "read"),
        ("Impersonate-Uid", "u-1"),
    ]))
    .expect("valid")
    .expect("some");
    let user = legacy_user(&wanted).expect("user");
    assert_eq!((user.name.as_str(), user.uid.as_str()), ("bob", "u-1"));
    assert_eq!(user.groups, ["dev", AUTHENTICATED]);
    assert_eq!(
        user.extra,
        [("example.org/scopes".to_string(), vec!["read".to_string()])]
    );
    assert_eq!(
        wanted_error(&[("Impersonate-Group", "x")]),
        Some(ImpersonationError::NoUser)
    );
    assert!(super::super::impersonation::wanted(&headers(&[]))
        .expect("none")
        .is_none());
}

/// Issue 46, item 2: values sent twice are checked once; past the cap nothing is checked (431).
#[test]
fn impersonation_values_are_deduplicated_and_capped() {
    let wanted = wanted(&headers(&[
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Group", "ops"),
        ("Impersonate-Extra-Scopes", "read"),
        ("Impersonate-Extra-Scopes", "read"),
    ]))
    .expect("valid")
    .expect("some");
    assert_eq!(wanted.groups, ["dev", "ops"]);
    assert_eq!(
        wanted.extra,
        [("scopes".to_string(), vec!["read".to_string()])]
    );
    let at_cap: Vec<String> = (0..MAX_IMPERSONATION_VALUES - 2)
        .map(|i| format!("g{i}"))
        .collect();
    let mut pairs = vec![("Impersonate-User", "bob")];
    pairs.extend(at_cap.iter().map(|g| ("Impersonate-Group", g.as_str())));
    // The same group again and again is one value.
    pairs.extend(std::iter::repeat_n(("Impersonate-Group", "g0"), 500));
    assert!(wanted_error(&pairs).is_none(), "at the cap");
    pairs.push(("Impersonate-Group", "one-more"));
    assert_eq!(
        wanted_error(&pairs),
        Some(ImpersonationError::TooMany(pairs.len()))
    );
    // Issue 46, item 1: past the cap nothing more is compared (600 groups cost 63 values'
    // comparisons, not 180,000), and extra values count alike.
    let many: Vec<String> = (0..600).map(|i| format!("g{i}")).collect();
    let mut pairs = vec![("Impersonate-User", "bob")];
    pairs.extend(many.iter().map(|g| ("Impersonate-Group", g.as_str())));
    assert_eq!(wanted_error(&pairs), Some(ImpersonationError::TooMany(601)));
    let mut pairs = vec![("Impersonate-User", "bob")];
    pairs.extend(
        many[..62]
            .iter()
            .map(|g| ("Impersonate-Extra-Scopes", g.as_str())),
    );
    assert!(
        wanted_error(&pairs).is_none(),
        "at the cap with extra values"
    );
    pairs.push(("Impersonate-Extra-Other", "x"));
    assert_eq!(wanted_error(&pairs), Some(ImpersonationError::TooMany(64)));
}

/// Issue 46, item 2: the access checks of one request share one deadline; past it, 500.
#[tokio::test]
async fn access_checks_end_at_the_requests_deadline() {
    let chain = authorizer(vec![Link::AlwaysAllow]);
    let info = RequestInfo::new("GET", "/api/v1/namespaces/a/pods", None).expect("info");
    let world = World::new();
    let asked = headers(&[("Impersonate-User", "bob")]);
    let request = AuthzRequest {
        info: &info,
        headers: &asked,
    };
    let past = Reviewer {
        until: std::time::Instant::now(),
        ..world.reviewer()
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let refused = chain.authorize(&request, &caller("alice", &[]), past).await;
    assert!(
        matches!(&refused, Err(Refusal::Internal(m)) if m.contains("did not end within")),
        "{refused:?}"
    );
    let many: Vec<(&str, String)> = std::iter::once(("Impersonate-User", "bob".to_string()))
        .chain((0..MAX_IMPERSONATION_VALUES).map(|i| ("Impersonate-Group", format!("g{i}"))))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let too_many = headers(&many);
    let request = AuthzRequest {
        info: &info,
        headers: &too_many,
    };
    let refused = chain
        .impersonate(&request, &caller("alice", &[]), world.reviewer())
        .await;
    assert!(
        matches!(&refused, Err(Refusal::TooManyValues(m)) if m.contains("limit of 64")),
        "{refused:?}"
    );
}

fn wanted_error(pairs: &[(&str, &str)]) -> Option<ImpersonationError> {
    super::super::impersonation::wanted(&headers(pairs)).err()
}

#[tokio::test]
async fn an_allow_carries_its_authorizers_reason_and_a_denial_rbacs_empty_one() {
    let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    let chain = authorizer(vec![Link::Rbac(rbac(&grant("reader", "alice", pods)))]);
    let info = RequestInfo::new("GET", "/api/v1/namespaces/a/pods/p", None).expect("info");
    let (headers, world) = (HeaderMap::new(), World::new());
    let request = AuthzRequest {
        info: &info,
        headers: &headers,
    };
    let (alice, bob) = (caller("alice", &[]), caller("bob", &[]));
    let allowed = chain.authorize(&request, &alice, world.reviewer());
    let reason = allowed.await.expect("allowed");
    assert!(reason.starts_with("RBAC: allowed by "), "{reason}");
    assert!(reason.ends_with(" to User \"alice\""), "{reason}");
    match chain.authorize(&request, &bob, world.reviewer()).await {
        Err(Refusal::Forbidden { reason, .. }) => assert_eq!(reason, ""),
        other => panic!("bob: {other:?}"),
    }
}
