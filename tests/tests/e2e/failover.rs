//! Failing over between a backend's endpoints when one goes silent (a black-holed path: no
//! reset, no FIN) and when a backend shuts an HTTP/2 connection down with GOAWAY, against the
//! real `apiagg` binary and real sample backends; every request is asserted at the client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_tests::relay::Relay;
use apiagg_tests::*;
use tokio::task::JoinSet;

/// One request of the steady load: when it was sent (relative to the silence), what it took,
/// what it got and which backend answered.
#[derive(Debug)]
struct Sent {
    at: f64,
    took: Duration,
    status: u16,
    server: String,
}

/// Sends a GET to `url` every 100 ms (10/s, each on its own, not waiting for the one before)
/// from `warmup` before `silence` until `after` past it; returns every request's outcome.
async fn steady_load(
    url: &str,
    warmup: Duration,
    silence: impl FnOnce(),
    after: Duration,
) -> Vec<Sent> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .danger_accept_invalid_certs(true)
        .build()
        .expect("client");
    let started = Instant::now();
    let mut silence = Some(silence);
    let mut silent_at: Option<Instant> = None;
    let mut sent = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if started.elapsed() >= warmup {
            if let Some(silence) = silence.take() {
                silence();
                silent_at = Some(Instant::now());
            }
        }
        if silent_at.is_some_and(|at| at.elapsed() >= after) {
            break;
        }
        let (client, url) = (client.clone(), url.to_string());
        let base = silent_at.unwrap_or_else(|| started + warmup);
        sent.spawn(async move {
            let begun = Instant::now();
            let at = begun.duration_since(base).as_secs_f64()
                - base.saturating_duration_since(begun).as_secs_f64();
            let (status, server) = match client.get(&url).send().await {
                Ok(r) => {
                    let server = r
                        .headers()
                        .get("x-sample-server")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    let status = r.status().as_u16();
                    let _ = r.bytes().await;
                    (status, server)
                }
                Err(_) => (0, String::new()),
            };
            Sent {
                at,
                took: begun.elapsed(),
                status,
                server,
            }
        });
    }
    let mut outcomes = Vec::new();
    while let Some(done) = sent.join_next().await {
        outcomes.push(done.expect("request task"));
    }
    outcomes.sort_by(|a, b| a.at.total_cmp(&b.at));
    outcomes
}

/// The goal of the silent-endpoint case: no request fails or waits more than 5 s, and from 3 s
/// after the silence every request is answered by the endpoint that still speaks.
fn assert_failed_over(outcomes: &[Sent], silent: &str, speaking: &str) {
    let before: Vec<&Sent> = outcomes.iter().filter(|s| s.at < 0.0).collect();
    assert!(
        before.iter().any(|s| s.server == silent) && before.iter().any(|s| s.server == speaking),
        "both endpoints served before the silence: {before:?}"
    );
    let worst = outcomes.iter().map(|s| s.took).max().unwrap_or_default();
    let failed: Vec<&Sent> = outcomes.iter().filter(|s| s.status != 200).collect();
    let slow: Vec<&Sent> = outcomes
        .iter()
        .filter(|s| s.took > Duration::from_secs(5))
        .collect();
    let late_to_silent: Vec<&Sent> = outcomes
        .iter()
        .filter(|s| s.at >= 3.0 && s.server != speaking)
        .collect();
    let moved = outcomes
        .iter()
        .filter(|s| s.at >= 0.0 && s.server == speaking && s.took > Duration::from_millis(500))
        .count();
    println!(
        "{} requests, worst {worst:?}, {moved} waited on the silent endpoint and moved",
        outcomes.len()
    );
    assert!(failed.is_empty(), "requests failed: {failed:?}");
    assert!(slow.is_empty(), "requests waited more than 5 s: {slow:?}");
    assert!(
        late_to_silent.is_empty(),
        "from 3 s on, requests were not answered by {speaking}: {late_to_silent:?}"
    );
}

