//! Trust end to end: callers authenticated by client certificate, static token, TokenReview and
//! a front proxy reach a backend that believes only apiagg's proxy client certificate, with their
//! exact identity; forged identity never arrives; the delegate sees the caller's own token or
//! apiagg's impersonation.

use apiagg_tests::trust::{Cluster, APIAGG_USER, OUTER_PROXY_CN, REVIEWED_TOKEN, STATIC_TOKEN};
use apiagg_tests::{G, V};
use serde_json::{json, Value};

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

fn whoami() -> String {
    format!("/apis/{G}/{V}/whoami")
}

fn groups(v: &Value) -> Vec<String> {
    v["groups"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|g| g.as_str())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The SHA-256 of the certificate `pem`'s DER, in lower-case hex.
fn sha256_hex(pem: &str) -> String {
    use base64::Engine;
    let base64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(base64)
        .expect("PEM");
    let digest = ring::digest::digest(&ring::digest::SHA256, &der);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_receive_the_exact_caller_and_nothing_forged() {
    let c = Cluster::start(false).await;

    // Client certificate: user = CN, groups = O; forged identity headers are dropped.
    let certificate = c.client_ca.client("alice", &["dev", "ops"]);
    let alice = c.client(Some(&certificate));
    let forged = [
        ("X-Remote-User", "admin"),
        ("X-Remote-Group", "system:masters"),
    ];
    let (code, who) = c.get(&alice, &whoami(), &forged).await;
    assert_eq!(code, 200, "{who}");
    assert_eq!(who["user"], "alice", "{who}");
    assert_eq!(who["via"], "front-proxy", "{who}");
    assert_eq!(
        groups(&who),
        ["dev", "ops", "system:authenticated"],
        "{who}"
    );
    // As kube-apiserver 1.30+: the certificate's SHA-256 is the credential's ID.
    let id = format!("X509SHA256={}", sha256_hex(&certificate.0));
    let extra = json!({"authentication.kubernetes.io/credential-id": [id]});
    assert_eq!(who["extra"], extra, "{who}");

    // A token from apiagg's static token file.
    let plain = c.client(None);
    let bearer = format!("Bearer {STATIC_TOKEN}");
    let (code, who) = c
        .get(&plain, &whoami(), &[("Authorization", &bearer)])
        .await;
    assert_eq!(code, 200, "{who}");
    assert_eq!(
        (&who["user"], &who["uid"]),
        (&json!("carol"), &json!("uid-carol")),
        "{who}"
    );
    assert_eq!(
        groups(&who),
        ["static-group", "system:authenticated"],
        "{who}"
    );

    // A service-account token only the delegate knows: TokenReview, asked once, then cached.
    let bearer = format!("Bearer {REVIEWED_TOKEN}");
    let before = c.delegate.requests(REVIEWS).await;
    for _ in 0..3 {
        let (code, who) = c
            .get(&plain, &whoami(), &[("Authorization", &bearer)])
            .await;
        assert_eq!(code, 200, "{who}");
        assert_eq!(who["user"], "system:serviceaccount:default:app", "{who}");
        assert_eq!(who["uid"], "uid-app", "{who}");
        assert_eq!(
            groups(&who),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated"
            ],
            "{who}"
        );
        assert_eq!(
            who["extra"],
            json!({"authentication.kubernetes.io/pod-name": ["app-1"]})
        );
    }
    assert_eq!(
        c.delegate.requests(REVIEWS).await - before,
        1,
        "TokenReview not cached"
    );

    // A front proxy in front of apiagg, trusted by its certificate, states the caller.
    let outer = c.client(Some(&c.front_proxy_ca.client(OUTER_PROXY_CN, &[])));
    let stated = [
        ("X-Remote-User", "dave"),
        ("X-Remote-Uid", "uid-dave"),
        ("X-Remote-Group", "g1"),
        ("X-Remote-Group", "g2"),
        ("X-Remote-Extra-Example.org%2FScopes", "read"),
    ];
    let (code, who) = c.get(&outer, &whoami(), &stated).await;
    assert_eq!(code, 200, "{who}");
    assert_eq!(
        (&who["user"], &who["uid"]),
        (&json!("dave"), &json!("uid-dave")),
        "{who}"
    );
    assert_eq!(groups(&who), ["g1", "g2", "system:authenticated"], "{who}");
    assert_eq!(
        who["extra"],
        json!({"example.org/scopes": ["read"]}),
        "{who}"
    );

    // The same headers from a caller that is no trusted front proxy count for nothing.
    let (_, who) = c.get(&alice, &whoami(), &stated).await;
    assert_eq!(who["user"], "alice", "{who}");
    // Only what apiagg derives from the certificate (its ID), nothing stated.
    let extra = who["extra"].as_object().expect("extra");
    let keys: Vec<&String> = extra.keys().collect();
    assert_eq!(
        keys,
        ["authentication.kubernetes.io/credential-id"],
        "{who}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_get_401_and_anonymous_can_be_refused() {
    let c = Cluster::start(false).await;
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401});

    let stranger = c.client(Some(
        &apiagg_tests::pki::Ca::new("other").client("eve", &["x"]),
    ));
    let plain = c.client(None);
    let not_allowed = c.client(Some(&c.front_proxy_ca.client("not-allowed", &[])));
    for (what, client, headers) in [
        ("certificate from another CA", &stranger, vec![]),
        ("no credentials, anonymous off", &plain, vec![]),
        (
            "unknown token",
            &plain,
            vec![("Authorization", "Bearer nope")],
        ),
        (
            "front proxy with a CN not allowed",
            &not_allowed,
            vec![("X-Remote-User", "x")],
        ),
    ] {
        for path in [whoami(), "/apis".to_string(), "/api/v1".to_string()] {
            let (code, body) = c.get(client, &path, &headers).await;
            assert_eq!((code, &body), (401, &unauthorized), "{what}: {path}");
        }
    }
    // Health needs no credentials.
    assert_eq!(c.get(&plain, "/readyz", &[]).await.0, 200);
    // The backend was never asked by anyone but apiagg.
    assert_eq!(c.backend.requests(&whoami()).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delegate_authenticates_tokens_and_sees_impersonation_for_the_rest() {
    let c = Cluster::start(true).await;
    let who = "/debug/whoami";

    // A token the delegate knows goes through unchanged: the delegate authenticates it.
    let plain = c.client(None);
    let bearer = format!("Bearer {REVIEWED_TOKEN}");
    let (code, seen) = c.get(&plain, who, &[("Authorization", &bearer)]).await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["user"], "system:serviceaccount:default:app", "{seen}");
    assert_eq!(seen["via"], "token", "{seen}");
    assert!(seen.get("impersonatedBy").is_none(), "{seen}");

    // A client-certificate caller, which the delegate cannot see, is impersonated by apiagg.
    let alice = c.client(Some(&c.client_ca.client("alice", &["dev"])));
    let (code, seen) = c.get(&alice, who, &[]).await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["user"], "alice", "{seen}");
    assert_eq!(seen["impersonatedBy"], APIAGG_USER, "{seen}");
    assert!(groups(&seen).contains(&"dev".to_string()), "{seen}");

    // So is a static-token caller; its own token never reaches the delegate.
    let bearer = format!("Bearer {STATIC_TOKEN}");
    let (code, seen) = c.get(&plain, who, &[("Authorization", &bearer)]).await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(
        (&seen["user"], &seen["uid"]),
        (&json!("carol"), &json!("uid-carol")),
        "{seen}"
    );
    assert_eq!(seen["impersonatedBy"], APIAGG_USER, "{seen}");

    // An anonymous caller gets no borrowed credentials: the delegate refuses it itself.
    let (code, _) = c.get(&plain, who, &[]).await;
    assert_eq!(code, 401);

    // Built-in groups registered with apiagg's token: the delegate's /apis is served.
    let (code, apis) = c.get(&alice, "/apis", &[]).await;
    assert_eq!(code, 200);
    assert!(apis.to_string().contains("\"apps\""), "{apis}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_and_discovery_stay_green_with_the_aggregator_identity() {
    let c = Cluster::start(true).await;
    let alice = c.client(Some(&c.client_ca.client("alice", &["system:monitoring"])));
    let (code, status) = c.get(&alice, "/debug/apiagg/status", &[]).await;
    assert_eq!(code, 200, "{status}");
    let text = status.to_string();
    assert!(text.contains(&format!("{V}.{G}")), "{text}");
    assert!(!text.contains("FailedDiscoveryCheck"), "{text}");
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let (code, aggregated) = c.get(&alice, "/apis", &[("Accept", accept)]).await;
    assert_eq!(code, 200);
    let group = aggregated["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == G))
        .unwrap_or_else(|| panic!("{G} missing: {aggregated}"));
    let version = &group["versions"][0];
    assert_eq!(version["freshness"], "Current", "{group}");
    assert!(
        !version["resources"]
            .as_array()
            .is_some_and(|r| r.is_empty()),
        "{group}"
    );
}
