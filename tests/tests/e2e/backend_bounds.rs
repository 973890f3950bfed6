//! One slow backend holds at most its share of the gateway: requests in flight per APIService
//! and per endpoint are bounded (429 with `Retry-After` beyond), while other backends keep being
//! served; client connections are bounded below the open-file limit; and apiagg's own `EMFILE`
//! never ejects a backend.

use std::time::Duration;

use apiagg_tests::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

/// Sends `n` slow requests at once; returns the status codes and `Retry-After` values.
async fn flood(gw: &Apiagg, n: usize) -> Vec<(u16, Option<String>)> {
    let c = client();
    let url = gw.url(&format!("{GV}/slow?ms=2500"));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move {
                let r = c.get(url).send().await.expect("slow request");
                let retry = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                (r.status().as_u16(), retry)
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("join"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_backend_holds_at_most_its_bound_and_others_are_served() {
    let slow = sample(G, "wardle", false);
    let other = sample("other.example.com", "other", false);
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}",
        service("wardle", &slow.url),
        service("other", &other.url),
        apiservice(G, V, "wardle", ""),
        apiservice("other.example.com", V, "other", ""),
    );
    let gw = Apiagg::start(
        &config,
        &[
            "--max-requests-inflight-per-apiservice",
            "5",
            "--max-requests-inflight-per-endpoint",
            "3",
        ],
    );
    gw.wait_ready().await;

    // The endpoint bound (3) is the tighter one: three reach the backend, the rest get 429.
    // Another backend is asked once the bound is full: the slow backend holds three (for 2.5 s).
    let flooding = flood(&gw, 20);
    let others = async {
        slow.wait_in_flight(&format!("{GV}/slow"), 3, Duration::from_secs(20))
            .await;
        let c = client();
        let mut codes = Vec::new();
        for _ in 0..10 {
            let r = c
                .get(gw.url("/apis/other.example.com/v1alpha1/flunders"))
                .send()
                .await
                .expect("other backend");
            codes.push(r.status().as_u16());
        }
        codes
    };
    let (answers, others) = tokio::join!(flooding, others);
    assert!(
        others.iter().all(|&c| c == 200),
        "another backend was not served during the flood: {others:?}"
    );
    let served = answers.iter().filter(|(c, _)| *c == 200).count();
    let refused: Vec<_> = answers.iter().filter(|(c, _)| *c == 429).collect();
    assert_eq!(served, 3, "{answers:?}");
    assert_eq!(refused.len(), 17, "{answers:?}");
    assert!(refused
        .iter()
        .all(|(_, retry)| retry.as_deref() == Some("1")));
    assert_eq!(slow.requests(&format!("{GV}/slow")).await, 3);

    // Once they are done, the backend takes requests again.
    let c = client();
    let r = c
        .get(gw.url(&format!("{GV}/slow?ms=1")))
        .send()
        .await
        .expect("after");
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiservice_bound_refuses_the_excess_with_a_status() {
    let slow = sample(G, "wardle", false);
    let gw = Apiagg::start(
        &one_backend("wardle", &slow),
        &["--max-requests-inflight-per-apiservice", "4"],
    );
    gw.wait_ready().await;
    let answers = flood(&gw, 12).await;
    let served = answers.iter().filter(|(c, _)| *c == 200).count();
    assert_eq!(served, 4, "{answers:?}");
    assert_eq!(slow.requests(&format!("{GV}/slow")).await, 4);
    let c = client();
    // The Status names the backend and its bound. The four held are all admitted once the
    // flood has left apiagg (its requests count until their last phase, which on a loaded
    // machine can come after the client has its answer): nothing but the asking request is in
    // flight.
    wait_until(
        "the flood's requests to leave apiagg (requests in flight: the asking one alone)",
        Duration::from_secs(20),
        || gw.metric("apiagg_requests_in_flight"),
        |in_flight| *in_flight == Some(1.0),
    )
    .await;
    let hold = flood(&gw, 4);
    let probe = async {
        // Once the backend holds the four (they hold the bound for 2.5 s), one more is refused.
        slow.wait_in_flight(&format!("{GV}/slow"), 4, Duration::from_secs(20))
            .await;
        let r = c
            .get(gw.url(&format!("{GV}/slow?ms=1")))
            .send()
            .await
            .expect("refused");
        (r.status().as_u16(), json_of(r).await)
    };
    let (_, (code, status)) = tokio::join!(hold, probe);
    assert_eq!(code, 429);
    assert_eq!(status["reason"], "TooManyRequests");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("v1alpha1.wardle.example.com") && message.contains('4'),
        "{message}"
    );
}

/// Whether the server closed a new connection within a second (a refused connection) rather
/// than keeping it open for a request.
async fn closed_at_once(port: u16) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connections_beyond_the_bound_are_dropped_at_accept() {
    let backend = sample(G, "wardle", false);
    // Idle connections are held on purpose: no head deadline closes them during the test.
    let gw = Apiagg::start(
        &one_backend("wardle", &backend),
        &["--max-connections", "20", "--read-header-timeout", "10m"],
    );
    gw.wait_ready().await;
    // Twenty idle connections are served (a request on each would be read).
    let mut held = Vec::new();
    for _ in 0..20 {
        let s = TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .expect("connect");
        held.push(s);
    }
    // Each is counted once pingora starts reading its first request (on a loaded machine that
    // may take a while): from then on, every further connection is dropped at once. One kept
    // before that closes again after its wait.
    wait_until(
        "a connection beyond the 20 held to be dropped at once",
        Duration::from_secs(20),
        || closed_at_once(gw.port),
        |closed| *closed,
    )
    .await;
    drop(held);
    let readyz = gw.url("/readyz");
    wait_until(
        "connections to be accepted again after others closed (/readyz answering 200)",
        Duration::from_secs(5),
        || status_code(&readyz),
        |code| *code == 200,
    )
    .await;
    let metrics = get_text(&gw.url("/metrics")).await;
    let refused = metrics
        .lines()
        .find(|l| l.starts_with("apiagg_client_connections_refused_total"))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(refused >= 1, "refusals not counted:\n{metrics}");
}

/// Open files of a process now.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_open_files_never_ejects_a_backend() {
    let backend = sample(G, "wardle", false);
    let gw = Apiagg::start_logged(
        &one_backend("wardle", &backend),
        &[
            "--max-connections",
            "100000",
            "--read-header-timeout",
            "10m",
        ],
    );
    gw.wait_ready().await;
    let pid = gw.proc.child.id();
    let limit = 256;
    let status = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit failed");

    // Fill the table with idle client connections, leaving one descriptor free: the next
    // request's own connection takes it, and its connection to the backend fails with EMFILE.
    let mut held = Vec::new();
    let mut exhausted = false;
    for _ in 0..limit {
        if open_files(pid) + 1 >= limit {
            break;
        }
        match TcpStream::connect(("127.0.0.1", gw.port)).await {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
        // Pacing, not a wait for a state: apiagg accepts each connection (and the count of
        // its descriptors above shows it) before the next.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Requests while apiagg has no descriptor to spare, and probes fail alike meanwhile. The
    // count above is a snapshot (apiagg accepts, probes and pools connections meanwhile, later
    // on a loaded machine), so the edge is found by what happens: an answer that is not the
    // exhaustion means a descriptor was left (one more connection is held), no answer at all
    // means none was left even for the request's own connection (one is given back). Twenty
    // requests are sent once the edge is reached.
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut at_the_edge = 0;
    for _ in 0..200 {
        match c.get(gw.url(&format!("{GV}/flunders"))).send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                let text = r.text().await.unwrap_or_default();
                if code == 503 && text.contains("open files") {
                    exhausted = true;
                } else if let Ok(s) = TcpStream::connect(("127.0.0.1", gw.port)).await {
                    held.push(s);
                }
            }
            Err(_) => drop(held.pop()),
        }
        if exhausted {
            at_the_edge += 1;
            if at_the_edge == 20 {
                break;
            }
        }
        // Pacing, not a wait for a state: each step lets apiagg settle what the last one
        // changed (a connection accepted, one closed) before the next request finds the edge.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
    assert!(
        exhausted,
        "apiagg never ran out of open files: the test proved nothing"
    );
    // Descriptors free again: the backend is served at once, it was never ejected.
    let flunders = gw.url(&format!("{GV}/flunders"));
    wait_until(
        "the backend to be served once descriptors were freed",
        Duration::from_secs(5),
        || status_code(&flunders),
        |code| *code == 200,
    )
    .await;
    let log = gw.log();
    assert!(
        !log.contains("endpoint ejected") && !log.contains("\"False\""),
        "apiagg blamed the backend for its own exhaustion:\n{log}"
    );
}

/// Security round 2 (suspicion): one HTTP/2 connection carries 100 streams, each a watch with
/// a backend connection of its own, so bounding client connections alone did not keep apiagg
/// below its open-file limit. Client and backend connections now share one budget (here 450
/// of a limit of 600): six HTTP/2 clients asking for 600 watches of an HTTP/1.1 backend get
/// what fits, the rest a 503 saying why before anything connects, and apiagg never runs into
/// `EMFILE` (no "open files" exhaustion in its log). Once the watches end, requests are served
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_watches_share_the_open_file_budget_with_client_connections() {
    use apiagg_tests::served_tls::ServedTls;

    let backend = sample(G, "wardle", false);
    let served = ServedTls::start(&one_backend("wardle", &backend), |dir, config| {
        Apiagg::start_with_open_files(dir, config, &[], 600)
    });
    let clients: Vec<reqwest::Client> = (0..6)
        .map(|_| {
            let builder = served.client().http2_prior_knowledge();
            builder
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client")
        })
        .collect();
    served.wait_ready(&clients[0]).await;
    let url = served.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=20"));
    let mut watches = Vec::new();
    for c in &clients {
        for _ in 0..100 {
            watches.push(tokio::spawn(c.get(&url).send()));
        }
    }
    let mut open = Vec::new();
    let (mut refused, mut other) = (0, Vec::new());
    for w in watches {
        match w.await.expect("join") {
            Ok(r) if r.status() == 200 => open.push(r),
            Ok(r) => {
                let code = r.status().as_u16();
                let text = r.text().await.unwrap_or_default();
                if code == 503 && text.contains("open-file limit allows") {
                    refused += 1;
                } else {
                    other.push(format!("{code} {text}"));
                }
            }
            Err(e) => other.push(e.to_string()),
        }
    }
    eprintln!(
        "{} watches open, {refused} refused by the budget",
        open.len()
    );
    assert!(other.is_empty(), "answers besides the budget's: {other:?}");
    assert!(
        refused > 0 && open.len() >= 400,
        "{} open, {refused} refused",
        open.len()
    );
    let log = served.gw.log();
    assert!(
        !log.contains("EMFILE"),
        "apiagg ran out of open files:\n{log}"
    );
    drop(open);
    let again = served.url(&format!("{GV}/flunders"));
    wait_until(
        "requests to be served again once the watches ended",
        Duration::from_secs(20),
        || answer_code(clients[0].get(&again)),
        |code| *code == 200,
    )
    .await;
}
