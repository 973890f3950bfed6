//! Authentication of the sample-apiserver: front-proxy client certificates with `X-Remote-*`
//! headers, static bearer tokens (with impersonation), TokenReview and `whoami`.

use std::path::Path;

use apiagg_tests::pki::{self, Ca};
use apiagg_tests::Sample;
use serde_json::{json, Value};

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// The body of every 401.
fn unauthorized() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
}

/// A client trusting the sample's serving CA, presenting `identity` (cert, key PEM) if any.
fn tls_client(sample: &Sample, identity: Option<&(String, String)>) -> reqwest::Client {
    let dir = sample.cert_dir.as_ref().expect("a TLS sample");
    let ca = std::fs::read(dir.path().join("ca.crt")).expect("ca.crt");
    let mut builder = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("CA PEM"))
        .http1_only();
    if let Some((cert, key)) = identity {
        let pem = format!("{cert}{key}");
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
    }
    builder.build().expect("client")
}

/// Sends a request with `headers` (a repeated name sends several values); returns the status
/// and the body as JSON (`null` when it is not JSON).
async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Value) {
    let mut req = client.request(method, url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(body) = body {
        req = req
            .header("Content-Type", "application/json")
            .body(body.to_string());
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let code = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn get(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    send(client, reqwest::Method::GET, url, headers, None).await
}

/// A WebSocket upgrade request: its status (101 when accepted).
async fn upgrade_status(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut all = vec![
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    all.extend_from_slice(headers);
    get(client, url, &all).await.0
}

/// The subject organizations of a PEM certificate, in order.
fn organizations(cert_pem: &str) -> Vec<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).expect("PEM");
    let cert = pem.parse_x509().expect("certificate");
    let subject = cert.subject();
    let names = subject.iter_organization();
    names
        .map(|o| o.as_str().expect("UTF-8 O").to_string())
        .collect()
}

/// Headers of a front proxy naming alice (an escaped extra key, a group with a comma).
const ALICE: &[(&str, &str)] = &[
    ("X-Remote-User", "alice"),
    ("X-Remote-User", "ignored-second-user"),
    ("X-Remote-Uid", "uid-alice"),
    ("X-Remote-Group", "devs"),
    ("X-Remote-Group", "a,b"),
    ("X-Remote-Extra-Example.org%2Fscopes", "read"),
    ("X-Remote-Extra-example.org%2FScopes", "write"),
    ("X-Remote-Extra-Team", "blue"),
];

fn alice() -> Value {
    json!({"user": "alice", "uid": "uid-alice", "groups": ["devs", "a,b"],
        "extra": {"example.org/scopes": ["read", "write"], "team": ["blue"]}, "via": "front-proxy"})
}

#[tokio::test]
async fn front_proxy_client_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("front-proxy-ca");
    let ca_file = ca.write_ca(dir.path(), "front-proxy-ca");
    let sample = Sample::start(
        &[
            "--requestheader-client-ca-file",
            ca_file.to_str().expect("utf8"),
            "--requestheader-allowed-names",
            "front-proxy-client",
            "--requestheader-allowed-names",
            "other-proxy,aggregator",
        ],
        true,
    );
    let whoami = format!("{}{GV}/whoami", sample.url);

    // An allowed CN (its certificate has two O's: a re-signed subject) and the headers.
    let pair = ca.client("front-proxy-client", &["system:masters", "proxies"]);
    assert_eq!(
        organizations(&pair.0),
        ["system:masters", "proxies"],
        "one O per group"
    );
    let proxy = tls_client(&sample, Some(&pair));
    assert_eq!(get(&proxy, &whoami, ALICE).await, (200, alice()));
    let debug_whoami = format!("{}/debug/whoami", sample.url);
    assert_eq!(get(&proxy, &debug_whoami, ALICE).await, (200, alice()));
    let aggregator = tls_client(&sample, Some(&ca.client("aggregator", &[])));
    assert_eq!(get(&aggregator, &whoami, ALICE).await.1["user"], "alice");
    // A trusted connection without X-Remote-User is not authenticated.
    assert_eq!(get(&proxy, &whoami, &[]).await, (401, unauthorized()));
    assert_eq!(
        upgrade_status(&proxy, &format!("{}{GV}/exec", sample.url), ALICE).await,
        101
    );

    // No certificate, another CA's certificate, an allowed-CA certificate with another CN:
    // the handshake succeeds and the request is refused, upgrades included.
    let other_ca = Ca::new("front-proxy-ca");
    let refused = [
        ("no certificate", tls_client(&sample, None)),
        (
            "another CA",
            tls_client(&sample, Some(&other_ca.client("front-proxy-client", &[]))),
        ),
        (
            "CN not allowed",
            tls_client(&sample, Some(&ca.client("someone-else", &[]))),
        ),
    ];
    for (case, client) in &refused {
        assert_eq!(
            get(client, &whoami, ALICE).await,
            (401, unauthorized()),
            "{case}"
        );
        assert_eq!(get(client, &debug_whoami, ALICE).await.0, 401, "{case}");
        let flunders = format!("{}{GV}/flunders", sample.url);
        assert_eq!(get(client, &flunders, ALICE).await.0, 401, "{case}");
        let exec = format!("{}{GV}/exec", sample.url);
        assert_eq!(upgrade_status(client, &exec, ALICE).await, 401, "{case}");
        // Health and debug paths stay open.
        for open in ["/healthz", "/livez", "/readyz", "/debug/requests"] {
            let url = format!("{}{open}", sample.url);
            assert_eq!(get(client, &url, &[]).await.0, 200, "{case}: {open}");
        }
    }
    assert_eq!(sample.requests(&format!("{GV}/whoami")).await, 6);
}

/// Writes the token file in one go.
fn write_tokens(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write tokens");
    std::fs::rename(&tmp, path).expect("rename tokens");
}

#[tokio::test]
async fn static_tokens_reviews_and_impersonation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    write_tokens(
        &tokens,
        "# token,user,uid,groups\n\ntok-admin,admin,uid-admin,\"system:masters,admins\",scopes=read,scopes=write\ntok-plain,plain,,\n",
    );
    let sample = Sample::start(&["--require-token", tokens.to_str().expect("utf8")], false);
    let client = apiagg_tests::client();
    let whoami = format!("{}{GV}/whoami", sample.url);
    let admin = [("Authorization", "Bearer tok-admin")];

    assert_eq!(get(&client, &whoami, &[]).await, (401, unauthorized()));
    let bad = [("Authorization", "Bearer nope")];
    assert_eq!(get(&client, &whoami, &bad).await, (401, unauthorized()));
    assert_eq!(
        get(&client, &format!("{}/healthz", sample.url), &[])
            .await
            .0,
        200
    );
    let admin_json = json!({"user": "admin", "uid": "uid-admin",
        "groups": ["system:masters", "admins", "system:authenticated"],
        "extra": {"scopes": ["read", "write"]}, "via": "token"});
    assert_eq!(get(&client, &whoami, &admin).await, (200, admin_json));
    let plain = [("Authorization", "Bearer tok-plain")];
    let plain_json =
        json!({"user": "plain", "groups": ["system:authenticated"], "extra": {}, "via": "token"});
    let debug_whoami = format!("{}/debug/whoami", sample.url);
    assert_eq!(get(&client, &debug_whoami, &plain).await, (200, plain_json));
    assert_eq!(get(&client, &debug_whoami, &[]).await.0, 401);
    let exec = format!("{}{GV}/exec", sample.url);
    assert_eq!(upgrade_status(&client, &exec, &[]).await, 401);
    assert_eq!(upgrade_status(&client, &exec, &admin).await, 101);

    // Impersonation by a token user.
    let mut impersonating = admin.to_vec();
    impersonating.extend([
        ("Impersonate-User", "bob"),
        ("Impersonate-Uid", "uid-bob"),
        ("Impersonate-Group", "devs"),
        ("Impersonate-Group", "ops"),
        ("Impersonate-Extra-Example.org%2Fscopes", "x"),
        ("Impersonate-Extra-Example.org%2Fscopes", "y"),
    ]);
    let bob = json!({"user": "bob", "uid": "uid-bob",
        "groups": ["devs", "ops", "system:authenticated"],
        "extra": {"example.org/scopes": ["x", "y"]}, "impersonatedBy": "admin", "via": "token"});
    assert_eq!(get(&client, &whoami, &impersonating).await, (200, bob));
    let no_user = [admin[0], ("Impersonate-Group", "devs")];
    assert_eq!(get(&client, &whoami, &no_user).await.0, 400);
    let anonymous_impersonation = [("Impersonate-User", "bob")];
    assert_eq!(get(&client, &whoami, &anonymous_impersonation).await.0, 401);

    // TokenReview: the reviewer authenticates too.
    let reviews = format!("{}{REVIEWS}", sample.url);
    let review = |token: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
        .to_string()
    };
    let post = |headers: &'static [(&'static str, &'static str)], body: String| {
        let (client, url) = (client.clone(), reviews.clone());
        async move { send(&client, reqwest::Method::POST, &url, headers, Some(&body)).await }
    };
    const REVIEWER: &[(&str, &str)] = &[("Authorization", "Bearer tok-plain")];
    let (code, body) = post(REVIEWER, review("tok-admin")).await;
    assert_eq!(code, 201);
    assert_eq!(body["kind"], "TokenReview");
    assert_eq!(body["spec"]["token"], "tok-admin");
    assert_eq!(
        body["status"],
        json!({"authenticated": true, "user": {"username": "admin", "uid": "uid-admin",
            "groups": ["system:masters", "admins", "system:authenticated"],
            "extra": {"scopes": ["read", "write"]}}})
    );
    let (code, body) = post(REVIEWER, review("tok-plain")).await;
    assert_eq!(code, 201);
    assert_eq!(
        body["status"],
        json!({"authenticated": true,
            "user": {"username": "plain", "groups": ["system:authenticated"]}})
    );
    let (code, body) = post(REVIEWER, review("wrong")).await;
    assert_eq!(code, 201);
    assert_eq!(
        body["status"],
        json!({"authenticated": false, "error": "invalid token"})
    );
    let (code, body) = post(REVIEWER, "{not json".into()).await;
    assert_eq!(
        (code, body["kind"].as_str(), body["code"].as_u64()),
        (400, Some("Status"), Some(400))
    );
    assert_eq!(post(&[], review("tok-admin")).await, (401, unauthorized()));
    assert_eq!(sample.requests(REVIEWS).await, 5);

    // Rotation: the file is read per request.
    write_tokens(&tokens, "tok-rotated,admin,uid-admin,admins\n");
    let rotated = [("Authorization", "Bearer tok-rotated")];
    assert_eq!(get(&client, &whoami, &rotated).await.1["user"], "admin");
    assert_eq!(get(&client, &whoami, &admin).await, (401, unauthorized()));
    const ROTATED: &[(&str, &str)] = &[("Authorization", "Bearer tok-rotated")];
    let (_, body) = post(ROTATED, review("tok-admin")).await;
    assert_eq!(body["status"]["authenticated"], false);
}

