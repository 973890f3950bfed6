//! Differential authentication: the identity apiagg gives a caller equals the one
//! kube-apiserver gives it. A SelfSubjectReview sent to kube-apiserver answers with the
//! caller's identity there; sent through apiagg, it reaches kube-apiserver (the delegate) as
//! the identity apiagg authenticated, passed on as apiagg passes every caller on. Compared for
//! a bound service-account token, an x509 user, an impersonation with a UID and extras, an
//! expired token, an unknown one, and no credentials.

use std::time::{SystemTime, UNIX_EPOCH};

use apiagg_tests::real_kube::RealKube;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use serde_json::{json, Value};

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const NAMESPACE: &str = "authn-diff";

/// A client trusting the control plane's CA, with a client certificate (`identity`) or the
/// `headers` on each request.
struct Caller {
    name: &'static str,
    client: reqwest::Client,
    headers: reqwest::header::HeaderMap,
}

impl Caller {
    fn new(name: &'static str, kube: &RealKube, identity: Option<&(String, String)>) -> Caller {
        let headers = reqwest::header::HeaderMap::new();
        let client = kube.client(identity);
        Caller {
            name,
            client,
            headers,
        }
    }

    fn with(mut self, header: &'static str, value: &str) -> Caller {
        self.headers
            .append(header, value.parse().expect("header value"));
        self
    }

    /// A SelfSubjectReview at `url`: the status code and the identity (the Status of a
    /// refusal: its reason and message).
    async fn review(&self, url: &str) -> (u16, Value) {
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let sent = self.client.post(url).headers(self.headers.clone());
        let answer = sent.json(&review).send().await.expect("SelfSubjectReview");
        let code = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        let read = match code {
            201 => body["status"]["userInfo"].clone(),
            _ => json!({"reason": body["reason"], "message": body["message"]}),
        };
        (code, read)
    }
}

/// A service-account token as kube-apiserver issues them, expired an hour ago: signed with the
/// cluster's service-account key (ES256), for `namespace/name` of `uid`.
fn expired_token(kube: &RealKube, namespace: &str, name: &str, uid: &str) -> String {
    let pem = std::fs::read_to_string(kube.dir.join("service-account.key")).expect("key");
    let base64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let pkcs8 = STANDARD.decode(base64).expect("PEM");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("time");
    let now = now.as_secs();
    let issuer = "https://kubernetes.default.svc";
    let claims = json!({"iss": issuer, "aud": [issuer], "iat": now - 7200, "nbf": now - 7200,
        "exp": now - 3600, "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}}});
    let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
    let header = json!({"alg": "ES256", "typ": "JWT"});
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let key = ring::signature::EcdsaKeyPair::from_pkcs8(alg, &pkcs8, &rng).expect("P-256 key");
    let signature = key.sign(&rng, input.as_bytes()).expect("signature");
    format!("{input}.{}", b64(signature.as_ref()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiagg_gives_callers_kube_apiservers_identity() {
    let kube = RealKube::shared().await;
    kube.namespace(NAMESPACE).await;
    let token = kube.service_account_token(NAMESPACE, "reader").await;
    let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/reader");
    let (_, account) = kube.admin("GET", &path, None).await;
    let uid = account["metadata"]["uid"].as_str().expect("uid");
    let expired = expired_token(kube, NAMESPACE, "reader", uid);
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let bearer = |name, token: &str| {
        Caller::new(name, kube, None).with("authorization", &format!("Bearer {token}"))
    };
    let erin = kube.client_ca.client("erin", &["team-e", "team-f"]);
    let callers = [
        bearer("a bound service-account token", &token),
        Caller::new("an x509 user", kube, Some(&erin)),
        Caller::new(
            "an impersonation with a UID and extras",
            kube,
            Some(&kube.admin),
        )
        .with("impersonate-user", "frank")
        .with("impersonate-uid", "uid-1234")
        .with("impersonate-group", "team-g")
        .with("impersonate-extra-scopes", "view")
        .with("impersonate-extra-scopes", "edit")
        .with("impersonate-extra-example.com%2freason", "on call"),
        bearer("an expired service-account token", &expired),
        bearer("an unknown token", "not-a-token"),
        Caller::new("no credentials", kube, None),
    ];
    let (mut table, mut differ) = (String::new(), Vec::new());
    for caller in &callers {
        let theirs = caller.review(&kube.kube_url(REVIEWS)).await;
        let ours = caller.review(&front.url(REVIEWS)).await;
        let line = format!(
            "{}: kube-apiserver {} {}, apiagg {} {}\n",
            caller.name, theirs.0, theirs.1, ours.0, ours.1
        );
        if theirs != ours {
            differ.push(line.clone());
        }
        table += &line;
    }
    eprintln!("identities:\n{table}");
    assert!(differ.is_empty(), "identities differ:\n{}", differ.concat());
    // The rows prove something: the bound token's identity carries its credential's extras.
    let (code, identity) = callers[0].review(&front.url(REVIEWS)).await;
    assert_eq!(code, 201, "{identity}");
    assert_eq!(
        identity["username"],
        format!("system:serviceaccount:{NAMESPACE}:reader")
    );
    assert!(identity["extra"].is_object(), "{identity}");
}
