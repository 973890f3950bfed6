//! An issuer against a small HTTPS server on loopback whose documents each test chooses: what
//! a fetch accepts and refuses, and how often a flood of forged `kid`s reaches the provider.

use std::collections::HashMap;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// What the server answers, by path: status and body.
type Routes = Arc<std::sync::Mutex<HashMap<String, (u16, Vec<u8>)>>>;

/// A TLS server answering GETs from `routes` (path → status, body), counting requests per path.
struct Provider {
    url: String,
    ca_pem: String,
    routes: Routes,
    hits: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

impl Provider {
    async fn start() -> Provider {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("cert");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
        )
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("https://{}", listener.local_addr().expect("addr"));
        let routes: Routes = Arc::default();
        let hits: Arc<std::sync::Mutex<HashMap<String, usize>>> = Arc::default();
        let (served, counted) = (routes.clone(), hits.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, served, counted) =
                    (acceptor.clone(), served.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head);
                    let path = text.split(' ').nth(1).unwrap_or("").to_string();
                    *counted
                        .lock()
                        .expect("hits")
                        .entry(path.clone())
                        .or_default() += 1;
                    let (status, body) = served
                        .lock()
                        .expect("routes")
                        .get(&path)
                        .cloned()
                        .unwrap_or((404, b"{}".to_vec()));
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = tls.write_all(head.as_bytes()).await;
                    let _ = tls.write_all(&body).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Provider {
            url,
            ca_pem: ca_cert.pem(),
            routes,
            hits,
        }
    }

    fn serve(&self, path: &str, status: u16, body: impl Into<Vec<u8>>) {
        let mut routes = self.routes.lock().expect("routes");
        routes.insert(path.to_string(), (status, body.into()));
    }

    /// A discovery document naming `issuer` and `jwks_uri`.
    fn discovery(&self, issuer: &str, jwks_uri: &str) {
        let doc = json!({"issuer": issuer, "jwks_uri": jwks_uri}).to_string();
        self.serve("/.well-known/openid-configuration", 200, doc);
    }

    fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .expect("hits")
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    fn issuer(&self, ca_pem: &str) -> Arc<Issuer> {
        let config = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthenticationConfiguration",
            "jwt": [{
                "issuer": {"url": self.url, "certificateAuthority": ca_pem, "audiences": ["k"]},
                "claimMappings": {"username": {"claim": "sub", "prefix": ""}},
            }],
        });
        let mut loaded = apiagg_authn::load(config.to_string().as_bytes()).expect("config");
        let metrics = AuthnMetrics::register(&prometheus::Registry::new()).expect("metrics");
        let issuer = Issuer::new(loaded.jwt.remove(0), Arc::new(Semaphore::new(1)), metrics);
        Arc::new(issuer.expect("issuer"))
    }
}

/// A public ES256 JWK and a matching signing key for `kid`.
fn signing_key(kid: &str) -> (serde_json::Value, jsonwebtoken::EncodingKey) {
    let pair = KeyPair::generate().expect("key");
    let key = jsonwebtoken::EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).expect("pem");
    let jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::ES256)
        .expect("jwk");
    let mut jwk = serde_json::to_value(jwk).expect("json");
    jwk["kid"] = json!(kid);
    (jwk, key)
}

#[tokio::test]
async fn a_fetch_takes_only_what_the_issuer_itself_publishes_over_https() {
    let p = Provider::start().await;
    let jwks = format!("{}/keys", p.url);
    let (jwk, _) = signing_key("k");
    p.serve("/keys", 200, json!({"keys": [jwk]}).to_string());
    let issuer = p.issuer(&p.ca_pem);

    p.discovery(&p.url, &jwks);
    assert_eq!(issuer.fetch().await.map(|k| k.counts()).ok(), Some((1, 0)));

    p.discovery("https://evil.example.com", &jwks);
    let err = issuer
        .fetch()
        .await
        .err()
        .expect("another issuer")
        .to_string();
    assert!(
        err.contains("names issuer \"https://evil.example.com\""),
        "{err}"
    );

    p.discovery(&p.url, "http://127.0.0.1:1/keys");
    let err = issuer.fetch().await.err().expect("plain http").to_string();
    assert!(err.contains("is not https"), "{err}");

    p.discovery(&p.url, &jwks);
    p.serve("/keys", 200, vec![b' '; MAX_JWKS + 1]);
    let err = issuer.fetch().await.err().expect("huge").to_string();
    assert!(err.contains("larger than"), "{err}");

    p.serve("/keys", 302, "{}");
    let err = issuer.fetch().await.err().expect("redirect").to_string();
    assert!(err.contains("status 302"), "{err}");

    p.serve(
        "/keys",
        200,
        json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}).to_string(),
    );
    let err = issuer
        .fetch()
        .await
        .err()
        .expect("symmetric only")
        .to_string();
    assert!(err.contains("no usable signing key"), "{err}");

    // Another CA than the one configured: the TLS handshake fails, nothing is read.
    let stranger = Provider::start().await;
    let wrong_ca = p.issuer(&stranger.ca_pem);
    let err = wrong_ca.fetch().await.err().expect("untrusted").to_string();
    assert!(err.contains("discovery"), "{err}");
}