#[tokio::test]
async fn front_proxy_or_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("front-proxy-ca");
    let ca_file = ca.write_ca(dir.path(), "front-proxy-ca");
    let tokens = dir.path().join("tokens.csv");
    write_tokens(&tokens, "tok,tokenuser,,\n");
    let sample = Sample::start(
        &[
            "--requestheader-client-ca-file",
            ca_file.to_str().expect("utf8"),
            "--require-token",
            tokens.to_str().expect("utf8"),
        ],
        true,
    );
    let whoami = format!("{}{GV}/whoami", sample.url);
    // No allowed names: any CN of the CA is a front proxy.
    let pair = ca.client("any-name", &[]);
    let (cert, key) = pki::write_pair(dir.path(), "proxy", &pair);
    assert!(cert.is_file() && key.is_file());
    let proxy = tls_client(&sample, Some(&pair));
    assert_eq!(get(&proxy, &whoami, ALICE).await, (200, alice()));
    // The proxy's connection without X-Remote-User may still use a token.
    let token = [("Authorization", "Bearer tok")];
    assert_eq!(get(&proxy, &whoami, &token).await.1["via"], "token");
    let anonymous = tls_client(&sample, None);
    assert_eq!(
        get(&anonymous, &whoami, &token).await.1["user"],
        "tokenuser"
    );
    assert_eq!(get(&anonymous, &whoami, ALICE).await, (401, unauthorized()));
}

#[tokio::test]
async fn without_flags_nothing_is_refused() {
    let sample = Sample::start(&[], false);
    let client = apiagg_tests::client();
    let anonymous = json!({"user": "", "groups": [], "extra": {}, "via": "none"});
    for path in [format!("{GV}/whoami"), "/debug/whoami".to_string()] {
        let url = format!("{}{path}", sample.url);
        assert_eq!(get(&client, &url, ALICE).await, (200, anonymous.clone()));
    }
    let flunders = format!("{}{GV}/flunders", sample.url);
    assert_eq!(get(&client, &flunders, &[]).await.0, 200);
    let reviews = format!("{}{REVIEWS}", sample.url);
    let (code, _) = send(&client, reqwest::Method::POST, &reviews, &[], Some("{}")).await;
    assert_eq!(code, 404);
}
