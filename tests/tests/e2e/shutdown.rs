//! Shutdown as kube-apiserver 1.35+ deployments run it (issue 46, item 5):
//! - without `--shutdown-send-retry-after` (upstream's default) apiagg stops taking requests
//!   once the shutdown delay passed: idle connections close, a request that still comes gets
//!   upstream's 503 Status with `Retry-After: 1`, in-flight ones finish (the 429 of
//!   `--shutdown-send-retry-after` is in gateway_lifecycle.rs);
//! - open watches end one at a time at upstream's rate (their number over
//!   `--shutdown-watch-termination-grace-period`, at least 200 a second), each cleanly (no
//!   reset), measured at the client on HTTP/2 streams as client-go holds them.
//!   `tests/bench/shutdown-drain.sh` runs the same with 10,000 watches.

use std::time::{Duration, Instant};

use apiagg_tests::wire::{h2_connect, tls_apiagg_with};
use apiagg_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads one answer with a `Content-Length` from `tcp` (the connection stays open).
async fn read_one_answer(tcp: &mut tokio::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_string)
                })
                .and_then(|n| n.trim().parse::<usize>().ok())
                .expect("a Content-Length");
            if body.len() >= length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        assert!(n > 0, "closed before the answer ended: {text}");
        answer.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_send_retry_after_apiagg_stops_taking_requests() {
    let backend = sample(G, "slow", false);
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("slow", &backend.url),
        apiservice(G, V, "slow", "")
    );
    let mut gw = Apiagg::start(
        &config,
        &["--shutdown-delay", "2s", "--shutdown-drain-timeout", "20s"],
    );
    gw.wait_ready().await;
    // An idle keep-alive connection, and a slow request in flight at SIGTERM.
    let mut idle = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: apiagg\r\n\r\n")
        .await
        .expect("write");
    assert!(read_one_answer(&mut idle).await.starts_with("HTTP/1.1 200"));
    let slow_url = gw.url(&format!("/apis/{G}/{V}/slow?ms=6000"));
    let slow = tokio::spawn(async move {
        client()
            .get(slow_url)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    backend
        .wait_requests(&format!("/apis/{G}/{V}/slow"), 1, Duration::from_secs(10))
        .await;
    let term = Instant::now();
    gw.proc.signal("TERM");

    // After the delay a new request gets the 503 kube-apiserver's wait group answers.
    let flunders = gw.url(&format!("/apis/{G}/{V}/flunders"));
    let refused = wait_until(
        "new requests to be refused (503) after the delay",
        Duration::from_secs(10),
        || async {
            let sent = reqwest::Client::new().get(&flunders).send().await;
            sent.map_err(|e| e.to_string())
        },
        |answer| matches!(answer, Ok(r) if r.status() == 503),
    )
    .await
    .expect("a 503");
    assert!(
        term.elapsed() >= Duration::from_secs(2),
        "refused before the delay ended"
    );
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(refused.headers()["connection"], "close");
    let status = json_of(refused).await;
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["reason"], "ServiceUnavailable", "{status}");
    assert_eq!(status["message"], "apiserver is shutting down", "{status}");
    assert_eq!(status["code"], 503, "{status}");
    // Health and metrics are still served (upstream's exempt prefixes).
    assert_eq!(status_code(&gw.url("/livez")).await, 200);
    // The idle connection was closed, as Go's `Server.Shutdown` closes idle connections.
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the idle connection is still open: {read:?}"
    );
    // The request in flight finished, then apiagg exited.
    assert_eq!(slow.await.expect("join").expect("slow request"), 200);
    let code = tokio::task::spawn_blocking(move || gw.proc.wait_exit(Duration::from_secs(20)))
        .await
        .expect("join");
    assert_eq!(code, Some(0));
}

/// What the client saw of a drain.
struct Drain {
    /// When each watch ended cleanly, after SIGTERM, in order.
    ends: Vec<Duration>,
    /// Watches reset instead of ended.
    resets: usize,
}

impl Drain {
    /// The most ends within any `window`.
    fn most_within(&self, window: Duration) -> usize {
        let mut first = 0;
        let mut most = 0;
        for (last, end) in self.ends.iter().enumerate() {
            while *end - self.ends[first] >= window {
                first += 1;
            }
            most = most.max(last + 1 - first);
        }
        most
    }
}

/// Reads a watch to its end: when it ended cleanly, or how it was reset.
fn read_to_end(mut body: h2::RecvStream) -> tokio::task::JoinHandle<Result<Instant, String>> {
    tokio::spawn(async move {
        loop {
            match body.data().await {
                None => return Ok(Instant::now()),
                Some(Ok(chunk)) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                Some(Err(e)) => return Err(e.to_string()),
            }
        }
    })
}