/// An issuer running against a provider that publishes one ES256 key under `kid`, and claims
/// it accepts.
struct Running {
    p: Provider,
    issuer: Arc<Issuer>,
    key: jsonwebtoken::EncodingKey,
    claims: serde_json::Value,
    _stop: watch::Sender<()>,
}

impl Running {
    async fn start(kid: &str) -> Running {
        let p = Provider::start().await;
        let (jwk, key) = signing_key(kid);
        p.serve("/keys", 200, json!({"keys": [jwk]}).to_string());
        p.discovery(&p.url, &format!("{}/keys", p.url));
        let issuer = p.issuer(&p.ca_pem);
        let (stop, stopped) = watch::channel(());
        tokio::spawn(issuer.clone().run(stopped));
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("epoch")
            .as_secs();
        let claims = json!({"iss": p.url, "aud": "k", "sub": "alice", "exp": now + 300});
        Running {
            p,
            issuer,
            key,
            claims,
            _stop: stop,
        }
    }

    /// The claims signed by `key` (the published one when `None`), naming `kid` when given.
    fn sign(&self, kid: Option<&str>, key: Option<&jsonwebtoken::EncodingKey>) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&header, &self.claims, key.unwrap_or(&self.key)).expect("sign")
    }

    /// Authenticates `token` once the key set was fetched (the loop fetches it at start).
    async fn first(&self, token: &str) -> Option<Arc<User>> {
        for _ in 0..100 {
            if let Ok(user) = self.issuer.authenticate(token).await {
                return Some(user);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_kids_reach_the_provider_at_most_once_per_interval() {
    let r = Running::start("real").await;
    let ok = r.first(&r.sign(Some("real"), None)).await;
    assert_eq!(ok.map(|u| u.name.clone()).as_deref(), Some("alice"));
    let before = r.p.hits("/keys");
    for i in 0..50 {
        let forged = r.sign(Some(&format!("forged-{i}")), None);
        let refused = r.issuer.authenticate(&forged).await;
        assert!(refused.is_err());
    }
    let fetched = r.p.hits("/keys") - before;
    assert!(fetched <= 1, "{fetched} key set fetches for 50 forged kids");
}

/// Security issue 42, finding 4: a cached token holds only while the very key that verified
/// it is published. A token without `kid`, and one whose key was replaced under the same
/// `kid`, end at the next fetch of the key set (they held for up to an hour before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_token_ends_with_the_key_that_verified_it() {
    let r = Running::start("k1").await;
    let (without_kid, with_kid) = (r.sign(None, None), r.sign(Some("k1"), None));
    assert!(
        r.first(&without_kid).await.is_some(),
        "the key set was fetched"
    );
    assert!(r.issuer.authenticate(&with_kid).await.is_ok());
    assert!(r.issuer.cached(&without_kid).await.is_some());
    assert!(r.issuer.cached(&with_kid).await.is_some());

    // The operator replaces the key under the same kid; a token naming an unknown kid makes
    // apiagg fetch the key set now.
    let (replacement, new_key) = signing_key("k1");
    r.p.serve("/keys", 200, json!({"keys": [replacement]}).to_string());
    let before = r.p.hits("/keys");
    let unknown = r.sign(Some("unknown"), Some(&new_key));
    assert!(r.issuer.authenticate(&unknown).await.is_err());
    assert!(
        r.p.hits("/keys") > before,
        "the unknown kid fetched the key set"
    );
    assert!(
        r.issuer.cached(&without_kid).await.is_none(),
        "no kid: ended"
    );
    assert!(
        r.issuer.cached(&with_kid).await.is_none(),
        "same kid, other key: ended"
    );
    assert!(r.issuer.authenticate(&with_kid).await.is_err());
    assert!(r.issuer.authenticate(&without_kid).await.is_err());
    // The new key's tokens are accepted, and cached.
    let fresh = r.sign(Some("k1"), Some(&new_key));
    assert!(r.issuer.authenticate(&fresh).await.is_ok());
    assert!(r.issuer.cached(&fresh).await.is_some());
}
