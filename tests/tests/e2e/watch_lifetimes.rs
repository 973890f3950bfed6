//! Watches end, as kube-apiserver ends them: after the `timeoutSeconds` apiagg passes to the
//! backend (a random time between `--min-request-timeout` and twice it) so the client re-watches
//! and spreads over replicas; a backend that ignores it is cut a little later; on SIGTERM,
//! open watches end evenly over `--shutdown-watch-termination-grace-period`, not in one burst.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiagg_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

/// A backend that answers its discovery document to any request but a watch, and streams a
/// watch event every 200 ms to a watch, forever (it ignores `timeoutSeconds`); records each request line.
async fn endless_watch_backend() -> (String, Arc<Mutex<Vec<String>>>) {
    watch_backend(Events::Every200ms).await
}

/// What the watch backend sends after a watch's head.
#[derive(Clone, Copy)]
enum Events {
    /// A bookmark every 200 ms.
    Every200ms,
    /// Nothing: the watch stays idle.
    None,
}

/// A backend answering watches with a head and then `events`, and any other request with an
/// empty resource list; it logs the request lines it saw.
async fn watch_backend(events: Events) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match socket.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let line = text.lines().next().unwrap_or_default().to_string();
                    log.lock().expect("log").push(line.clone());
                    if !line.contains("watch=") {
                        // Discovery and availability checks.
                        let body = r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"endless.example.com/v1alpha1","resources":[]}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    if let Events::None = events {
                        // Held until the watch's connection closes.
                        let _ = socket.read(&mut byte).await;
                        return;
                    }
                    loop {
                        let event = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Flunder\",\"apiVersion\":\"wardle.example.com/v1alpha1\",\"metadata\":{\"resourceVersion\":\"1\"}}}\n";
                        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                        if socket.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            });
        }
    });
    (url, seen)
}

/// Reads a response body to its end; `Ok` when it ended cleanly, `Err` when it was cut.
async fn read_to_end(mut response: reqwest::Response) -> Result<usize, String> {
    let mut total = 0;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => total += chunk.len(),
            Ok(None) => return Ok(total),
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_end_after_the_min_request_timeout() {
    let backend = sample(G, "wardle", false);
    let (endless, seen) = endless_watch_backend().await;
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}",
        service("wardle", &backend.url),
        service("endless", &endless),
        apiservice(G, V, "wardle", ""),
        apiservice("endless.example.com", "v1alpha1", "endless", ""),
    );
    let gw = Apiagg::start(&config, &["--min-request-timeout", "2"]);
    gw.wait_ready().await;
    let c = client();

    // A backend that honours timeoutSeconds ends the watch cleanly within [2 s, 4 s): no
    // sooner, and long before the client's own 30 s timeout (which would cut it).
    let started = Instant::now();
    let watch = c
        .get(gw.url(&format!("{GV}/flunders?watch=true")))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    let ended = read_to_end(watch).await;
    let took = started.elapsed();
    assert!(
        ended.is_ok(),
        "the watch was cut instead of ending: {ended:?}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(25),
        "the watch lasted {took:?}"
    );

    // The client's own timeoutSeconds is kept: the watch ends cleanly, and a backend is asked
    // for exactly that (the endless one records what it was asked).
    let watch = c
        .get(gw.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=1")))
        .send()
        .await
        .expect("watch");
    assert!(read_to_end(watch).await.is_ok());
    let endless = gw.url("/apis/endless.example.com/v1alpha1");
    wait_until(
        "the endless backend to be available (its group-version served)",
        Duration::from_secs(20),
        || status_code(&endless),
        |code| *code == 200,
    )
    .await;
    let path = "/apis/endless.example.com/v1alpha1/flunders?watch=true";
    let watch = c
        .get(gw.url(&format!("{path}&timeoutSeconds=1")))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    let _ = read_to_end(watch).await;
    assert_eq!(
        asked_timeout(&seen),
        1,
        "the client's timeoutSeconds=1 was not passed on"
    );
    seen.lock().expect("log").clear();

    // A backend that ignores timeoutSeconds is cut by apiagg after the lifetime and as long
    // again at most; it was asked for a timeoutSeconds in [2, 4).
    let started = Instant::now();
    let watch = c.get(gw.url(path)).send().await.expect("watch");
    assert_eq!(watch.status(), 200);
    let ended = read_to_end(watch).await;
    let took = started.elapsed();
    let seconds = asked_timeout(&seen);
    assert!((2..4).contains(&seconds), "timeoutSeconds={seconds}");
    // Cut no sooner than twice the shortest lifetime, and long before the client's own 30 s
    // timeout would.
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(25),
        "cut after {took:?} ({ended:?})"
    );
}