/// Opens `n` watches as HTTP/2 streams (200 on each TLS connection, as client-go holds them)
/// through an apiagg with `grace`, sends SIGTERM and times each watch's end at the client.
async fn drain(n: usize, grace: Duration) -> Drain {
    const STREAMS_PER_CONNECTION: usize = 200;
    const BATCH: usize = 100;
    let h2 = h2_sample();
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("h2", &h2.url),
        apiservice(G, V, "h2", &format!(", caBundle: {}", h2.ca_bundle())),
    );
    let grace_arg = format!("{}s", grace.as_secs());
    let (mut gw, ca) = tls_apiagg_with(
        &config,
        &[
            "--shutdown-watch-termination-grace-period",
            &grace_arg,
            "--shutdown-drain-timeout",
            "120s",
            // Thousands of watches from one anonymous flow would overflow its queues; this
            // test is about their end.
            "--enable-priority-and-fairness=false",
        ],
    )
    .await;
    let path = format!("https://127.0.0.1/apis/{G}/{V}/flunders?watch=true&timeoutSeconds=600");
    // Opened 100 at a time, each batch open (its heads in) before the next, as informers start
    // (a burst at once is watch_scale.rs's row).
    let mut connection = None;
    let mut watches = Vec::with_capacity(n);
    for first in (0..n).step_by(BATCH) {
        if first % STREAMS_PER_CONNECTION == 0 {
            connection = Some(h2_connect(gw.port, &ca).await);
        }
        let Some(connection) = &connection else {
            unreachable!("a connection is opened at the first batch")
        };
        let mut heads = Vec::with_capacity(BATCH);
        for _ in first..(first + BATCH).min(n) {
            let request = http::Request::get(&path).body(()).expect("request");
            let mut send = connection.clone().ready().await.expect("a stream");
            let (response, _) = send.send_request(request, true).expect("send");
            heads.push(response);
        }
        for (i, head) in heads.into_iter().enumerate() {
            let response = tokio::time::timeout(Duration::from_secs(60), head)
                .await
                .unwrap_or_else(|_| panic!("watch {} of {n}: no head within 60 s", first + i))
                .expect("watch head");
            assert_eq!(response.status(), 200);
            watches.push(read_to_end(response.into_body()));
        }
    }
    let term = Instant::now();
    gw.proc.signal("TERM");
    let mut ends = Vec::with_capacity(n);
    let mut resets = 0;
    for watch in watches {
        match watch.await.expect("join") {
            Ok(at) => ends.push(at.duration_since(term)),
            Err(e) => {
                if resets == 0 {
                    println!("first reset: {e}");
                }
                resets += 1;
            }
        }
    }
    let code = tokio::task::spawn_blocking(move || gw.proc.wait_exit(Duration::from_secs(60)))
        .await
        .expect("join");
    assert_eq!(code, Some(0), "apiagg did not exit cleanly");
    ends.sort();
    Drain { ends, resets }
}

/// Checks a drain of `n` watches over `grace` against upstream's rate, and prints it.
fn check(drain: &Drain, n: usize, grace: Duration) {
    let rate = (n as f64 / grace.as_secs_f64()).max(200.0);
    let expected = Duration::from_secs_f64(n as f64 / rate);
    let most = drain.most_within(Duration::from_secs(1));
    let (first, last) = (
        drain.ends.first().copied().unwrap_or_default(),
        drain.ends.last().copied().unwrap_or_default(),
    );
    let median = drain
        .ends
        .get(drain.ends.len() / 2)
        .copied()
        .unwrap_or_default();
    let most_100ms = drain.most_within(Duration::from_millis(100));
    println!(
        "RESULT watches={n} grace={grace:?} rate={rate:.0}/s expected_span={expected:?} \
         ended={} resets={} first={first:?} median={median:?} last={last:?} \
         most_in_1s={most} most_in_100ms={most_100ms}",
        drain.ends.len(),
        drain.resets
    );
    assert_eq!(drain.resets, 0, "watches were reset, not ended");
    assert_eq!(drain.ends.len(), n, "not every watch ended");
    // Never more than the rate in any second (a fifth more, and 10, for the client's own
    // scheduling on a loaded machine: a late read bunches ends together).
    let bound = (rate * 1.2) as usize + 10;
    assert!(
        most <= bound,
        "{most} ends within one second (rate {rate:.0})"
    );
    // Spread over the period the rate gives, not a burst, and done within it (with room).
    assert!(
        last - first >= expected.mul_f64(0.8),
        "the ends span {:?}, not the {expected:?} the rate gives",
        last - first
    );
    assert!(
        last <= expected + Duration::from_millis(2500),
        "the last watch ended {last:?} after SIGTERM ({expected:?} at the rate)"
    );
}

/// 1,000 watches over a 10 s grace period: upstream drains them at its floor of 200 a second,
/// in 5 s, one at a time, each ended cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_end_one_at_a_time_at_upstreams_rate() {
    let (n, grace) = (1000, Duration::from_secs(10));
    let drain = drain(n, grace).await;
    check(&drain, n, grace);
}

/// The bench's figure (tests/bench/shutdown-drain.sh): `DRAIN_WATCHES` (10,000) over
/// `DRAIN_GRACE_SECONDS` (20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "10,000 watches: run by tests/bench/shutdown-drain.sh"]
async fn watches_end_at_upstreams_rate_at_scale() {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = var("DRAIN_WATCHES", 10_000) as usize;
    let grace = Duration::from_secs(var("DRAIN_GRACE_SECONDS", 20));
    let drain = drain(n, grace).await;
    check(&drain, n, grace);
}
