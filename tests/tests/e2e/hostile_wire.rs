//! The hostile-request table on the wire (security items 9–11): requests apiagg must refuse
//! before routing, or frame exactly once, asserted on the bytes the backend received and the
//! paths the delegate saw.

use std::time::Duration;

use apiagg_tests::*;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

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

/// apiagg over TLS in front of a raw backend (`test/raw`, wardle) and a delegate, once the
/// backend's APIService is available: the backend, the delegate, apiagg, its CA's PEM, its base
/// URL and an HTTPS client.
async fn raw_backend_behind_tls() -> RawSetup {
    raw_backend_behind_tls_with(&[]).await
}

/// What [`raw_backend_behind_tls`] starts.
type RawSetup = (
    apiagg_tests::wire::RawBackend,
    Sample,
    Apiagg,
    String,
    String,
    reqwest::Client,
);

/// [`raw_backend_behind_tls`] with apiagg's `extra` command-line arguments.
async fn raw_backend_behind_tls_with(extra: &[&str]) -> RawSetup {
    use apiagg_tests::wire::{https_client, tls_apiagg_with, RawBackend};
    let backend = RawBackend::start(GV).await;
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}apiServices:\n{}",
        delegate.url,
        service("raw", &backend.url()),
        apiservice(G, V, "raw", ""),
    );
    let (gw, ca) = tls_apiagg_with(&config, extra).await;
    let h1 = https_client(&ca);
    let base = format!("https://127.0.0.1:{}", gw.port);
    wait_until(
        "the backend's APIService to be available",
        Duration::from_secs(20),
        || answer_code(h1.get(format!("{base}{GV}/ping"))),
        |code| *code == 200,
    )
    .await;
    (backend, delegate, gw, ca, base, h1)
}

/// Security items 9–11 on the wire, over TLS with HTTP/1.1 and HTTP/2: a percent-encoded
/// unreserved character (the delegate would decode it, apiagg routes the raw path); an HTTP/2
/// body ending in an empty END_STREAM DATA frame, or with a `content-length` that disagrees
/// with it, towards an HTTP/1.1 backend on pooled connections (cloudflare/pingora#935); an
/// upgrade to anything but WebSocket or SPDY/3.1. Each row checks what apiagg answered, what
/// the backend received (it records raw bytes: no stray request) and what the delegate saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_attacks_are_refused_or_framed_once() {
    use apiagg_tests::wire::{h2_connect, h2_request, raw_tls};
    let (backend, delegate, gw, ca, base, h1) = raw_backend_behind_tls().await;
    let h2 = h2_connect(gw.port, &ca).await;
    let delegate_log = || async {
        let log = get_text(&format!("{}/debug/requests", delegate.url)).await;
        serde_json::from_str::<serde_json::Value>(&log).expect("delegate log")
    };
    // What the backend parsed for callers: apiagg's own requests (availability checks,
    // discovery and OpenAPI rounds, as `system:kube-aggregator`) left out.
    let backend_seen = || {
        let seen = backend.requests().into_iter();
        let own =
            |s: &apiagg_tests::wire::Seen| s.user.as_deref() == Some("system:kube-aggregator");
        seen.filter(|s| s.path != GV && !own(s)).count()
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

/// The forwarding rules on the wire, over TLS: `CONNECT` is refused (405) in any form and
/// reaches nothing; hop-by-hop headers and those `Connection` names never reach the backend;
/// `Expect: 100-continue` is answered by apiagg, which asks for the body only once the request
/// is on its way (a refused one never asks), and the backend gets the body without `Expect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_rules_hold_on_the_wire() {
    use apiagg_tests::wire::{h2_connect, h2_request, raw_tls, raw_tls_continue};
    let (backend, delegate, gw, ca, _base, _h1) = raw_backend_behind_tls().await;
    let delegate_log = || async {
        let log = get_text(&format!("{}/debug/requests", delegate.url)).await;
        serde_json::from_str::<serde_json::Value>(&log).expect("delegate log")
    };
    let callers = || {
        let seen = backend.requests().into_iter();
        seen.filter(|s| s.user.as_deref() != Some("system:kube-aggregator"))
            .count()
    };
    let mut failures = Vec::new();

    // CONNECT, authority-form and origin-form, over HTTP/1.1 and HTTP/2.
    let connects = [
        "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n".to_string(),
        format!("CONNECT {GV}/flunders HTTP/1.1\r\nHost: x\r\n\r\n"),
        "CONNECT /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
    ];
    for request in &connects {
        let (backend_before, delegate_before) = (callers(), delegate_log().await);
        let (code, answer) = raw_tls(gw.port, &ca, request.as_bytes()).await;
        if code != 405 || !answer.contains("CONNECT is refused") {
            failures.push(format!("{request:?}: got {answer:?}, expected 405"));
        }
        let delegate_saw = new_paths(&delegate_log().await, &delegate_before);
        if callers() != backend_before || !delegate_saw.is_empty() {
            failures.push(format!("{request:?} reached a backend: {delegate_saw:?}"));
        }
    }
    let h2 = h2_connect(gw.port, &ca).await;
    let backend_before = callers();
    let got = h2_request(&h2, "CONNECT", &format!("{GV}/flunders"), &[], b"").await;
    let refused = match &got {
        Ok((code, _)) => *code == 405,
        Err(e) => e.is_remote() && e.reason() == Some(h2::Reason::PROTOCOL_ERROR),
    };
    if !refused || callers() != backend_before {
        failures.push(format!("HTTP/2 CONNECT: got {got:?}, expected 405"));
    }

    // Hop-by-hop headers, and a header `Connection` names, stop at apiagg.
    let hop = format!(
        "GET {GV}/flunders/hop HTTP/1.1\r\nHost: x\r\nX-Test-Id: hop\r\n\
         Connection: keep-alive, X-Hop-Secret\r\nX-Hop-Secret: s3cret\r\n\
         Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n\
         Proxy-Authorization: Basic Zm9vOmJhcg==\r\nTE: gzip\r\nTrailer: X-Checksum\r\n\r\n"
    );
    let (code, answer) = raw_tls(gw.port, &ca, hop.as_bytes()).await;
    let seen = backend.with_id("hop");
    if code != 200 || seen.len() != 1 {
        failures.push(format!(
            "hop-by-hop: got {answer:?}, the backend saw {seen:?}"
        ));
    }
    for seen in &seen {
        for name in [
            "x-hop-secret",
            "keep-alive",
            "proxy-connection",
            "proxy-authorization",
            "te",
            "trailer",
        ] {
            if !seen.header(name).is_empty() {
                failures.push(format!("hop-by-hop: {name} reached the backend: {seen:?}"));
            }
        }
        let connection = seen.header("connection").join(",").to_ascii_lowercase();
        if connection.contains("x-hop-secret") {
            failures.push(format!(
                "hop-by-hop: Connection was passed on: {connection}"
            ));
        }
    }

    // Expect: 100-continue.
    let path = format!("{GV}/namespaces/default/flunders");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nX-Test-Id: expect\r\n\
         Expect: 100-continue\r\nContent-Length: 3\r\n\r\n"
    );
    let (interim, (code, answer)) = raw_tls_continue(gw.port, &ca, head.as_bytes(), b"abc").await;
    if !interim.starts_with("HTTP/1.1 100") {
        failures.push(format!(
            "Expect: no 100 Continue before the body: {interim:?}"
        ));
    }
    if code != 200 || !answer.ends_with(&format!("expect POST {path} abc")) {
        failures.push(format!("Expect: got {answer:?}"));
    }
    let seen = backend.with_id("expect");
    if seen.len() != 1 || seen[0].body != b"abc" || !seen[0].header("expect").is_empty() {
        failures.push(format!("Expect: the backend saw {seen:?}"));
    }
    // Refused before routing (an encoded letter): no 100, the refusal comes at once.
    let refused = format!(
        "POST {GV}/flunders/%61 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\
         Content-Length: 3\r\n\r\n"
    );
    let (interim, _) = raw_tls_continue(gw.port, &ca, refused.as_bytes(), b"abc").await;
    if !interim.starts_with("HTTP/1.1 400") {
        failures.push(format!(
            "Expect: a refused request asked for its body: {interim:?}"
        ));
    }
    assert!(failures.is_empty(), "{failures:#?}\n{}", backend.raw());
}