/// The `timeoutSeconds` of the first watch the endless backend was asked for.
fn asked_timeout(seen: &Mutex<Vec<String>>) -> u64 {
    let lines = seen.lock().expect("log").clone();
    let asked = lines
        .iter()
        .find(|l| l.contains("watch=true"))
        .expect("the watch reached the backend");
    asked
        .split("timeoutSeconds=")
        .nth(1)
        .and_then(|rest| rest.split([' ', '&']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no timeoutSeconds in {asked:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_open_watches_evenly_over_the_grace_period() {
    ends_evenly_over_the_grace_period(Events::Every200ms).await;
}

/// The same with watches that receive nothing: each still ends at its turn (apiagg's
/// forwarding loop waits for the next event and for the watch's turn at once), not at the end
/// of the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_idle_watches_evenly_too() {
    ends_evenly_over_the_grace_period(Events::None).await;
}

async fn ends_evenly_over_the_grace_period(events: Events) {
    const WATCHES: usize = 1000;
    let grace = Duration::from_secs(6);
    let (endless, _) = watch_backend(events).await;
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("endless", &endless),
        apiservice("endless.example.com", "v1alpha1", "endless", ""),
    );
    let mut gw = Apiagg::start(
        &config,
        &[
            "--shutdown-watch-termination-grace-period",
            "6s",
            "--shutdown-drain-timeout",
            "30s",
            // 1,000 watches opened at once by one anonymous flow would overflow its
            // flow-control queues; this test is about their end.
            "--enable-priority-and-fairness=false",
        ],
    );
    gw.wait_ready().await;
    let endless = gw.url("/apis/endless.example.com/v1alpha1");
    wait_until(
        "the endless backend to be available (its group-version served)",
        Duration::from_secs(20),
        || status_code(&endless),
        |code| *code == 200,
    )
    .await;

    // Each watch on a connection of its own, as many clients would hold them.
    let url = gw.url("/apis/endless.example.com/v1alpha1/flunders?watch=true&timeoutSeconds=600");
    let mut watches = Vec::with_capacity(WATCHES);
    let opened = Arc::new(AtomicUsize::new(0));
    for _ in 0..WATCHES {
        let c = reqwest::Client::builder()
            .http1_only()
            .build()
            .expect("client");
        let (url, opened) = (url.clone(), opened.clone());
        watches.push(tokio::spawn(async move {
            let response = c.get(url).send().await.map_err(|e| e.to_string())?;
            if response.status() != 200 {
                let status = response.status();
                return Err(format!(
                    "status {status}: {}",
                    response.text().await.unwrap_or_default()
                ));
            }
            opened.fetch_add(1, Ordering::Relaxed);
            let _ = read_to_end(response).await;
            Ok(Instant::now())
        }));
        // Pace the opening a little, so the backend's accept loop keeps up.
        tokio::task::yield_now().await;
    }
    // Every watch is open once this process has the backend's answer to each (counted, not
    // timed: opening them takes longer on a loaded machine).
    wait_until(
        &format!("all {WATCHES} watches to be open (those open observed)"),
        Duration::from_secs(60),
        || async { opened.load(Ordering::Relaxed) },
        |open| *open == WATCHES,
    )
    .await;
    let term = Instant::now();
    gw.proc.signal("TERM");
    let mut ends = Vec::with_capacity(WATCHES);
    for w in watches {
        match w.await.expect("join") {
            Ok(at) => ends.push(at.duration_since(term)),
            Err(e) => panic!("a watch failed before SIGTERM: {e}"),
        }
    }
    let code = tokio::task::spawn_blocking(move || gw.proc.wait_exit(Duration::from_secs(30)))
        .await
        .expect("join");
    assert_eq!(code, Some(0), "apiagg did not exit cleanly");

    ends.sort();
    // All end over the 6 s grace period, long before the 30 s drain timeout would end them
    // (the bound leaves room for a loaded machine: each end is timed when this process reads
    // it).
    let last = *ends.last().expect("ends");
    assert!(
        last < Duration::from_secs(20),
        "the last watch ended {last:?} after SIGTERM"
    );
    // Evenly, not in one burst: the middle 80% of the ends span a third of the period or more
    // (an even spread spans 80% of it, a burst none), and half end after its first third.
    let (tenth, median, ninetieth) = (
        ends[WATCHES / 10],
        ends[WATCHES / 2],
        ends[WATCHES * 9 / 10],
    );
    assert!(
        ninetieth - tenth >= grace / 3,
        "not spread: 10% ended by {tenth:?}, 90% by {ninetieth:?} after SIGTERM (last {last:?})"
    );
    assert!(
        median > grace / 3,
        "half the watches ended within {median:?}"
    );
}
