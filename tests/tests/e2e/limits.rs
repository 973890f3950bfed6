//! Bounded reads: a backend streaming a 1 GiB OpenAPI document is refused for that source alone,
//! apiagg's memory stays small, and the other sources keep being merged and served.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_tests::{
    binary, fixtures, kube_delegate, read_listening, wait_until, Answer, Proc, Sample, Text,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GIB: u64 = 1 << 30;

/// A backend whose `/openapi/v2` is a 1 GiB JSON document streamed in 1 MiB chunks (chunked
/// encoding, so no length warns the client); `/apis/...` answers a small `APIResourceList` so
/// probes pass. Returns its port and the most OpenAPI body bytes one connection took.
async fn endless_openapi_backend() -> (u16, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head);
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                if path == "/openapi/v2" {
                    let _ = stream_gib(&mut socket, &counter).await;
                    return;
                }
                let body = if path.starts_with("/apis/") {
                    r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"huge.example.com/v1","resources":[]}"#
                } else {
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}"#
                };
                let code = if path.starts_with("/apis/") {
                    "200 OK"
                } else {
                    "404 Not Found"
                };
                let response = format!(
                    "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (port, sent)
}

async fn stream_gib(socket: &mut tokio::net::TcpStream, most: &AtomicU64) -> std::io::Result<()> {
    socket
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await?;
    let opening = br#"{"swagger":"2.0","info":{"title":"huge","version":"v1"},"definitions":{"a":{"description":""#;
    let chunk = vec![b'x'; 1 << 20];
    let frame = |data: &[u8]| {
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    };
    socket.write_all(&frame(opening)).await?;
    let one_mib = frame(&chunk);
    let mut sent = 0;
    while sent < GIB {
        socket.write_all(&one_mib).await?;
        sent += chunk.len() as u64;
        most.fetch_max(sent, Ordering::Relaxed);
    }
    socket.write_all(&frame(br#""}}}"#)).await?;
    socket.write_all(b"0\r\n\r\n").await
}

/// Peak resident memory of a process (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmHWM value");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_openapi_document_is_refused_for_its_source_only() {
    let (huge_port, sent) = endless_openapi_backend().await;
    let metrics_doc =
        fixtures().join("extension-apiservers/metrics-server/openapi-v2-metrics-server-0.4.0.json");
    let good = Sample::start(
        &[
            "--openapi-v2",
            metrics_doc.to_str().expect("utf8"),
            "--group",
            "metrics.k8s.io",
            "--version",
            "v1beta1",
            "--resource",
            "pods",
            "--kind",
            "PodMetrics",
        ],
        false,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "listen: 127.0.0.1:0\nservices:\n  - {{namespace: test, name: huge, port: 443, endpoints: [\"http://127.0.0.1:{huge_port}\"]}}\n  - {{namespace: test, name: good, port: 443, endpoints: [\"{}\"]}}\napiServices:\n  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: v1.huge.example.com}}, spec: {{group: huge.example.com, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, service: {{namespace: test, name: huge}}}}}}\n  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: v1beta1.metrics.k8s.io}}, spec: {{group: metrics.k8s.io, version: v1beta1, groupPriorityMinimum: 100, versionPriority: 100, service: {{namespace: test, name: good}}}}}}\n",
        good.url
    );
    std::fs::write(dir.path().join("apiagg.yaml"), config).expect("write config");
    let log_path = dir.path().join("apiagg.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut child = Command::new(binary("apiagg", "apiagg-gateway"))
        .arg("serve")
        .arg("--config")
        .arg(dir.path().join("apiagg.yaml"))
        .args(["--threads", "2", "--backend-body-limit", "64MiB"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn apiagg");
    let base = read_listening(child.stdout.take().expect("stdout"))
        .expect("the listening line")
        .url;
    let gw = Proc { child };
    let pid = gw.child.id();

    // v2 is read from a client's first ask on: a client asks (and waits for the merge), again
    // until apiagg takes the connection (its listener may not accept yet).
    let asking = format!("{base}/openapi/v2");
    let _ask = tokio::spawn(async move {
        while apiagg_tests::client().get(&asking).send().await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let started = Instant::now();
    let log_text = || {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&log_path) {
            let _ = f.read_to_string(&mut text);
        }
        text
    };
    let log = wait_until(
        "the refusal to be logged (apiagg's log observed)",
        Duration::from_secs(90),
        || async { Text(log_text()) },
        |log| log.0.contains("exceeds the limit of 67108864 bytes"),
    )
    .await
    .0;
    println!(
        "refused after {:?}, the backend had sent {} MiB of its 1024",
        started.elapsed(),
        sent.load(Ordering::Relaxed) >> 20
    );
    let line = log
        .lines()
        .find(|l| l.contains("exceeds the limit"))
        .expect("the refusal line");
    assert!(
        line.contains("test/huge:443"),
        "the line names the source: {line}"
    );
    assert!(
        line.contains("/openapi/v2"),
        "the line names the document: {line}"
    );

    // The good source is merged and served; the huge one is not in the document.
    let client = apiagg_tests::client();
    // The answer, whether the good source's paths are in, whether the huge one's are.
    let v2 = || async {
        match client.get(format!("{base}/openapi/v2")).send().await {
            Err(e) => (Answer::Failed(e.to_string()), false, false),
            Ok(r) => {
                let code = Answer::Code(r.status().as_u16());
                let text = r.text().await.unwrap_or_default();
                let good = text.contains("/apis/metrics.k8s.io/v1beta1/");
                (code, good, text.contains("huge"))
            }
        }
    };
    wait_until(
        "/openapi/v2 to serve the good source's paths alone (answer, good, huge observed)",
        Duration::from_secs(30),
        v2,
        |(code, good, huge)| *code == 200 && *good && !*huge,
    )
    .await;

    let peak = peak_rss(pid);
    println!("apiagg peak RSS: {} MiB", peak >> 20);
    assert!(
        peak < 200 << 20,
        "apiagg peaked at {} MiB while refusing a 1 GiB document",
        peak >> 20
    );
    assert!(
        sent.load(Ordering::Relaxed) < GIB,
        "apiagg read the whole document instead of stopping at the limit"
    );
}

/// Readiness covers the OpenAPI documents: the moment `/readyz` turns green, `/openapi/v2` and
/// `/openapi/v3` already serve the delegate's documents (kube-apiserver merges its own before it
/// reports ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_green_only_with_the_delegates_openapi_published() {
    let delegate = kube_delegate(true, &[]);
    let config = format!("delegate: {{url: \"{}\"}}\n", delegate.url);
    let gw = apiagg_tests::Apiagg::start(&config, &[]);
    let client = apiagg_tests::client();
    let started = Instant::now();
    wait_until(
        "apiagg to answer /readyz with 200",
        Duration::from_secs(30),
        || apiagg_tests::answer_code(client.get(gw.url("/readyz"))),
        |code| *code == 200,
    )
    .await;
    println!("ready after {:?}", started.elapsed());
    let v2 = client
        .get(gw.url("/openapi/v2"))
        .send()
        .await
        .expect("GET /openapi/v2");
    assert_eq!(
        v2.status(),
        200,
        "/openapi/v2 right after readyz turned green"
    );
    let index = client
        .get(gw.url("/openapi/v3"))
        .send()
        .await
        .expect("GET /openapi/v3");
    assert_eq!(index.status(), 200);
    let index: serde_json::Value = index.json().await.expect("index JSON");
    assert!(
        index["paths"]["api/v1"].is_object(),
        "the delegate's v3 documents are listed: {index}"
    );
    let verbose = client
        .get(gw.url("/readyz?verbose"))
        .send()
        .await
        .expect("GET /readyz?verbose")
        .text()
        .await
        .expect("body");
    for check in [
        "[+]poststarthook/apiservice-openapi-controller ok",
        "[+]poststarthook/apiservice-openapiv3-controller ok",
    ] {
        assert!(verbose.contains(check), "{check} missing in:\n{verbose}");
    }
}
