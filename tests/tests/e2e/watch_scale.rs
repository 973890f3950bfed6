//! Many open watches: apiagg raises its open-file limit at start, and watches through a backend
//! that offers HTTP/2 share its connections and all receive events.
//! (`tests/bench/watch-scale.sh` measures the memory of thousands.)

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apiagg_tests::*;
use serde_json::json;

/// The soft and hard `Max open files` of a process, from `/proc/<pid>/limits`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let mut cols = line["Max open files".len()..].split_whitespace();
    (
        cols.next().expect("soft").to_string(),
        cols.next().expect("hard").to_string(),
    )
}

#[test]
fn open_file_limit_is_raised_to_the_hard_limit_and_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("apiagg.yaml");
    std::fs::write(&config, "{}\n").expect("config");
    // Started with a soft limit of 256, as a shell with `ulimit -Sn 256` would.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -Sn 256 && exec \"$0\" \"$@\"")
        .arg(binary("apiagg", "apiagg-gateway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("apiagg.log")).expect("log file"),
        ))
        .spawn()
        .expect("spawn apiagg");
    let stdout = child.stdout.take().expect("stdout");
    let pid = child.id();
    let proc = Proc { child };
    read_listening(stdout).expect("the listening line");

    let (soft, hard) = open_file_limits(pid);
    assert_eq!(soft, hard, "soft limit left below the hard limit");
    let log = std::fs::read_to_string(dir.path().join("apiagg.log")).expect("log");
    let expected = format!("open file limit raised from 256 to {hard} (the hard limit)");
    assert!(
        log.contains(&expected),
        "no {expected:?} in the log:\n{log}"
    );
    drop(proc);
}

/// Established connections (any process) to `port` on loopback, from `/proc/net/tcp`.
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3
                && cols[3] == "01"
                && cols[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_share_http2_connections_and_all_receive_events() {
    let h2 = h2_sample();
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("h2", &h2.url),
        apiservice(G, V, "h2", &format!(", caBundle: {}", h2.ca_bundle())),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let base = gw.url(&format!("/apis/{G}/{V}/flunders"));

    // 40 watches, each on a client connection of its own (HTTP/1.1 to apiagg).
    let mut watches = Vec::new();
    for _ in 0..40 {
        let c = client();
        let watch = c
            .get(format!("{base}?watch=true&timeoutSeconds=60"))
            .send()
            .await
            .expect("watch");
        assert_eq!(watch.status(), 200);
        watches.push(watch);
    }
    // Over HTTP/2 they share apiagg's backend connections (HTTP/1.1 would need 40).
    let backend_connections = connections_to(h2.port);
    assert!(
        backend_connections < 10,
        "{backend_connections} connections to the backend for 40 watches"
    );

    let created = client()
        .post(&base)
        .json(&json!({"apiVersion": format!("{G}/{V}"), "kind": "Flunder", "metadata": {"name": "shared"}}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let deadline = Instant::now() + Duration::from_secs(15);
    for (i, watch) in watches.iter_mut().enumerate() {
        let mut seen = String::new();
        while !seen.contains("\"shared\"") {
            let left = deadline.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, watch.chunk())
                .await
                .unwrap_or_else(|_| panic!("watch {i}: no event within 15 s: {seen}"))
                .expect("read chunk")
                .expect("stream still open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert!(seen.contains("ADDED"), "watch {i}: {seen}");
    }
}

/// apiagg serving TLS (h2 by ALPN) in front of an HTTP/2 sample backend it has no connection
/// to yet, and one HTTP/2 client connection to apiagg.
async fn tls_apiagg_before_h2_sample() -> (Sample, Apiagg, h2::client::SendRequest<bytes::Bytes>) {
    use apiagg_tests::wire::{h2_connect, tls_apiagg};
    let h2 = h2_sample();
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("h2", &h2.url),
        apiservice(G, V, "h2", &format!(", caBundle: {}", h2.ca_bundle())),
    );
    let (gw, ca) = tls_apiagg(&config).await;
    let client = h2_connect(gw.port, &ca).await;
    (h2, gw, client)
}

/// `n` flunder watches sent at once on `client`: their response futures.
async fn open_watches(
    client: &h2::client::SendRequest<bytes::Bytes>,
    n: usize,
) -> Vec<h2::client::ResponseFuture> {
    let path = format!("https://127.0.0.1/apis/{G}/{V}/flunders?watch=true&timeoutSeconds=60");
    let mut opened = Vec::with_capacity(n);
    for _ in 0..n {
        let request = http::Request::get(&path).body(()).expect("request");
        let mut send = client.clone().ready().await.expect("stream");
        let (response, _) = send.send_request(request, true).expect("send");
        opened.push(response);
    }
    opened
}

/// Watches as client-go holds them: HTTP/2 streams on one TLS connection to apiagg, which
/// allows 250 of them (kube-apiserver's limit); a burst of 100 opened at once shares one new
/// connection to the h2 backend instead of opening one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_watch_streams_shares_one_backend_connection() {
    let (h2, _gw, client) = tls_apiagg_before_h2_sample().await;
    let before = connections_to(h2.port);
    let opened = open_watches(&client, 100).await;
    let mut watches = Vec::new();
    for response in opened {
        let response = response.await.expect("watch head");
        assert_eq!(response.status(), 200);
        watches.push(response.into_body());
    }
    assert_eq!(
        client.current_max_send_streams(),
        250,
        "apiagg allows kube-apiserver's 250 streams per connection"
    );
    let new_connections = connections_to(h2.port).saturating_sub(before);
    assert!(
        new_connections <= 2,
        "{new_connections} new backend connections for a burst of 100 watches"
    );
}

/// Informers start their watches at once: 250 watch streams opened together on one client
/// connection (all apiagg allows on it), onto a backend that has no connection from apiagg yet
/// and allows 200 streams on each (hyper). Until the backend's SETTINGS arrive apiagg cannot
/// know its limit; streams it sent past it would wait for a free one for ever. Every watch
/// gets its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_backends_stream_limit_on_a_new_connection_is_answered() {
    const BURST: usize = 250;
    let (_h2, gw, client) = tls_apiagg_before_h2_sample().await;
    let opened = open_watches(&client, BURST).await;
    let mut unanswered = 0;
    let mut watches = Vec::with_capacity(BURST);
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for response in opened {
        match tokio::time::timeout_at(deadline, response).await {
            Ok(response) => {
                let response = response.expect("watch head");
                assert_eq!(response.status(), 200);
                watches.push(response.into_body());
            }
            Err(_) => unanswered += 1,
        }
    }
    println!("RESULT heads in {:?}", started.elapsed());
    assert_eq!(
        unanswered, 0,
        "{unanswered} of {BURST} watches got no head in 20 s"
    );
    drop(gw);
}
