//! An emulated streaming list whose backend breaks after part of the body went out (issue 46,
//! item 4; kubernetes#140136): the client's answer is abandoned — the HTTP/1.1 connection
//! closed before the body's end, the HTTP/2 stream reset with `INTERNAL_ERROR` — never ended as
//! if complete after a cut event, nor followed by a `Status`.
//!
//! The backend is a raw one on loopback: discovery and one list page as a server answers them,
//! and every watch a head, one whole event and half of the next, then the connection closed
//! with the chunked body unfinished (a process that died mid-write).

use std::time::Duration;

use apiagg_tests::streaming::{is_initial_events_end, read_until, streaming_list};
use apiagg_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The hostile backend's group.
const GROUP: &str = "cut.example.com";
/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);
/// The event the backend's watch sends whole.
const WHOLE: &str = r#"{"type":"ADDED","object":{"kind":"Flunder","apiVersion":"cut.example.com/v1alpha1","metadata":{"name":"b","resourceVersion":"8"}}}"#;
/// The start of the event it cuts.
const CUT: &str = r#"{"type":"ADDED","object":{"kind":"Flun"#;

/// Reads a request head; its request target (empty when the client left first).
async fn request_target(socket: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return String::new(),
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    head.split(' ').nth(1).unwrap_or_default().to_string()
}

/// A complete answer with `Connection: close`.
fn answer(code: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One connection of the hostile backend: one request, answered, then closed.
async fn serve(mut socket: TcpStream) {
    let target = request_target(&mut socket).await;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let collection = format!("/apis/{GROUP}/{V}/namespaces/default/flunders");
    let reply = if path == format!("/apis/{GROUP}/{V}") {
        let resources = serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{V}"),
            "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                "kind": "Flunder", "verbs": ["get", "list", "watch"]}],
        });
        answer("200 OK", &resources.to_string())
    } else if path == collection && query.split('&').any(|p| p == "watch=true") {
        // A head, a whole event, half of the next; then the connection closes unfinished.
        let whole = format!("{WHOLE}\n");
        let _ = socket
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{whole}\r\n{:x}\r\n{CUT}\r\n",
                    whole.len(),
                    CUT.len()
                )
                .as_bytes(),
            )
            .await;
        let _ = socket.flush().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        return;
    } else if path == collection {
        let list = serde_json::json!({
            "kind": "FlunderList", "apiVersion": format!("{GROUP}/{V}"),
            "metadata": {"resourceVersion": "7"},
            "items": [{"metadata": {"name": "a", "namespace": "default", "resourceVersion": "7"}}],
        });
        answer("200 OK", &list.to_string())
    } else {
        answer(
            "404 Not Found",
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
        )
    };
    let _ = socket.write_all(reply.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// Starts the hostile backend; its port.
async fn cutting_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(socket));
        }
    });
    port
}

/// A config with the hostile backend's APIService, its streaming lists always emulated.
async fn config() -> String {
    let port = cutting_backend().await;
    format!(
        "services:\n{}apiServices:\n  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    metadata: {{name: {V}.{GROUP}, annotations: {{apiagg.io/watch-list: emulate}}}}\n    spec: {{group: {GROUP}, version: {V}, groupPriorityMinimum: 1000, versionPriority: 15, service: {{namespace: test, name: cut, port: 443}}}}\n",
        service("cut", &format!("http://127.0.0.1:{port}"))
    )
}

/// Reads the emulated stream through the list and the relayed whole event, then to its end:
/// the bytes after the whole event and how the body ended.
async fn read_to_the_break(watch: &mut reqwest::Response) -> (Vec<u8>, reqwest::Result<()>) {
    let mut buffer = Vec::new();
    let initial = read_until(watch, &mut buffer, is_initial_events_end).await;
    assert_eq!(initial[0]["type"], "ADDED", "{initial:?}");
    assert_eq!(initial[0]["object"]["metadata"]["name"], "a");
    let relayed = read_until(watch, &mut buffer, |_| true).await;
    assert_eq!(relayed[0]["object"]["metadata"]["name"], "b", "{relayed:?}");
    loop {
        match tokio::time::timeout(LIMIT, watch.chunk()).await {
            Err(_) => panic!("the stream neither ended nor broke within {LIMIT:?}: {buffer:?}"),
            Ok(Ok(Some(chunk))) => buffer.extend_from_slice(&chunk),
            Ok(Ok(None)) => return (buffer, Ok(())),
            Ok(Err(e)) => return (buffer, Err(e)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_watch_cut_mid_event_closes_the_http1_connection() {
    let gw = Apiagg::start(&config().await, &[]);
    gw.wait_ready().await;
    let url = gw.url(&format!(
        "/apis/{GROUP}/{V}/namespaces/default/flunders?{}",
        streaming_list("")
    ));
    let mut watch = client().get(&url).send().await.expect("watch");
    assert_eq!(watch.version(), reqwest::Version::HTTP_11);
    assert_eq!(watch.status(), 200);
    let (rest, end) = read_to_the_break(&mut watch).await;
    // The cut event came as the backend sent it, nothing after it, and the body never ended:
    // the connection closed without the chunked body's last chunk.
    assert_eq!(String::from_utf8_lossy(&rest), CUT);
    let error = end.expect_err("the answer must break, not end as if complete");
    assert!(error.is_body() || error.is_decode(), "{error:?}");
    // apiagg serves on.
    assert_eq!(status_code(&gw.url("/healthz")).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_watch_cut_mid_event_resets_the_http2_stream() {
    use apiagg_tests::wire::tls_apiagg_with;

    let (gw, ca) = tls_apiagg_with(&config().await, &[]).await;
    let h2 = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let base = format!("https://127.0.0.1:{}", gw.port);
    let url = format!(
        "{base}/apis/{GROUP}/{V}/namespaces/default/flunders?{}",
        streaming_list("")
    );
    let mut watch = h2.get(&url).send().await.expect("watch");
    assert_eq!(watch.version(), reqwest::Version::HTTP_2);
    assert_eq!(watch.status(), 200);
    let (rest, end) = read_to_the_break(&mut watch).await;
    assert_eq!(String::from_utf8_lossy(&rest), CUT);
    let error = end.expect_err("the stream must be reset, not ended as if complete");
    // RST_STREAM with INTERNAL_ERROR, as Go's server aborts a handler (not a dropped stream's
    // CANCEL).
    assert!(format!("{error:?}").contains("INTERNAL_ERROR"), "{error:?}");
    // Only the stream: the connection serves the next request.
    let healthz = h2.get(format!("{base}/healthz")).send().await;
    assert_eq!(
        healthz.expect("healthz on the same connection").status(),
        200
    );
}
