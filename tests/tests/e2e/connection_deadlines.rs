//! Hostile rows of security round 2, item 3: client connections that never finish their TLS
//! handshake or a request head, trickle it, sit idle between requests, or (HTTP/2) never send
//! the preface are closed
//! within kube-apiserver's timeouts (shortened here by their flags) and counted by phase, while
//! a legitimate client is served throughout, a slow request body and a quiet watch are never
//! cut, and apiagg's memory returns to its base once they are gone. Also: a watch whose reader
//! stopped reading ends at its deadline.

use std::time::{Duration, Instant};

use apiagg_tests::api::rss_kib;
use apiagg_tests::audit::metric;
use apiagg_tests::served_tls::ServedTls;
use apiagg_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const TIMEOUTS: [&str; 6] = [
    "--read-header-timeout",
    "2s",
    "--idle-timeout",
    "3s",
    "--http2-preface-timeout",
    "1s",
];

/// Sends a request head a byte every 250 ms on `stream` until the peer closes it; the time
/// that took from `since`.
async fn trickle(mut stream: TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    let head = b"GET /apis HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut bytes = head.iter().chain(std::iter::repeat(&b'a'));
    let mut buf = [0u8; 1024];
    let sending = async {
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return since.elapsed(),
                    Ok(_) => {}
                },
                // The trickle under test: a byte every 250 ms.
                _ = tokio::time::sleep(Duration::from_millis(250)) => {
                    let byte = *bytes.next().unwrap_or(&b'a');
                    if stream.write_all(&[byte]).await.is_err() {
                        return since.elapsed();
                    }
                }
            }
        }
    };
    tokio::time::timeout(limit, sending).await.ok()
}

/// Waits until the peer closes `stream` (reading whatever it sends); the time it took.
async fn closed_after(mut stream: TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return since.elapsed(),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(limit, read).await.ok()
}