/// Security issue 42, findings 2 and 3: the request deadline bounds the whole exchange. A body
/// sent one byte at a time gets a 504 at `--request-timeout`, to a remote backend and to the
/// APIService API alike (before, it kept its flow-control seat for as long as it trickled); a
/// backend that sends informational heads without end is cut after five with a 503, over
/// HTTP/2 too, where nothing reaches the client meanwhile (before, it kept the request and its
/// seat for good), and its connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_bound_slow_bodies_and_endless_informational_heads() {
    use apiagg_tests::wire::{h2_connect, h2_request, trickle_tls};
    let (backend, _delegate, gw, ca, _, _) =
        raw_backend_behind_tls_with(&["--request-timeout", "3s"]).await;

    // Informational heads every 100 ms, never a final one, to an HTTP/2 client.
    let h2 = h2_connect(gw.port, &ca).await;
    let started = std::time::Instant::now();
    let path = format!("{GV}/namespaces/n/flunders/endless-1xx");
    let (code, text) = tokio::time::timeout(
        Duration::from_secs(10),
        h2_request(&h2, "GET", &path, &[], b""),
    )
    .await
    .expect("an answer within 10 s")
    .expect("not reset");
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("informational (1xx)"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    wait_until(
        "the backend's connection to be closed",
        Duration::from_secs(5),
        || async { backend.informational() },
        |(_, closed)| *closed == 1,
    )
    .await;
    let (sent, _) = backend.informational();
    assert!((6..=12).contains(&sent), "{sent} informational heads sent");

    // One body byte every 300 ms, announced as 100: proxied, and to the APIService API.
    for path in [
        format!("{GV}/namespaces/n/flunders"),
        "/apis/apiregistration.k8s.io/v1/apiservices".to_string(),
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        );
        let (code, text, took) =
            trickle_tls(gw.port, &ca, &head, 100, Duration::from_millis(300)).await;
        assert_eq!(code, 504, "{path}: {text}");
        assert!(text.contains("\"reason\":\"Timeout\""), "{path}: {text}");
        assert!(
            took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
            "{path}: answered after {took:?}"
        );
    }
    let posted = backend.requests();
    assert!(
        !posted.iter().any(|s| s.method == "POST"),
        "no half body became a request: {posted:?}"
    );
}
