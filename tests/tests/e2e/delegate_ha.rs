//! A delegate with several endpoints (an HA control plane): requests spread over the healthy
//! API servers, a dead one is ejected like any backend and gets no traffic, and it is used again
//! once it is back.

use std::time::Duration;

use apiagg_tests::*;

/// A kube-apiserver stand-in named `name` (its answers carry `X-Sample-Server: name`).
fn apiserver(name: &str, listen: &str) -> Sample {
    kube_named(name, &["--listen", listen])
}

/// Which API servers answered `n` requests in a row (`failed` when one did not answer 200).
async fn answered(gw: &Apiagg, n: usize) -> Vec<String> {
    let c = client();
    let mut seen = Vec::new();
    for _ in 0..n {
        let name = match c.get(gw.url("/apis/apps/v1/deployments")).send().await {
            Ok(r) if r.status() == 200 => r.headers()["x-sample-server"]
                .to_str()
                .unwrap_or("")
                .to_string(),
            _ => "failed".to_string(),
        };
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    seen.sort();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spread_over_healthy_apiservers_and_avoid_a_dead_one() {
    let a = apiserver("apiserver-a", "127.0.0.1:0");
    let mut b = Some(apiserver("apiserver-b", "127.0.0.1:0"));
    let b_port = b.as_ref().map(|b| b.port).unwrap_or_default();
    let config = format!(
        "delegate:\n  url: \"{}\"\n  endpoints: [\"{}\", \"http://127.0.0.1:{b_port}\"]\n",
        a.url, a.url
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    assert_eq!(answered(&gw, 20).await, ["apiserver-a", "apiserver-b"]);

    // b dies: after at most one failed request (the one that finds it dead), everything goes
    // to a, with no failure.
    drop(b.take());
    wait_until(
        "traffic to leave the dead API server (who answered 20 in a row observed)",
        Duration::from_secs(5),
        || answered(&gw, 20),
        |seen| seen == &["apiserver-a"],
    )
    .await;
    assert_eq!(answered(&gw, 50).await, ["apiserver-a"]);

    // b is back on its port: probes find it, and it gets traffic again.
    let _b = apiserver("apiserver-b", &format!("127.0.0.1:{b_port}"));
    wait_until(
        "the restarted API server to get traffic again (who answered 20 in a row observed)",
        Duration::from_secs(5),
        || answered(&gw, 20),
        |seen| seen == &["apiserver-a", "apiserver-b"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_apiserver_is_ejected_by_its_probes() {
    // Accepts connections and never answers: only the delegate's probes can tell.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hole_port = hole.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hole.accept().await {
            held.push(stream);
        }
    });
    let a = apiserver("apiserver-a", "127.0.0.1:0");
    let config = format!(
        "delegate:\n  url: \"{}\"\n  endpoints: [\"{}\", \"http://127.0.0.1:{hole_port}\"]\n",
        a.url, a.url
    );
    let gw = Apiagg::start(&config, &["--request-timeout", "4s"]);
    let c = client();
    // Once its probes have timed out three times in a row, no request waits for it: ten in a
    // row are answered by the other, each in less than half the request timeout that one sent
    // to the hung server would wait for (fails, or is retried on the other after it).
    let ten = || async {
        let mut answers = Vec::new();
        for _ in 0..10 {
            let started = std::time::Instant::now();
            answers.push((answered(&gw, 1).await, started.elapsed()));
        }
        answers
    };
    wait_until(
        "requests to stop waiting for the hung API server (ten answers and their times observed)",
        Duration::from_secs(30),
        ten,
        |answers| {
            answers
                .iter()
                .all(|(who, took)| who == &["apiserver-a"] && *took < Duration::from_secs(2))
        },
    )
    .await;
    let r = c.get(gw.url("/version")).send().await.expect("version");
    assert_eq!(r.status(), 200);
}

/// Kubernetes 1.36's Mixed Version Proxy (KEP-4020, on by default): a client may ask the
/// delegate for its own view (`profile=nopeer`), a request one API server proxied to a peer
/// says so (`X-Kubernetes-Peer-Proxied`), and a peer that cannot be reached during an upgrade
/// makes the delegate answer 503. apiagg passes the first two through untouched and relays the
/// 503 without taking the delegate for down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_proxy_headers_pass_and_a_peers_503_is_relayed_without_ejecting_the_delegate() {
    let a = apiserver("apiserver-a", "127.0.0.1:0");
    let gw = Apiagg::start(&format!("delegate:\n  url: \"{}\"\n", a.url), &[]);
    gw.wait_ready().await;
    let c = client();
    let accept = "application/json;profile=nopeer";
    let echo: serde_json::Value = c
        .get(gw.url("/apis/apps/v1/echo"))
        .header("Accept", accept)
        .header("X-Kubernetes-Peer-Proxied", "true")
        .send()
        .await
        .expect("echo")
        .json()
        .await
        .expect("echo JSON");
    assert_eq!(echo["headers"]["accept"][0], accept, "{echo}");
    assert_eq!(
        echo["headers"]["x-kubernetes-peer-proxied"][0], "true",
        "{echo}"
    );

    for _ in 0..5 {
        let answer = c
            .get(gw.url("/apis/apps/v1/peer-unreachable"))
            .send()
            .await
            .expect("peer-unreachable");
        assert_eq!(answer.status(), 503);
        let status: serde_json::Value = answer.json().await.expect("Status");
        assert_eq!(status["reason"], "ServiceUnavailable");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("error while proxying request to the peer"),
            "{message}"
        );
    }
    // The delegate is still whom apiagg sends everything to, and apiagg is ready.
    assert_eq!(answered(&gw, 10).await, ["apiserver-a"]);
    assert_eq!(status_code(&gw.url("/readyz")).await, 200);
}
