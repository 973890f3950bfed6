//! End-to-end tests of the real `apiagg` binary against real sample backends over loopback: the
//! proxy path over HTTP/1.1, HTTP/2 and TLS, trust, and identity headers.

use std::time::{Duration, Instant};

use apiagg_tests::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_list_get_create_watch_over_http_and_tls() {
    let plain = sample(G, "plain", false);
    let secure = sample("secure.example.com", "secure", true);
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}",
        service("plain", &plain.url),
        service("secure", &secure.url),
        apiservice(G, V, "plain", ""),
        apiservice(
            "secure.example.com",
            V,
            "secure",
            &format!(", caBundle: {}", secure.ca_bundle())
        ),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let c = client();

    for group in [G, "secure.example.com"] {
        let base = gw.url(&format!("/apis/{group}/{V}/flunders"));
        let list = json_of(c.get(&base).send().await.expect("list")).await;
        assert_eq!(list["kind"], "FlunderList", "{list}");
        assert_eq!(list["items"].as_array().map(Vec::len), Some(0));

        // A watch opened before the create sees the event while the stream is still open.
        let mut watch = c
            .get(format!("{base}?watch=true&timeoutSeconds=30"))
            .send()
            .await
            .expect("watch");
        assert_eq!(watch.status(), 200);

        let created = c
            .post(&base)
            .json(&json!({"apiVersion": format!("{group}/{V}"), "kind": "Flunder", "metadata": {"name": "one"}}))
            .send()
            .await
            .expect("create");
        assert_eq!(created.status(), 201);

        let started = Instant::now();
        let mut seen = String::new();
        while !seen.contains("\"one\"") {
            let chunk = tokio::time::timeout(Duration::from_secs(10), watch.chunk())
                .await
                .expect("watch event arrives before the stream ends")
                .expect("read chunk")
                .expect("stream still open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(seen.contains("ADDED"), "{seen}");
        // Each chunk read is bounded by 10 s above; the event must not wait for a buffer flush.
        let took = started.elapsed();
        println!("watch event {took:?} after the create");
        assert!(took < Duration::from_secs(10), "watch event after {took:?}");

        let got = json_of(c.get(format!("{base}/one")).send().await.expect("get")).await;
        assert_eq!(got["metadata"]["name"], "one");
        let list = json_of(c.get(&base).send().await.expect("list")).await;
        assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
        let deleted = c
            .delete(format!("{base}/one"))
            .send()
            .await
            .expect("delete");
        assert_eq!(deleted.status(), 200);
    }

    // The right backend answered each group.
    let a = c
        .get(gw.url(&format!("/apis/{G}/{V}/echo")))
        .send()
        .await
        .expect("echo");
    assert_eq!(a.headers()["x-sample-server"], "plain");
    let b = c
        .get(gw.url(&format!("/apis/secure.example.com/{V}/echo")))
        .send()
        .await
        .expect("echo");
    assert_eq!(b.headers()["x-sample-server"], "secure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_trust_follows_the_apiservice() {
    let good = sample("good.example.com", "good", true);
    let other = sample("other.example.com", "other", true);
    let insecure = sample("insecure.example.com", "insecure", true);
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}{}",
        service("good", &good.url),
        service("insecure", &insecure.url),
        apiservice(
            "good.example.com",
            V,
            "good",
            &format!(", caBundle: {}", good.ca_bundle())
        ),
        // Same service and server name, but the CA of another server: verification must fail.
        apiservice(
            "good.example.com",
            "v1",
            "good",
            &format!(", caBundle: {}", other.ca_bundle())
        ),
        apiservice(
            "insecure.example.com",
            V,
            "insecure",
            ", insecureSkipTLSVerify: true"
        ),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let c = client();

    let ok = c
        .get(gw.url(&format!("/apis/good.example.com/{V}/flunders")))
        .send()
        .await
        .expect("good");
    assert_eq!(ok.status(), 200);
    let ok = c
        .get(gw.url(&format!("/apis/insecure.example.com/{V}/flunders")))
        .send()
        .await
        .expect("insecure");
    assert_eq!(ok.status(), 200);

    // Same endpoint, different trust: the pooled connection of the good APIService is not reused.
    let bad = c
        .get(gw.url("/apis/good.example.com/v1/flunders"))
        .send()
        .await
        .expect("wrong ca");
    assert_eq!(bad.status(), 503);
    assert_eq!(bad.headers()["content-type"], "application/json");
    let status = json_of(bad).await;
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 503);
    let message = status["message"].as_str().unwrap_or("");
    assert!(message.contains("v1.good.example.com"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_and_http2_with_its_own_certificate() {
    let backend = sample(G, "behind-tls", false);
    // The sample server writes a CA and a serving certificate for localhost/127.0.0.1: reuse
    // them as apiagg's serving certificate.
    let certs = sample("certs.example.com", "certs", true);
    let dir = certs
        .cert_dir
        .as_ref()
        .expect("cert dir")
        .path()
        .to_path_buf();
    let config = format!(
        "tls: {{certFile: \"{}\", keyFile: \"{}\"}}\nservices:\n{}apiServices:\n{}",
        dir.join("tls.crt").display(),
        dir.join("tls.key").display(),
        service("behind-tls", &backend.url),
        apiservice(G, V, "behind-tls", ""),
    );
    let gw = Apiagg::start(&config, &[]);
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.crt")).expect("ca"))
        .expect("CA certificate");
    let https = |http2: bool| {
        let builder = reqwest::Client::builder().add_root_certificate(ca.clone());
        let builder = if http2 {
            builder.http2_prior_knowledge()
        } else {
            builder.http1_only()
        };
        builder.build().expect("client")
    };
    let base = format!("https://127.0.0.1:{}", gw.port);
    wait_until(
        "apiagg to answer /readyz with 200 over TLS",
        Duration::from_secs(10),
        || answer_code(https(false).get(format!("{base}/readyz"))),
        |code| *code == 200,
    )
    .await;
    for http2 in [false, true] {
        let r = https(http2)
            .get(format!("{base}/apis/{G}/{V}/echo"))
            .send()
            .await
            .expect("request over TLS");
        assert_eq!(r.status(), 200);
        let expected = if http2 {
            reqwest::Version::HTTP_2
        } else {
            reqwest::Version::HTTP_11
        };
        assert_eq!(r.version(), expected);
        let echo = json_of(r).await;
        assert_eq!(echo["headers"]["x-forwarded-proto"][0], "https", "{echo}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_used_when_the_backend_offers_it() {
    let h2 = h2_sample();
    let h1 = sample("h1.example.com", "h1", true);
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}",
        service("h2", &h2.url),
        service("h1", &h1.url),
        apiservice(G, V, "h2", &format!(", caBundle: {}", h2.ca_bundle())),
        apiservice(
            "h1.example.com",
            V,
            "h1",
            &format!(", caBundle: {}", h1.ca_bundle())
        ),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let c = client();
    for (path, expected) in [
        (format!("/apis/{G}/{V}/echo"), "HTTP/2.0"),
        (format!("/apis/h1.example.com/{V}/echo"), "HTTP/1.1"),
    ] {
        // Several requests share the pooled (multiplexed) connection.
        for _ in 0..5 {
            let echo = json_of(c.get(gw.url(&path)).send().await.expect("echo")).await;
            assert_eq!(echo["protocol"], expected, "{path}: {echo}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_identity_headers_never_reach_the_backend() {
    let backend = sample(G, "echo", false);
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("echo", &backend.url),
        apiservice(G, V, "echo", "")
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let url = gw.url(&format!("/apis/{G}/{V}/echo/sub?b=1&a=2"));
    let echo = json_of(
        client()
            .get(&url)
            .header("Authorization", "Bearer secret")
            .header("X-Remote-User", "system:admin")
            .header("X-Remote-Group", "system:masters")
            .header("X-Remote-Extra-Scopes", "all")
            .header("Accept", "application/json")
            .send()
            .await
            .expect("echo"),
    )
    .await;
    let headers = echo["headers"].as_object().expect("headers object");
    for name in headers.keys() {
        assert!(
            name != "authorization" && !name.starts_with("x-remote-extra-"),
            "{name} reached the backend: {echo}"
        );
    }
    // Without authenticators configured the caller is anonymous, and the backend is told so.
    assert_eq!(
        headers["x-remote-user"],
        serde_json::json!(["system:anonymous"]),
        "{echo}"
    );
    assert_eq!(
        headers["x-remote-group"],
        serde_json::json!(["system:unauthenticated"]),
        "{echo}"
    );
    assert_eq!(echo["path"], format!("/apis/{G}/{V}/echo/sub"));
    assert!(headers.contains_key("x-forwarded-for"), "{echo}");
    assert_eq!(headers["accept"][0], "application/json");

    // Impersonation cannot be honoured at a remote backend: a Status says so.
    let refused = client()
        .get(&url)
        .header("Impersonate-User", "root")
        .send()
        .await
        .expect("impersonation");
    assert_eq!(refused.status(), 403);
    let status = json_of(refused).await;
    assert_eq!(status["reason"], "Forbidden", "{status}");
}
