//! Client certificates end to end: verified per request against the current CA bundle (a
//! rotated client CA reaches keep-alive connections already open), and an identity that cannot
//! be forwarded exactly is a 401, never a request with part of the identity left out.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use apiagg_tests::pki::Ca;
use apiagg_tests::trust::{Cluster, OUTER_PROXY_CN};
use apiagg_tests::{wait_until, G, V};

fn whoami() -> String {
    format!("/apis/{G}/{V}/whoami")
}

/// One HTTP/1.1 keep-alive connection to apiagg presenting `identity`: every request of a
/// [`KeptConnection`] travels on it (hyper's `SendRequest` has no pool to switch to another).
struct KeptConnection(hyper::client::conn::http1::SendRequest<Empty<Bytes>>);

impl KeptConnection {
    async fn open(c: &Cluster, identity: &(String, String)) -> KeptConnection {
        let tls = c.tls_connect(identity).await;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP/1.1");
        tokio::spawn(connection);
        KeptConnection(sender)
    }

    /// `GET path` on this connection: the status code.
    async fn get(&mut self, path: &str) -> u16 {
        self.0.ready().await.expect("the connection is still open");
        let request = hyper::Request::get(path)
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let response = self.0.send_request(request).await.expect("response");
        let code = response.status().as_u16();
        response.into_body().collect().await.expect("body");
        code
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_ca_reaches_open_keep_alive_connections() {
    let c = Cluster::start(false).await;
    let alice = c.client_ca.client("alice", &["dev"]);
    let mut kept = KeptConnection::open(&c, &alice).await;
    assert_eq!(kept.get(&whoami()).await, 200);
    assert_eq!(kept.get(&whoami()).await, 200, "the verdict is reused");

    // Replace the client CA with another one (written aside, then renamed into place).
    let rotated = Ca::new("rotated-client-ca");
    let aside = rotated.write_ca(&c.dir, "rotated");
    std::fs::rename(aside, c.dir.join("client-ca.crt")).expect("rotate");
    let fresh = c.client(Some(&alice));
    wait_until(
        "a new connection to see the rotated CA (401)",
        Duration::from_secs(20),
        || async { c.get(&fresh, &whoami(), &[]).await.0 },
        |code| *code == 401,
    )
    .await;

    // The connection opened before the rotation is verified again on its next request.
    assert_eq!(kept.get(&whoami()).await, 401);
    assert_eq!(
        kept.get("/readyz").await,
        200,
        "still the same open connection"
    );
    // A certificate of the new CA works, on a new connection and a kept one alike.
    let bob = rotated.client("bob", &[]);
    assert_eq!(c.get(&c.client(Some(&bob)), &whoami(), &[]).await.0, 200);
    assert_eq!(
        KeptConnection::open(&c, &bob).await.get(&whoami()).await,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_identity_that_cannot_be_forwarded_gets_401() {
    let c = Cluster::start(false).await;
    for (cn, orgs) in [
        ("mallory\u{1}", &[][..]),
        ("admin ", &[][..]),
        (" admin", &[][..]),
        ("del\u{7f}", &[][..]),
        ("eve", &["system:masters "][..]),
        ("eve", &["dev", "ops\u{1b}"][..]),
    ] {
        let caller = c.client(Some(&c.client_ca.client(cn, orgs)));
        for path in [whoami(), "/api/v1/namespaces".to_string()] {
            let (code, body) = c.get(&caller, &path, &[]).await;
            assert_eq!(code, 401, "{cn:?} {orgs:?} {path}: {body}");
        }
    }
    // Nothing reached the backend, with or without an identity.
    assert_eq!(c.backend.requests(&whoami()).await, 0);
    // Well-formed names still work, Unicode ones forwarded exactly.
    let alice = c.client(Some(&c.client_ca.client("alice smith", &["dev"])));
    assert_eq!(c.get(&alice, &whoami(), &[]).await.0, 200);
    let jose = c.client(Some(&c.client_ca.client("jos\u{e9}", &[])));
    let (code, seen) = c.get(&jose, &whoami(), &[]).await;
    assert_eq!(
        (code, &seen["user"]),
        (200, &serde_json::json!("jos\u{e9}")),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_proxy_stated_identity_that_cannot_be_forwarded_gets_401() {
    let c = Cluster::start(false).await;
    let outer = c.client(Some(&c.front_proxy_ca.client(OUTER_PROXY_CN, &[])));
    let cases: [&[(&str, &[u8])]; 5] = [
        &[("x-remote-user", b"ad\tmin")],
        &[("x-remote-user", b"jos\xe9")],
        // A group the old code skipped (not text to the `http` crate) is refused, not dropped.
        &[("x-remote-user", b"dave"), ("x-remote-group", b"g\xff")],
        &[("x-remote-user", b"dave"), ("x-remote-uid", b"u\xe9")],
        &[
            ("x-remote-user", b"dave"),
            ("x-remote-extra-scopes", b"r\tw"),
        ],
    ];
    for stated in cases {
        let mut request = outer.get(c.url(&whoami()));
        for (name, value) in stated {
            let value = reqwest::header::HeaderValue::from_bytes(value).expect("value");
            request = request.header(*name, value);
        }
        let response = request.send().await.expect("response");
        assert_eq!(response.status().as_u16(), 401, "{stated:?}");
    }
    assert_eq!(c.backend.requests(&whoami()).await, 0);
    let (code, who) = c.get(&outer, &whoami(), &[("X-Remote-User", "dave")]).await;
    assert_eq!((code, &who["user"]), (200, &serde_json::json!("dave")));
}

/// Where the delegate answers TokenReviews (it counts requests by path).
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_invented_tokens_never_floods_the_delegate() {
    use futures_util::StreamExt;
    use std::time::Instant;

    let c = Cluster::start(true).await;
    let plain = c.client(None);
    let reviewed = format!("Bearer {}", apiagg_tests::trust::REVIEWED_TOKEN);
    let (code, seen) = c
        .get(&plain, &whoami(), &[("Authorization", &reviewed)])
        .await;
    assert_eq!(code, 200, "{seen}");
    let before = c.delegate.requests(TOKEN_REVIEWS).await;

    // An attacker sends 800 tokens nobody issued, 32 at a time.
    const FLOOD: usize = 800;
    let started = Instant::now();
    let codes: Vec<u16> = futures_util::stream::iter(0..FLOOD)
        .map(|i| {
            let (plain, url) = (plain.clone(), c.url("/apis"));
            async move {
                let response = plain
                    .get(url)
                    .header("Authorization", format!("Bearer invented-{i}"))
                    .send()
                    .await
                    .expect("response");
                response.status().as_u16()
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let refused = codes.iter().filter(|c| **c == 401).count();
    let limited = codes.iter().filter(|c| **c == 429).count();
    assert_eq!(refused + limited, FLOOD, "only 401 and 429: {codes:?}");

    // Each reviewed token cost one review at most; the rest were held back by the limit
    // (burst 200, then 100 a second over the flood's duration).
    let reviews = c.delegate.requests(TOKEN_REVIEWS).await - before;
    eprintln!(
        "{FLOOD} invented tokens in {seconds:.2} s: {reviews} reviews, {limited} held back (429)"
    );
    assert!(
        reviews as usize <= refused,
        "{reviews} reviews for {refused} refusals"
    );
    let allowed = 200.0 + 100.0 * seconds + 5.0;
    assert!(
        (reviews as f64) <= allowed,
        "{reviews} reviews in {seconds:.1} s (at most {allowed:.0})"
    );
    if allowed < FLOOD as f64 {
        assert!(limited > 0, "the limit held nobody back in {seconds:.1} s");
    }

    // The flood evicted nothing: the reviewed token is still cached (no new review).
    let settled = c.delegate.requests(TOKEN_REVIEWS).await;
    let (code, seen) = c
        .get(&plain, &whoami(), &[("Authorization", &reviewed)])
        .await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(c.delegate.requests(TOKEN_REVIEWS).await, settled);
}