async fn timed_out(gw: &Apiagg, phase: &str) -> f64 {
    let series = format!("apiagg_client_connections_timed_out_total{{phase=\"{phase}\"}}");
    gw.metric(&series).await.unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_trickling_connections_are_closed_and_a_client_is_served_throughout() {
    let backend = sample_with(G, "wardle", false, &["--namespaced"]);
    let gw = Apiagg::start(&one_backend("wardle", &backend), &TIMEOUTS);
    gw.wait_ready().await;
    let pid = gw.proc.child.id();
    let base = rss_kib(pid);

    // A legitimate client, one request every 100 ms on fresh connections, all along.
    let served = {
        let url = gw.url(&format!("{GV}/flunders"));
        tokio::spawn(async move {
            let c = client();
            let until = Instant::now() + Duration::from_secs(6);
            let mut codes = Vec::new();
            while Instant::now() < until {
                codes.push(c.get(&url).send().await.map_or(0, |r| r.status().as_u16()));
                // Pacing, not a wait for a state: one request every 100 ms all along.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            codes
        })
    };

    // 1,000 connections that send nothing, 1,000 that trickle a head a byte at a time.
    let opened = Instant::now();
    let mut silent = Vec::new();
    let mut trickling = Vec::new();
    for i in 0..2000 {
        let stream = TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .expect("connect");
        if i % 2 == 0 {
            silent.push(stream);
        } else {
            trickling.push(stream);
        }
    }
    let limit = Duration::from_secs(10);
    let trickled: Vec<_> = trickling
        .into_iter()
        .map(|s| tokio::spawn(trickle(s, opened, limit)))
        .collect();
    // The peak is read once apiagg has taken every connection: those it serves and those it
    // already closed at their head deadline make 2,000 (the scrape's own connection, and the
    // legitimate client's, count too: a peak within a few connections of it).
    let metrics = gw.url("/metrics");
    wait_until(
        "apiagg to take the 2,000 connections (served and closed at the head deadline)",
        limit,
        || async {
            let text = get_text(&metrics).await;
            let head = "apiagg_client_connections_timed_out_total{phase=\"request-head\"}";
            (
                metric(&text, "apiagg_client_connections"),
                metric(&text, head),
            )
        },
        |(served, closed)| served + closed >= 2000.0,
    )
    .await;
    let peak = rss_kib(pid);
    let silent_closed: Vec<_> =
        futures_util::future::join_all(silent.into_iter().map(|s| closed_after(s, opened, limit)))
            .await;
    let mut trickled_closed = Vec::new();
    for t in trickled {
        trickled_closed.push(t.await.expect("trickle"));
    }
    for (what, closed) in [("silent", &silent_closed), ("trickling", &trickled_closed)] {
        let latest = closed
            .iter()
            .map(|c| c.unwrap_or_else(|| panic!("a {what} connection still open after {limit:?}")))
            .max()
            .expect("some");
        eprintln!("{what}: the last of 1,000 closed {latest:?} after opening");
        assert!(latest < Duration::from_secs(5), "{what}: {latest:?}");
    }
    let codes = served.await.expect("client");
    assert!(
        codes.iter().all(|&c| c == 200),
        "the legitimate client: {codes:?}"
    );
    assert!(timed_out(&gw, "request-head").await >= 2000.0);

    // What the waiting connections held is given back or kept for reuse: a second wave of
    // 2,000 reuses it (apiagg's memory does not grow from wave to wave).
    let after = rss_kib(pid);
    let opened = Instant::now();
    let mut second = Vec::new();
    for _ in 0..2000 {
        second.push(
            TcpStream::connect(("127.0.0.1", gw.port))
                .await
                .expect("connect"),
        );
    }
    let second_closed =
        futures_util::future::join_all(second.into_iter().map(|s| closed_after(s, opened, limit)))
            .await;
    assert!(
        second_closed.iter().all(Option::is_some),
        "a second-wave connection stayed"
    );
    let after_second = rss_kib(pid);
    eprintln!(
        "RSS: base {base} KiB, 2,000 waiting connections {peak} KiB ({:.1} KiB each), after \
         {after} KiB, after a second wave {after_second} KiB",
        peak.saturating_sub(base) as f64 / 2000.0
    );
    assert!(
        peak.saturating_sub(base) <= 2000 * 64,
        "more than 64 KiB per waiting connection: base {base}, peak {peak} KiB"
    );
    assert!(
        after_second <= peak + peak / 5,
        "memory grew from wave to wave: peak {peak}, after {after}, after the second \
         {after_second} KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_is_closed_but_slow_bodies_and_quiet_watches_are_not_cut() {
    let backend = sample_with(G, "wardle", false, &["--namespaced"]);
    let gw = Apiagg::start(&one_backend("wardle", &backend), &TIMEOUTS);
    gw.wait_ready().await;

    // A keep-alive connection after one answer: closed once idle for 3 s.
    let mut stream = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    stream
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).await.expect("answer");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let answered = Instant::now();
    let closed = closed_after(stream, answered, Duration::from_secs(10))
        .await
        .expect("idle connection closed");
    assert!(
        closed >= Duration::from_millis(2800) && closed < Duration::from_secs(6),
        "{closed:?}"
    );
    assert!(timed_out(&gw, "idle").await >= 1.0);

    // A body trickled over four seconds (longer than the head timeout): served.
    let body = br#"{"apiVersion":"wardle.example.com/v1alpha1","kind":"Flunder","metadata":{"name":"slow"}}"#;
    let mut stream = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let head = format!(
        "POST {GV}/namespaces/default/flunders HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    for piece in body.chunks(body.len() / 4 + 1) {
        // The slowness under test: a piece a second, four seconds in all.
        tokio::time::sleep(Duration::from_secs(1)).await;
        stream.write_all(piece).await.expect("body");
    }
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("answer");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    // A watch with no events for five seconds (longer than every connection timeout): it
    // ends when it asked to, with its stream complete.
    let started = Instant::now();
    let url = gw.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=5"));
    let watch = client().get(url).send().await.expect("watch");
    assert_eq!(watch.status(), 200);
    watch.bytes().await.expect("the watch ends cleanly");
    assert!(started.elapsed() >= Duration::from_millis(4900));
}

/// TLS: a client that never finishes its handshake is closed after `--read-header-timeout`
/// (and counted against `--max-connections` meanwhile: apiagg runs the handshake itself); with
/// ALPN `h2`, one that completes the handshake and never sends the HTTP/2 preface is closed
/// after `--http2-preface-timeout`; one that sends it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_http2_clients_that_never_speak_are_closed() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};

    let backend = sample(G, "wardle", false);
    let served = ServedTls::start(&one_backend("wardle", &backend), |dir, config| {
        Apiagg::start_in(dir, config, &TIMEOUTS, &[])
    });
    // Half a ClientHello, then nothing.
    let mut stalled = TcpStream::connect(("127.0.0.1", served.gw.port))
        .await
        .expect("connect");
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .expect("write");
    let closed = closed_after(stalled, Instant::now(), Duration::from_secs(10))
        .await
        .expect("a stalled TLS handshake closed");
    assert!(
        closed >= Duration::from_millis(1800) && closed < Duration::from_secs(5),
        "{closed:?}"
    );

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(served.ca.cert_pem.as_bytes()) {
        roots.add(cert.expect("CA")).expect("root");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", served.gw.port))
        .await
        .expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let mut quiet = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    assert_eq!(quiet.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let handshaken = Instant::now();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match quiet.read(&mut buf).await {
                Ok(0) | Err(_) => return handshaken.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("closed without its preface");
    assert!(closed < Duration::from_secs(4), "{closed:?}");

    // The control: an HTTP/2 client that speaks is served (and not cut by the preface
    // deadline while it waits for its answer).
    let h2 = served
        .client()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let answer = h2
        .get(served.url(&format!("{GV}/slow?ms=1500")))
        .send()
        .await
        .expect("h2 request");
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert_eq!(answer.status(), 200);
    let metrics = served.metrics(&h2).await;
    for phase in ["tls-handshake", "http2-preface"] {
        let series = format!("apiagg_client_connections_timed_out_total{{phase=\"{phase}\"}}");
        assert!(metric(&metrics, &series) >= 1.0, "{series}");
    }
}

/// Suspicion: a watch whose client stopped reading outlived its `timeoutSeconds` (the cut was
/// checked only as a chunk passed, and the write blocked forever). An HTTP/2 client with a
/// 1 KiB window asks for a watch of 2 s and never reads; 100 events fill its window. The watch
/// ends at its deadline all the same: apiagg's requests in flight fall back to the scrape's
/// own. The control: after the events, before its deadline, the watch was still in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_reader_stalled_ends_at_its_deadline() {
    use apiagg_tests::streaming::Backend;
    use serde_json::json;

    let backend = Backend::start(G, "wardle", &[]);
    let served = ServedTls::start(&one_backend("wardle", &backend.sample), |dir, config| {
        Apiagg::start_in(dir, config, &[], &[])
    });
    let stalled = served
        .client()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(1024)
        .http2_initial_connection_window_size(1024)
        .build()
        .expect("client");
    let scraper = served.client().build().expect("client");
    let in_flight =
        || async { metric(&served.metrics(&scraper).await, "apiagg_requests_in_flight") };
    served.wait_ready(&scraper).await;
    let started = Instant::now();
    let watch = stalled
        .get(served.url(&format!("{}?watch=true&timeoutSeconds=2", backend.path())))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    for i in 0..100 {
        backend
            .create(&format!("stalled-{i}"), json!({"padding": "x".repeat(40)}))
            .await;
    }
    assert_eq!(in_flight().await, 2.0, "the stalled watch and the scrape");
    wait_until(
        "the stalled watch to end (in flight: the scrape alone)",
        Duration::from_secs(15),
        in_flight,
        |in_flight| *in_flight == 1.0,
    )
    .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(watch);
}