/// apiagg on `config`, GETs of `path` at 10/s, and the relay going silent after 2 s: the
/// endpoint behind it (`names.0`) loses no request to the one that still speaks (`names.1`).
async fn silence_under_load(relay: &Relay, config: &str, path: &str, names: (&str, &str)) {
    let gw = Apiagg::start(config, &[]);
    gw.wait_ready().await;
    let (url, silence) = (gw.url(path), || relay.go_silent());
    let outcomes = steady_load(
        &url,
        Duration::from_secs(2),
        silence,
        Duration::from_secs(6),
    )
    .await;
    assert_failed_over(&outcomes, names.0, names.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_loses_no_request_over_http1() {
    let (x, y) = (
        backend("lb.example.com", "x", 0),
        backend("lb.example.com", "y", 0),
    );
    let relay = Relay::start(x.port).await;
    let config = format!(
        "services:\n  - {{namespace: test, name: lb, port: 443, endpoints: [\"http://127.0.0.1:{}\", \"{}\"]}}\napiServices:\n{}",
        relay.port,
        y.url,
        apiservice_v1("lb.example.com", "lb"),
    );
    silence_under_load(&relay, &config, "/apis/lb.example.com/v1/foos", ("x", "y")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_loses_no_request_over_http2() {
    // Two TLS endpoints offering h2, one certificate (valid for h2.test.svc) for both.
    let x = sample_with(G, "h2", true, &["--h2"]);
    let cert_dir = x.cert_dir.as_ref().expect("x's certificates").path();
    let cert_dir = cert_dir.to_str().expect("utf8 path");
    let y = sample_with(G, "h2y", false, &["--h2", "--tls", "--cert-dir", cert_dir]);
    let relay = Relay::start(x.port).await;
    let config = format!(
        "services:\n  - {{namespace: test, name: h2, port: 443, endpoints: [\"https://127.0.0.1:{}\", \"{}\"]}}\napiServices:\n{}",
        relay.port,
        y.url,
        apiservice(G, V, "h2", &format!(", caBundle: {}", x.ca_bundle())),
    );
    let path = format!("/apis/{G}/{V}/flunders");
    silence_under_load(&relay, &config, &path, ("h2", "h2y")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_moves_new_requests_to_a_new_connection_and_loses_none() {
    // The backend ends every HTTP/2 connection with GOAWAY after 20 requests.
    let backend = sample_with(G, "h2", true, &["--h2", "--goaway-after", "20"]);
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("h2", &backend.url),
        apiservice(G, V, "h2", &format!(", caBundle: {}", backend.ca_bundle())),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let url = Arc::new(gw.url(&format!("/apis/{G}/{V}/flunders")));
    let client = client();
    // 300 GETs, 10 at a time: streams race the GOAWAYs.
    let mut connections = std::collections::BTreeSet::new();
    let mut failed = Vec::new();
    for _round in 0..30 {
        let mut batch = JoinSet::new();
        for _ in 0..10 {
            let (client, url) = (client.clone(), url.clone());
            batch.spawn(async move {
                match client.get(url.as_str()).send().await {
                    Ok(r) => {
                        let connection = r
                            .headers()
                            .get("x-sample-connection")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let status = r.status().as_u16();
                        let body = r.text().await.unwrap_or_default();
                        (status, connection, body)
                    }
                    Err(e) => (0, String::new(), e.to_string()),
                }
            });
        }
        while let Some(done) = batch.join_next().await {
            let (status, connection, body) = done.expect("request task");
            if status == 200 {
                connections.insert(connection);
            } else {
                failed.push((status, body));
            }
        }
    }
    assert!(failed.is_empty(), "requests lost to GOAWAY: {failed:?}");
    // A connection serves its 20 requests and at most the 10 in flight when its GOAWAY
    // leaves: 300 needed at least 10 connections.
    assert!(
        connections.len() >= 10,
        "new requests did not move to new connections: {connections:?}"
    );
}
