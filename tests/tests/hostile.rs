//! Requests a hostile or unlucky client sends, as raw bytes over TCP: each row says what the
//! client gets and which backend, if any, saw the request (the backends count every path they
//! serve). Also: closed watches are not errors in the log, and random methods do not grow the
//! metrics.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

/// What is sent, the raw request, the acceptable status codes (0: closed without an answer),
/// and the one path below the group-version a backend may see for it.
type Row<'a> = (&'a str, Vec<u8>, &'a [u16], Option<&'a str>);

/// Sends `bytes` on a fresh connection; returns the status code of the answer (0 when the
/// connection closed without one) and the whole answer read within two seconds.
async fn raw(port: u16, bytes: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    // A server may answer and close before reading everything: a failed write is an answer too.
    let _ = stream.write_all(bytes).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    common::wire::status_of(&answer)
}

/// Who served requests for each path (backend and delegate `/debug/requests` logs).
async fn served(backend: &Sample, delegate: &Sample) -> (serde_json::Value, serde_json::Value) {
    let log = |s: &Sample| format!("{}/debug/requests", s.url);
    let c = client();
    (
        json_of(c.get(log(backend)).send().await.expect("log")).await,
        json_of(c.get(log(delegate)).send().await.expect("log")).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_refused_before_any_backend_sees_them() {
    let backend = sample(G, "wardle", false);
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}apiServices:\n{}",
        delegate.url,
        service("wardle", &backend.url),
        apiservice(G, V, "wardle", ""),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;

    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    let huge_header = format!(
        "GET {GV}/flunders HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1 << 20)
    );
    let many_headers = format!(
        "GET {GV}/flunders HTTP/1.1\r\nHost: x\r\n{}\r\n",
        (0..5000)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    let post = |headers: &str| {
        format!("POST {GV}/flunders HTTP/1.1\r\nHost: x\r\n{headers}\r\n{{}}").into_bytes()
    };
    // A body framed both ways: pingora reads it as chunked (RFC 9112), drops Content-Length and
    // closes the connection after the answer, so the request hidden behind the chunked body is
    // never read as a second one.
    let smuggling = format!(
        "POST {GV}/flunders HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n\
         0\r\n\r\nGET {GV}/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    );
    // (what, request, acceptable status codes (0: closed without an answer), the one path a
    // backend may see for it)
    let rows: Vec<Row> = vec![
        (
            "dot segments",
            get(&format!("{GV}/../../apps/v1/deployments")),
            &[400],
            None,
        ),
        (
            "encoded dot segments",
            get(&format!("{GV}/%2e%2E/x")),
            &[400],
            None,
        ),
        (
            "encoded slash in group/version",
            get("/apis/wardle.example.com%2Fv1alpha1/flunders"),
            &[400],
            None,
        ),
        (
            "empty segment",
            get(&format!("/{GV}/flunders")),
            &[400],
            None,
        ),
        (
            "asterisk target",
            b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            &[400],
            None,
        ),
        (
            "invalid percent-encoding",
            get(&format!("{GV}/flunders%zz")),
            &[400],
            None,
        ),
        (
            "1 MiB header",
            huge_header.into_bytes(),
            &[0, 400, 431],
            None,
        ),
        (
            "5,000 headers",
            many_headers.into_bytes(),
            &[0, 400, 431],
            None,
        ),
        (
            "duplicate Content-Length",
            post("Content-Length: 2\r\nContent-Length: 3\r\n"),
            &[0, 400],
            None,
        ),
        (
            "Content-Length with Transfer-Encoding",
            smuggling.into_bytes(),
            &[400],
            Some("/flunders"),
        ),
        (
            "obfuscated Transfer-Encoding",
            post("Transfer-Encoding: xchunked\r\n"),
            &[0, 400, 501],
            None,
        ),
        (
            "Transfer-Encoding with space before colon",
            post("Transfer-Encoding : chunked\r\n"),
            &[0, 400],
            None,
        ),
        (
            "NUL in a header name",
            b"GET /apis HTTP/1.1\r\nHost: x\r\nX-\0A: b\r\n\r\n".to_vec(),
            &[0, 400],
            None,
        ),
        (
            "HTTP/0.9 request line",
            b"GET /apis\r\n\r\n".to_vec(),
            &[0, 400],
            None,
        ),
    ];
    let mut failures = Vec::new();
    let mut seen_before = served(&backend, &delegate).await;
    for (what, request, expected, allowed) in &rows {
        let (code, answer) = raw(gw.port, request).await;
        if !expected.contains(&code) {
            let head = answer.lines().next().unwrap_or("");
            failures.push(format!(
                "{what}: got {code} ({head:?}), expected one of {expected:?}"
            ));
        }
        let seen = served(&backend, &delegate).await;
        let new_paths: Vec<String> = [(&seen.0, &seen_before.0), (&seen.1, &seen_before.1)]
            .iter()
            .flat_map(|(now, then)| {
                now.as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(path, count)| then.get(path.as_str()) != Some(count))
                    // apiagg's own discovery and OpenAPI rounds run meanwhile.
                    .filter(|(path, _)| {
                        !path.starts_with("/openapi")
                            && !["/api", "/apis", GV].contains(&path.as_str())
                    })
                    .map(|(path, _)| path.clone())
            })
            .collect();
        let allowed_paths: Vec<String> = allowed.iter().map(|p| format!("{GV}{p}")).collect();
        if new_paths != allowed_paths {
            failures.push(format!(
                "{what}: backends saw {new_paths:?}, expected {allowed_paths:?}"
            ));
        }
        seen_before = seen;
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // Forged identity headers never reach a backend as they were sent.
    let c = client();
    let echo = c
        .get(gw.url(&format!("{GV}/echo")))
        .header("X-Remote-User", "admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .expect("echo");
    let seen = json_of(echo).await;
    assert_eq!(
        seen["headers"]["x-remote-user"],
        serde_json::json!(["system:anonymous"])
    );
    assert_eq!(
        seen["headers"]["x-remote-group"],
        serde_json::json!(["system:unauthenticated"])
    );
    let impersonating = c
        .get(gw.url(&format!("{GV}/flunders")))
        .header("Impersonate-User", "admin")
        .send()
        .await
        .expect("impersonate");
    assert_eq!(impersonating.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_exemptions_are_exact_paths() {
    let backend = sample(G, "wardle", false);
    let config = one_backend("wardle", &backend);
    let gw = Apiagg::start(&config, &["--shutdown-drain-timeout", "10s"]);
    gw.wait_ready().await;
    // An open watch keeps apiagg draining (and answering) after SIGTERM.
    let c = client();
    let watch = c
        .get(gw.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=20")))
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    gw.proc.signal("TERM");
    let refused = eventually(Duration::from_secs(5), || async {
        status_code(&gw.url("/apis")).await == 429
    })
    .await;
    assert!(refused, "apiagg never started refusing");
    assert_eq!(status_code(&gw.url("/metrics")).await, 200);
    assert_eq!(status_code(&gw.url("/livez")).await, 200);
    for path in ["/metricsX", "/metrics/x", "/livezX", "/readyzfoo"] {
        assert_eq!(status_code(&gw.url(path)).await, 429, "{path}");
    }
    drop(watch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_watches_are_not_errors_and_methods_do_not_grow_metrics() {
    let backend = sample(G, "wardle", false);
    let config = one_backend("wardle", &backend);
    let gw = Apiagg::start_logged(&config, &[]);
    gw.wait_ready().await;

    // 1,000 watches opened and closed by the client.
    let c = client();
    let url = gw.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=60"));
    for chunk in 0..10 {
        let mut open = Vec::new();
        for _ in 0..100 {
            let watch = c.get(&url).send().await.expect("watch");
            assert_eq!(watch.status(), 200, "watch in round {chunk}");
            open.push(watch);
        }
        drop(open);
    }

    // Random methods, at a backend that is down (so each one is a termination) and locally.
    drop(backend);
    let down = eventually(Duration::from_secs(5), || async {
        status_code(&gw.url(&format!("{GV}/flunders"))).await == 503
    })
    .await;
    assert!(down, "the backend's absence was never noticed");
    // The series (each line without its value): a new label value would add one.
    let series = || async {
        let text = get_text(&gw.url("/metrics")).await;
        text.lines()
            .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_string())
            .collect::<std::collections::BTreeSet<String>>()
    };
    let send = |method: String| {
        let c = c.clone();
        let url = gw.url(&format!("{GV}/flunders"));
        async move {
            let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
            let _ = c.request(method, url).send().await;
        }
    };
    for i in 0..50 {
        send(format!("WARMUP{i}")).await;
    }
    series().await; // the first scrape adds the series of /metrics itself
    let before = series().await;
    for i in 0..10_000u32 {
        send(format!("M{:08X}", i.wrapping_mul(2_654_435_761))).await;
    }
    let after = series().await;
    let added: Vec<&String> = after.difference(&before).collect();
    assert!(added.is_empty(), "random methods added series: {added:#?}");

    let log = gw.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "ERROR lines: {errors:#?}");
    // The dead backend is reported when it dies, not once per request or round.
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warnings.len() <= 6,
        "{} WARN lines: {warnings:#?}",
        warnings.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_hold_up_others() {
    let backend = sample(G, "wardle", false);
    let config = one_backend("wardle", &backend);
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    // 200 connections trickle a request head one byte every 100 ms.
    let head = format!(
        "GET {GV}/slowloris HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n",
        "p".repeat(40)
    );
    let mut slow = Vec::new();
    for _ in 0..200 {
        let stream = TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .expect("connect");
        let head = head.clone().into_bytes();
        slow.push(tokio::spawn(async move {
            let mut stream = stream;
            for byte in head {
                if stream.write_all(&[byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    // Meanwhile an ordinary client is served at once, every time.
    let c = client();
    for _ in 0..20 {
        let started = std::time::Instant::now();
        let r = c
            .get(gw.url(&format!("{GV}/flunders")))
            .send()
            .await
            .expect("list");
        assert_eq!(r.status(), 200);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in slow {
        task.abort();
    }
    // No incomplete head was forwarded.
    let log = json_of(
        c.get(format!("{}/debug/requests", backend.url))
            .send()
            .await
            .expect("log"),
    )
    .await;
    assert!(log.get(format!("{GV}/slowloris")).is_none(), "{log}");
}

/// Paths a backend log gained (apiagg's own discovery and OpenAPI rounds left out).
fn new_paths(now: &serde_json::Value, then: &serde_json::Value) -> Vec<String> {
    now.as_object()
        .into_iter()
        .flatten()
        .filter(|(path, count)| then.get(path.as_str()) != Some(count))
        .filter(|(path, _)| {
            !path.starts_with("/openapi") && !["/api", "/apis", GV].contains(&path.as_str())
        })
        .map(|(path, _)| path.clone())
        .collect()
}

/// Security items 9–11 on the wire, over TLS with HTTP/1.1 and HTTP/2: a percent-encoded
/// unreserved character (the delegate would decode it, apiagg routes the raw path); an HTTP/2
/// body ending in an empty END_STREAM DATA frame, or with a `content-length` that disagrees
/// with it, towards an HTTP/1.1 backend on pooled connections (cloudflare/pingora#935); an
/// upgrade to anything but WebSocket or SPDY/3.1. Each row checks what apiagg answered, what
/// the backend received (it records raw bytes: no stray request) and what the delegate saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_attacks_are_refused_or_framed_once() {
    use common::wire::{h2_connect, h2_request, https_client, raw_tls, tls_apiagg, RawBackend};
    let backend = RawBackend::start(GV).await;
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}apiServices:\n{}",
        delegate.url,
        service("raw", &backend.url()),
        apiservice(G, V, "raw", ""),
    );
    let (gw, ca) = tls_apiagg(&config).await;
    let h1 = https_client(&ca);
    let base = format!("https://127.0.0.1:{}", gw.port);
    let available = eventually(Duration::from_secs(20), || async {
        let r = h1.get(format!("{base}{GV}/ping")).send().await;
        r.is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(available, "the backend's APIService never became available");
    let h2 = h2_connect(gw.port, &ca).await;
    let delegate_log = || async {
        let log = get_text(&format!("{}/debug/requests", delegate.url)).await;
        serde_json::from_str::<serde_json::Value>(&log).expect("delegate log")
    };
    // What the backend parsed, apiagg's availability checks left out.
    let backend_seen = || {
        let seen = backend.requests().into_iter();
        seen.filter(|s| s.path != GV).count()
    };
    let mut failures = Vec::new();

    // 9 and 11: refused with 400 naming the cause; neither the backend nor the delegate sees it.
    let get = |path: &str, headers: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Remote-User: admin\r\n{headers}\r\n")
            .into_bytes()
    };
    let h2c = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
               HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
    let upgrade = |protocols: &str| format!("Connection: Upgrade\r\nUpgrade: {protocols}\r\n");
    let h1_rows: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "9: encoded unreserved in the group (delegate decodes it)",
            get("/apis/apiregistration%2Ek8s.io/v1/apiservices", ""),
            "percent-encoded unreserved character",
        ),
        (
            "9: encoded letter below a remote group-version",
            get(&format!("{GV}/flunders/%61"), ""),
            "percent-encoded unreserved character",
        ),
        (
            "9: encoded dot segments, upper case",
            get(&format!("{GV}/%2E%2E/%2E%2E/apps/v1/deployments"), ""),
            "percent-encoded unreserved character",
        ),
        (
            "9: encoded backslash, lower case",
            get(&format!("{GV}/x%5cy"), ""),
            "encoded \\\"/\\\" or",
        ),
        (
            "11: h2c upgrade to a remote backend, forged X-Remote-User",
            get(&format!("{GV}/flunders"), h2c),
            "\\\"h2c\\\"",
        ),
        (
            "11: h2c upgrade to the delegate",
            get("/api/v1/namespaces/default/pods", h2c),
            "\\\"h2c\\\"",
        ),
        (
            "11: TLS/1.0 upgrade",
            get(&format!("{GV}/flunders"), &upgrade("TLS/1.0")),
            "\\\"TLS/1.0\\\"",
        ),
        (
            "11: an allowed and another protocol",
            get(&format!("{GV}/flunders"), &upgrade("websocket, h2c")),
            "\\\"websocket, h2c\\\"",
        ),
        (
            "11: empty Upgrade",
            get(&format!("{GV}/flunders"), &upgrade("")),
            "the Upgrade header is empty",
        ),
        (
            "11: Connection: upgrade without Upgrade",
            get(&format!("{GV}/flunders"), "Connection: upgrade\r\n"),
            "without an Upgrade header",
        ),
        (
            "11: Upgrade without Connection: upgrade",
            get(&format!("{GV}/flunders"), "Upgrade: websocket\r\n"),
            "without \\\"Connection: upgrade\\\"",
        ),
    ];
    // HTTP/2 forbids Upgrade and Connection (RFC 9113 §8.2.2): only the path rows apply.
    let h2_rows = [
        "/apis/apiregistration%2Ek8s.io/v1/apiservices",
        "/apis/wardle%2eexample.com/v1alpha1/flunders",
        "/apis/wardle.example.com/v1alpha1/%2e%2E/x",
    ];
    for (what, request, cause) in &h1_rows {
        let (backend_before, delegate_before) = (backend_seen(), delegate_log().await);
        let (code, answer) = raw_tls(gw.port, &ca, request).await;
        if code != 400 || !answer.contains(cause) {
            failures.push(format!(
                "{what} (HTTP/1.1): got {answer:?}, expected 400 {cause}"
            ));
        }
        // A refused upgrade closes the connection: nothing the client sends next is read.
        let closed = answer.to_ascii_lowercase().contains("connection: close");
        if what.starts_with("11") && !closed {
            failures.push(format!("{what}: the connection stays open: {answer:?}"));
        }
        let delegate_saw = new_paths(&delegate_log().await, &delegate_before);
        if backend_seen() != backend_before || !delegate_saw.is_empty() {
            failures.push(format!(
                "{what}: reached a backend (delegate: {delegate_saw:?})"
            ));
        }
    }
    for path in h2_rows {
        let (backend_before, delegate_before) = (backend_seen(), delegate_log().await);
        let got = h2_request(&h2, "GET", path, &[], b"").await;
        let refused =
            matches!(&got, Ok((400, text)) if text.contains("percent-encoded unreserved"));
        if !refused {
            failures.push(format!("9: {path} (HTTP/2): got {got:?}, expected 400"));
        }
        let delegate_saw = new_paths(&delegate_log().await, &delegate_before);
        if backend_seen() != backend_before || !delegate_saw.is_empty() {
            failures.push(format!(
                "9: {path} (HTTP/2) reached a backend: {delegate_saw:?}"
            ));
        }
    }

    // 10: bodies reach the HTTP/1.1 backend framed once; the next caller on the pooled
    // connection gets its own answer.
    let path = format!("{GV}/namespaces/default/flunders");
    let next_get = |id: &'static str| {
        let (h1, url) = (h1.clone(), format!("{base}{path}/next"));
        async move {
            let r = h1.get(url).header("x-test-id", id).send().await;
            let text = r.expect("GET").text().await.expect("body");
            (
                text == format!("{id} GET {GV}/namespaces/default/flunders/next "),
                text,
            )
        }
    };
    let body_rows: [(&str, &str, Option<&str>, &[u8]); 4] = [
        (
            "10: HTTP/2 body, no content-length, empty END_STREAM DATA",
            "h2-empty-end",
            None,
            b"abc",
        ),
        (
            "10: HTTP/2, only an empty END_STREAM DATA frame",
            "h2-only-end",
            None,
            b"",
        ),
        (
            "10: HTTP/2 content-length larger than the body",
            "h2-cl-long",
            Some("100"),
            b"abcde",
        ),
        (
            "10: HTTP/2 content-length smaller than the body",
            "h2-cl-short",
            Some("2"),
            b"abcde",
        ),
    ];
    for (what, id, length, body) in body_rows {
        let mut headers = vec![("x-test-id", id)];
        headers.extend(length.map(|l| ("content-length", l)));
        let got = h2_request(&h2, "POST", &path, &headers, body).await;
        let text = String::from_utf8_lossy(body);
        let seen = backend.with_id(id);
        if length.is_none() {
            let own = format!("{id} POST {path} {text}");
            if !matches!(&got, Ok((200, t)) if *t == own) {
                failures.push(format!("{what}: got {got:?}, expected 200 {own:?}"));
            }
            if seen.len() != 1 || seen[0].body != body {
                failures.push(format!("{what}: the backend saw {seen:?}"));
            }
        } else {
            // A malformed HTTP/2 request (RFC 9113 §8.1.1): the stream is reset (or 400); the
            // backend never reads it as a request, and its connection is not reused.
            let refused = match &got {
                Ok((code, _)) => *code == 400,
                Err(e) => e.is_remote() && e.reason() == Some(h2::Reason::PROTOCOL_ERROR),
            };
            if !refused {
                failures.push(format!(
                    "{what}: got {got:?}, expected PROTOCOL_ERROR or 400"
                ));
            }
            if !seen.is_empty() {
                failures.push(format!("{what}: the backend read it as {seen:?}"));
            }
        }
        for next in ["next-1", "next-2", "next-3"] {
            let (own, text) = next_get(next).await;
            if !own {
                failures.push(format!("{what}: the next GET got {text:?}"));
            }
        }
    }
    let chunked = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nX-Test-Id: h1-chunked\r\n\
         Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    );
    let (code, answer) = raw_tls(gw.port, &ca, chunked.as_bytes()).await;
    if code != 200 || !answer.ends_with(&format!("h1-chunked POST {path} abc")) {
        failures.push(format!("10: chunked HTTP/1.1 body: got {answer:?}"));
    }
    let seen = backend.with_id("h1-chunked");
    if seen.len() != 1 || seen[0].body != b"abc" {
        failures.push(format!(
            "10: chunked HTTP/1.1 body: the backend saw {seen:?}"
        ));
    }
    let strays = backend.strays();
    if !strays.is_empty() {
        failures.push(format!("10: stray bytes at the backend: {strays:?}"));
    }
    assert!(failures.is_empty(), "{failures:#?}\n{}", backend.raw());
}
