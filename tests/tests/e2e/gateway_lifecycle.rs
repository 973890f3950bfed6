//! End-to-end tests of the real `apiagg` binary: upgrades, the delegate and mux completion, hot
//! reload, kubectl, and graceful termination.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_tests::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};

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
    wait_until(
        "b.example.com to be routed after the reload",
        Duration::from_secs(10),
        b_status,
        |code| *code == 200,
    )
    .await;

    // An invalid config is rejected; the serving routes stay.
    gw.write_config("apiServices:\n  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: wrong}, spec: {group: b.example.com, version: v1, groupPriorityMinimum: 0, versionPriority: 1}}\n");
    wait_until(
        "the invalid config's reload to be counted as a failure",
        Duration::from_secs(10),
        || gw.metric("apiagg_config_reloads_total{result=\"failure\"}"),
        |failures| *failures == Some(1.0),
    )
    .await;
    assert_eq!(b_status().await, 200);

    gw.write_config(&with_a);
    wait_until(
        "b.example.com to be gone after the reload",
        Duration::from_secs(10),
        b_status,
        |code| *code == 404,
    )
    .await;

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
    wait_until(
        "b.example.com to be routed after SIGHUP",
        Duration::from_secs(5),
        b_status,
        |code| *code == 200,
    )
    .await;
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
        &[
            "--shutdown-delay",
            "3s",
            "--shutdown-drain-timeout",
            "20s",
            "--shutdown-send-retry-after",
        ],
    );
    gw.wait_ready().await;
    let c = client();
    // Still in flight when the delay ends and new requests are refused.
    let slow_url = gw.url(&format!("/apis/{G}/{V}/slow?ms=5000"));
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
    // During the delay (3 s, far longer than turning red takes even on a loaded machine):
    // readyz red, livez green, requests still served.
    let readyz_url = gw.url("/readyz");
    wait_until(
        "readyz to turn red (500) after SIGTERM",
        Duration::from_secs(5),
        || status_code(&readyz_url),
        |code| *code == 500,
    )
    .await;
    let red_after = term.elapsed();
    println!("readyz red {red_after:?} after SIGTERM");
    assert!(
        red_after < Duration::from_secs(3),
        "not red during the 3 s shutdown delay"
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
    let refused = wait_until(
        "new requests to be refused (429) after the delay",
        Duration::from_secs(10),
        || async {
            let sent = reqwest::Client::new().get(&flunders).send().await;
            sent.map_err(|e| e.to_string())
        },
        |answer| matches!(answer, Ok(r) if r.status() == 429),
    )
    .await
    .expect("a 429");
    println!("refusing new requests {:?} after SIGTERM", term.elapsed());
    assert!(
        term.elapsed() >= Duration::from_secs(3),
        "refused before the delay ended"
    );
    // Upstream's answer (k8s.io/apiserver's with_retry_after.go), word for word.
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_eq!(refused.headers()["connection"], "close");
    assert_eq!(
        refused.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert_eq!(
        refused.text().await.expect("text"),
        "The apiserver is shutting down, please try again later.\n"
    );
    assert_eq!(slow.await.expect("join").expect("slow request"), 200);
    assert_eq!(gw.proc.wait_exit(Duration::from_secs(10)), Some(0));
}
