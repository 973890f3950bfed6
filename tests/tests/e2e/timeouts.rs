//! Every wait has an end: a backend that never answers gets the client a 504 Status after
//! `--request-timeout` (or a shorter `?timeout=`) while watches through it stay open; a
//! black-holed delegate answers 503 within `--backend-connect-timeout`, after one attempt.

use std::time::{Duration, Instant};

use apiagg_tests::*;
use tokio::net::TcpListener;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_backends_time_out_and_watches_do_not() {
    let backend = sample(G, "wardle", false);
    let config = one_backend("wardle", &backend);
    let gw = Apiagg::start(&config, &["--request-timeout", "1s"]);
    gw.wait_ready().await;
    let c = client();

    // The backend would answer after a minute: a 504 proves apiagg cut the request, no sooner
    // than its timeout (the upper bound only catches a timer that never fires).
    let started = Instant::now();
    let slow = c
        .get(gw.url(&format!("{GV}/slow?ms=60000")))
        .send()
        .await
        .expect("slow request");
    let took = started.elapsed();
    assert_eq!(slow.status(), 504);
    let status = json_of(slow).await;
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "Timeout: request did not complete within the allotted timeout"
    );
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(10),
        "{took:?}"
    );

    // A shorter ?timeout= wins: under a request timeout of a minute, `?timeout=1s` is a 504
    // (the client gives up after 30 s), no sooner than its second.
    let patient = Apiagg::start(&config, &["--request-timeout", "60s"]);
    patient.wait_ready().await;
    let started = Instant::now();
    let short = c
        .get(patient.url(&format!("{GV}/slow?ms=60000&timeout=1s")))
        .send()
        .await
        .expect("a 504 within the client's 30 s: ?timeout=1s was not applied");
    let took = started.elapsed();
    assert_eq!(short.status(), 504);
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(10),
        "{took:?}"
    );
    drop(patient);
    // A bad one is a 400.
    let bad = c
        .get(gw.url(&format!("{GV}/flunders?timeout=soon")))
        .send()
        .await
        .expect("bad timeout");
    assert_eq!(bad.status(), 400);
    // A request within its time is untouched.
    let fine = c
        .get(gw.url(&format!("{GV}/slow?ms=200")))
        .send()
        .await
        .expect("fine");
    assert_eq!(fine.status(), 200);

    // A watch is long-running: it stays open past the request timeout and delivers events.
    let mut watch = c
        .get(gw.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=30")))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    // The wait is what is tested: the 1 s request timeout passes (with room) while the watch
    // is open; an event after it must still arrive.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let created = c
        .post(gw.url(&format!("{GV}/flunders")))
        .json(&serde_json::json!({"apiVersion": format!("{G}/{V}"), "kind": "Flunder", "metadata": {"name": "late"}}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let event = tokio::time::timeout(Duration::from_secs(5), watch.chunk())
        .await
        .expect("the watch delivers after the request timeout")
        .expect("read")
        .expect("the watch is still open");
    assert!(String::from_utf8_lossy(&event).contains("late"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_delegate_answers_503_within_the_connect_timeout() {
    // Accepts connections and never reads or writes: a TLS handshake never completes.
    let hole = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = hole.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = hole.accept().await {
            held.push(stream);
        }
    });
    let config =
        format!("delegate: {{url: \"https://127.0.0.1:{port}\", insecureSkipTLSVerify: true}}\n");
    let gw = Apiagg::start(&config, &["--backend-connect-timeout", "3s"]);
    let c = client();
    // A request that finds the API server hung makes one attempt, bounded by the connect
    // timeout (3 s; a retry would double it to 6 s, the bound leaves a loaded machine 2 s);
    // that ejects it, and the next ones are answered at once.
    for path in ["/api/v1/namespaces", "/apis/apps/v1/deployments"] {
        let started = Instant::now();
        let r = c.get(gw.url(path)).send().await.expect("request");
        let took = started.elapsed();
        assert_eq!(r.status(), 503, "{path}");
        assert!(
            took < Duration::from_secs(5),
            "{path}: answered after {took:?}"
        );
    }
}
