//! End-to-end tests of the real `apiagg` binary against real sample backends over loopback.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};

const G: &str = "wardle.example.com";
const V: &str = "v1alpha1";

/// A sample backend for `group`; with TLS its certificate is valid for `<name>.test.svc`, the
/// server name apiagg verifies for an APIService whose service is `test/<name>`.
fn sample(group: &str, name: &str, tls: bool) -> Sample {
    let hostname = format!("{name}.test.svc");
    Sample::start(
        &[
            "--group",
            group,
            "--version",
            V,
            "--resource",
            "flunders",
            "--kind",
            "Flunder",
            "--name",
            name,
            "--hostname",
            &hostname,
        ],
        tls,
    )
}

async fn json_of(r: reqwest::Response) -> Value {
    let text = r.text().await.expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

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
    assert!(
        eventually(Duration::from_secs(10), || async {
            https(false)
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await
    );
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
    let hostname = "h2.test.svc";
    let h2 = Sample::start(
        &[
            "--group",
            G,
            "--version",
            V,
            "--name",
            "h2",
            "--hostname",
            hostname,
            "--h2",
        ],
        true,
    );
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
    let echo = json_of(
        client()
            .get(gw.url(&format!("/apis/{G}/{V}/echo/sub?b=1&a=2")))
            .header("Authorization", "Bearer secret")
            .header("X-Remote-User", "system:admin")
            .header("X-Remote-Group", "system:masters")
            .header("X-Remote-Extra-Scopes", "all")
            .header("Impersonate-User", "root")
            .header("Accept", "application/json")
            .send()
            .await
            .expect("echo"),
    )
    .await;
    let headers = echo["headers"].as_object().expect("headers object");
    for name in headers.keys() {
        assert!(
            !name.starts_with("x-remote-")
                && name != "authorization"
                && !name.starts_with("impersonate-"),
            "{name} reached the backend: {echo}"
        );
    }
    assert_eq!(echo["path"], format!("/apis/{G}/{V}/echo/sub"));
    assert!(headers.contains_key("x-forwarded-for"), "{echo}");
    assert_eq!(headers["accept"][0], "application/json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_and_spdy_upgrades_round_trip() {
    let backend = sample(G, "ws", false);
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("ws", &backend.url),
        apiservice(G, V, "ws", "")
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;

    // Many sessions with data both ways: a tunnel that closes right after the 101 fails this.
    for i in 0..100 {
        let url = format!(
            "ws://127.0.0.1:{}/apis/{G}/{V}/namespaces/default/flunders/x/exec",
            gw.port
        );
        let mut request =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
                .expect("request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "v5.channel.k8s.io".parse().expect("header"),
        );
        let (mut ws, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("upgrade");
        assert_eq!(response.status(), 101);
        assert_eq!(
            response.headers()["sec-websocket-protocol"],
            "v5.channel.k8s.io"
        );
        for j in 0..3 {
            let text = format!("session {i} message {j}");
            ws.send(tokio_tungstenite::tungstenite::Message::Binary(
                text.clone().into_bytes(),
            ))
            .await
            .expect("send");
            let echoed = tokio::time::timeout(Duration::from_secs(5), ws.next())
                .await
                .expect("echo in time")
                .expect("open")
                .expect("frame");
            assert_eq!(
                echoed.into_data().as_slice(),
                text.as_bytes(),
                "session {i}"
            );
        }
        let _ = ws.close(None).await;
    }

    // SPDY/3.1: raw bytes both ways after the 101.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    tcp.write_all(
        format!("POST /apis/{G}/{V}/namespaces/default/flunders/x/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).await.expect("read head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tcp.write_all(b"spdy-frames").await.expect("write data");
    let mut echoed = [0u8; 11];
    tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut echoed))
        .await
        .expect("echo in time")
        .expect("read echo");
    assert_eq!(&echoed, b"spdy-frames");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_fall_through_and_mux_complete_protection() {
    let delegate_hold = hold_port();
    let delegate_port = delegate_hold.port;
    let backend = sample(G, "remote", false);
    let config = format!(
        "delegate: {{url: \"http://127.0.0.1:{delegate_port}\"}}\nservices:\n{}apiServices:\n{}",
        service("remote", &backend.url),
        apiservice(G, V, "remote", "")
    );
    let gw = Apiagg::start(&config, &[]);
    let c = client();

    // The delegate is not up: nothing is complete, unknown paths are 503 with Retry-After.
    let early = c
        .get(gw.url("/apis/unknown.example.com/v1/things"))
        .send()
        .await
        .expect("early");
    assert_eq!(early.status(), 503);
    assert_eq!(early.headers()["retry-after"], "5");
    let body = json_of(early).await;
    assert_eq!(body["reason"], "ServiceUnavailable");
    assert_eq!(body["details"]["retryAfterSeconds"], 5);
    assert_eq!(status_code(&gw.url("/readyz")).await, 500);
    // Registered remote APIServices already work.
    let remote = c
        .get(gw.url(&format!("/apis/{G}/{V}/flunders")))
        .send()
        .await
        .expect("remote");
    assert_eq!(remote.status(), 200);

    // Start the delegate (a sample serving the Kubernetes discovery fixtures).
    let delegate = kube_delegate(false, &["--listen", &format!("127.0.0.1:{delegate_port}")]);
    gw.wait_ready().await;

    let api = c.get(gw.url("/api")).send().await.expect("/api");
    assert_eq!(api.headers()["x-sample-server"], "delegate");
    assert_eq!(json_of(api).await["kind"], "APIVersions");
    let deployments = c
        .get(gw.url("/apis/apps/v1/deployments"))
        .send()
        .await
        .expect("apps");
    assert_eq!(deployments.headers()["x-sample-server"], "delegate");
    assert_eq!(deployments.status(), 200);
    let version = c.get(gw.url("/version")).send().await.expect("version");
    assert_eq!(version.headers()["x-sample-server"], "delegate");
    // After completion an unknown path is the delegate's own 404.
    let late = c
        .get(gw.url("/apis/unknown.example.com/v1/things"))
        .send()
        .await
        .expect("late");
    assert_eq!(late.status(), 404);
    assert!(late.headers().get("retry-after").is_none());
    drop(delegate);

    // Without a delegate, unknown paths are apiagg's own 404 Status once complete.
    let alone = Apiagg::start("apiServices: []\n", &[]);
    alone.wait_ready().await;
    let nf = c
        .get(alone.url("/apis/unknown.example.com/v1/things"))
        .send()
        .await
        .expect("404");
    assert_eq!(nf.status(), 404);
    let body = json_of(nf).await;
    assert_eq!(
        (body["kind"].as_str(), body["code"].as_u64()),
        (Some("Status"), Some(404))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_adds_and_removes_backends_without_failed_requests() {
    let a = sample("a.example.com", "a", false);
    let b = sample("b.example.com", "b", false);
    let with_a = format!(
        "services:\n{}{}apiServices:\n{}",
        service("a", &a.url),
        service("b", &b.url),
        apiservice("a.example.com", V, "a", "")
    );
    let with_both = format!("{with_a}{}", apiservice("b.example.com", V, "b", ""));
    let gw = Apiagg::start(&with_a, &[]);
    gw.wait_ready().await;
    let c = client();

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let loop_url = gw.url(&format!("/apis/a.example.com/{V}/flunders"));
    let looper = {
        let (stop, ok, failed, c) = (stop.clone(), ok.clone(), failed.clone(), c.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match c.get(&loop_url).send().await {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    let b_url = gw.url(&format!("/apis/b.example.com/{V}/flunders"));
    let b_status = || async {
        c.get(&b_url)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    assert_eq!(b_status().await, 404);

    gw.write_config(&with_both);
    assert!(
        eventually(Duration::from_secs(10), || async {
            b_status().await == 200
        })
        .await
    );

    // An invalid config is rejected; the serving routes stay.
    gw.write_config("apiServices:\n  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: wrong}, spec: {group: b.example.com, version: v1, groupPriorityMinimum: 0, versionPriority: 1}}\n");
    let metrics_url = gw.url("/metrics");
    assert!(
        eventually(Duration::from_secs(10), || async {
            let text = c
                .get(&metrics_url)
                .send()
                .await
                .expect("metrics")
                .text()
                .await
                .expect("text");
            text.contains("apiagg_config_reloads_total{result=\"failure\"} 1")
        })
        .await
    );
    assert_eq!(b_status().await, 200);

    gw.write_config(&with_a);
    assert!(
        eventually(Duration::from_secs(10), || async {
            b_status().await == 404
        })
        .await
    );

    stop.store(true, Ordering::Relaxed);
    looper.await.expect("looper");
    assert!(
        ok.load(Ordering::Relaxed) > 50,
        "too few requests: {}",
        ok.load(Ordering::Relaxed)
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed during reloads"
    );

    // SIGHUP reloads at once too.
    std::fs::write(gw.dir.path().join("apiagg.yaml"), &with_both).expect("write");
    gw.proc.signal("HUP");
    assert!(eventually(Duration::from_secs(5), || async { b_status().await == 200 }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_through_the_gateway() {
    let backend = sample(G, "kubectl", false);
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("kubectl", &backend.url),
        apiservice(G, V, "kubectl", "")
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    client()
        .post(gw.url(&format!("/apis/{G}/{V}/flunders")))
        .json(&json!({"metadata": {"name": "from-test"}}))
        .send()
        .await
        .expect("create");
    let server = format!("http://127.0.0.1:{}", gw.port);
    let kubectl = |args: Vec<String>| {
        let out = std::process::Command::new("kubectl")
            .args(["--server", &server])
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let list = kubectl(vec![
        "get".into(),
        "--raw".into(),
        format!("/apis/{G}/{V}/flunders"),
    ]);
    let list: Value = serde_json::from_str(&list).expect("kubectl printed JSON");
    assert_eq!(list["items"][0]["metadata"]["name"], "from-test");
    let ready = kubectl(vec!["get".into(), "--raw".into(), "/readyz?verbose".into()]);
    assert!(
        ready.contains("[+]poststarthook/apiservice-registration-controller ok"),
        "{ready}"
    );
    assert!(ready.trim_end().ends_with("readyz check passed"), "{ready}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readyz_red_and_lets_requests_finish() {
    let backend = sample(G, "slow", false);
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("slow", &backend.url),
        apiservice(G, V, "slow", "")
    );
    let mut gw = Apiagg::start(
        &config,
        &["--shutdown-delay", "1s", "--shutdown-drain-timeout", "20s"],
    );
    gw.wait_ready().await;
    let c = client();
    let slow_url = gw.url(&format!("/apis/{G}/{V}/slow?ms=2500"));
    let slow = tokio::spawn({
        let c = c.clone();
        async move { c.get(slow_url).send().await.map(|r| r.status().as_u16()) }
    });
    // The slow request has reached the backend before SIGTERM.
    let slow_path = format!("/apis/{G}/{V}/slow");
    backend
        .wait_requests(&slow_path, 1, Duration::from_secs(10))
        .await;
    let term = Instant::now();
    gw.proc.signal("TERM");
    // During the delay: readyz red, livez green, requests still served.
    let readyz_url = gw.url("/readyz");
    let red = eventually(Duration::from_secs(5), || async {
        status_code(&readyz_url).await == 500
    })
    .await;
    assert!(red, "readyz never turned red after SIGTERM");
    let red_after = term.elapsed();
    println!("readyz red {red_after:?} after SIGTERM");
    assert!(
        red_after < Duration::from_secs(1),
        "still in the 1 s shutdown delay"
    );
    assert_eq!(
        c.get(gw.url("/readyz/shutdown"))
            .send()
            .await
            .expect("readyz")
            .text()
            .await
            .expect("t"),
        "internal server error: process is shutting down\n"
    );
    assert_eq!(status_code(&gw.url("/livez")).await, 200);
    let served = c
        .get(gw.url(&format!("/apis/{G}/{V}/flunders")))
        .send()
        .await
        .expect("served");
    assert_eq!(served.status(), 200);
    // After the delay: new requests get 429 while the slow one drains.
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut refused = None;
    while refused.is_none() && Instant::now() < deadline {
        match reqwest::Client::new().get(&flunders).send().await {
            Ok(r) if r.status() == 429 => refused = Some(r),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    println!("refusing new requests {:?} after SIGTERM", term.elapsed());
    let refused = refused.expect("new requests were never refused");
    assert!(
        term.elapsed() >= Duration::from_secs(1),
        "refused before the delay ended"
    );
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_eq!(slow.await.expect("join").expect("slow request"), 200);
    assert_eq!(gw.proc.wait_exit(Duration::from_secs(10)), Some(0));
}
