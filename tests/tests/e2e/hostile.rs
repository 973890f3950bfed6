//! Requests a hostile or unlucky client sends, as raw bytes over TCP: each row says what the
//! client gets and which backend, if any, saw the request (the backends count every path they
//! serve). Also: closed watches are not errors in the log, and random methods do not grow the
//! metrics. Wire attacks (encodings, body framing, upgrades) are in `hostile_wire.rs`, attacks on
//! the APIService API in `apiservice_attacks.rs`, on identities in `trust_identity.rs`, on access
//! in `secure_defaults.rs`.

use std::time::Duration;

use apiagg_tests::*;
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
    apiagg_tests::wire::status_of(&answer)
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
            "selector smuggling: a `;` pair Go's servers skip, so they read the second selector",
            get(&format!(
                "{GV}/flunders?fieldSelector=metadata.name%3Da;&fieldSelector=metadata.name%3Db"
            )),
            &[400],
            None,
        ),
        (
            "selector smuggling: an invalid escape in the first selector",
            get(&format!(
                "{GV}/flunders?labelSelector=a%3D%zz&labelSelector=a%3Db"
            )),
            &[400],
            None,
        ),
        ("1 MiB header", huge_header.into_bytes(), &[431], None),
        ("5,000 headers", many_headers.into_bytes(), &[431], None),
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
                    // apiagg's own discovery and OpenAPI rounds, and its probes of the delegate
                    // (`/readyz`), run meanwhile.
                    .filter(|(path, _)| {
                        !path.starts_with("/openapi")
                            && !["/api", "/apis", "/readyz", GV].contains(&path.as_str())
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

/// The shutdown gate exempts what kube-apiserver's `WithRetryAfter` exempts: paths that start
/// with `/readyz`, `/livez`, `/healthz` or `/metrics` (upstream's prefixes, which apiagg once
/// matched exactly); everything else gets the 429 once the shutdown delay passed. An exempt
/// path is still authenticated, authorized and routed after the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_exemptions_are_upstreams_prefixes() {
    let backend = sample(G, "wardle", false);
    let config = one_backend("wardle", &backend);
    let args = [
        "--shutdown-drain-timeout",
        "10s",
        "--shutdown-send-retry-after",
    ];
    let gw = Apiagg::start(&config, &args);
    gw.wait_ready().await;
    // A request in flight keeps apiagg draining (and answering) after SIGTERM. (An idle watch
    // no longer does: it ends at its turn in the drain, the first watch at once.)
    let c = client();
    let slow = tokio::spawn(c.get(gw.url(&format!("{GV}/slow?ms=8000"))).send());
    backend
        .wait_in_flight(&format!("{GV}/slow"), 1, Duration::from_secs(5))
        .await;
    gw.proc.signal("TERM");
    let apis = gw.url("/apis");
    wait_until(
        "apiagg to refuse /apis (429) after SIGTERM",
        Duration::from_secs(5),
        || status_code(&apis),
        |code| *code == 429,
    )
    .await;
    assert_eq!(status_code(&gw.url("/metrics")).await, 200);
    assert_eq!(status_code(&gw.url("/livez")).await, 200);
    for path in [
        "/metricsX",
        "/metrics/x",
        "/livezX",
        "/readyzfoo",
        "/healthz/x",
    ] {
        let code = status_code(&gw.url(path)).await;
        assert_ne!(code, 429, "{path} starts with an exempt prefix");
    }
    for path in ["/version", "/x/metrics", "/api/livez", "/openapi/v2"] {
        assert_eq!(status_code(&gw.url(path)).await, 429, "{path}");
    }
    let slow = slow.await.expect("task").expect("the slow request drains");
    assert_eq!(slow.status(), 200);
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
    let flunders = gw.url(&format!("{GV}/flunders"));
    wait_until(
        "the backend's absence to be noticed (503)",
        Duration::from_secs(5),
        || status_code(&flunders),
        |code| *code == 503,
    )
    .await;
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
    // The dead backend is reported when it dies, not once per request or round: of 10,000
    // requests, no warning repeats more than a few times (a loaded machine may see a probe or
    // a download fail around the death too), and they stay few in all.
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    let mut by_message: std::collections::BTreeMap<String, usize> = Default::default();
    for line in &warnings {
        let message = line.split_once("WARN").map_or(*line, |(_, m)| m);
        let shape: String = message
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        *by_message.entry(shape).or_default() += 1;
    }
    let most = by_message.values().copied().max().unwrap_or(0);
    assert!(
        most <= 3 && warnings.len() <= 20,
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
    // Meanwhile an ordinary client is served, every time, long before the slow heads could
    // be complete (about 12 s): nothing waits for them. The bound leaves a loaded machine room.
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
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // Pacing, not a wait for a state: the twenty requests spread over the slow heads'
        // trickle, which is what is tested.
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

/// The front door's own inputs, as an attacker sends them: a forged `Audit-ID` (it would
/// poison the audit trail and the backends' logs) is replaced by apiagg's own; a client's
/// flow-control headers are not taken for apiagg's; the flow-control dump is refused to callers
/// without credentials (it lists every FlowSchema and priority level). (A watch asking for no
/// end is bounded by apiagg: `watch_lifetimes.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_door_inputs_are_checked() {
    let backend = sample(G, "wardle", false);
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    let log = dir.path().join("audit.log");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .expect("policy");
    let (policy, log_path) = (
        policy.to_string_lossy().into_owned(),
        log.to_string_lossy().into_owned(),
    );
    let gw = Apiagg::start_secure(
        &format!(
            "authentication: {{anonymous: true}}\n{}",
            one_backend("wardle", &backend)
        ),
        &[
            "--audit-policy-file",
            &policy,
            "--audit-log-path",
            &log_path,
        ],
    );
    gw.wait_ready().await;
    let c = client();
    let forged: [&[u8]; 3] = [
        &[b'a'; 200],
        b"id with spaces\tand a tab",
        b"\xff\xfe-not-ascii",
    ];
    for bad in forged {
        let value = reqwest::header::HeaderValue::from_bytes(bad).expect("header value");
        let r = c
            .get(gw.url(&format!("{GV}/echo")))
            .header("Audit-ID", value)
            .header("X-Kubernetes-PF-FlowSchema-UID", "forged")
            .send()
            .await
            .expect("echo");
        let answered = r
            .headers()
            .get("audit-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .expect("an Audit-ID answer");
        let schema = r
            .headers()
            .get("x-kubernetes-pf-flowschema-uid")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let seen = json_of(r).await;
        assert_eq!(
            answered.len(),
            36,
            "a forged Audit-ID was kept: {answered:?}"
        );
        assert_eq!(
            seen["headers"]["audit-id"],
            serde_json::json!([answered]),
            "the backend saw another Audit-ID"
        );
        assert_ne!(schema.as_deref(), Some("forged"));
    }
    let text = wait_until(
        "six audit events to be written (the audit log observed)",
        Duration::from_secs(5),
        || async { Text(std::fs::read_to_string(&log).unwrap_or_default()) },
        |text| text.0.lines().count() >= 6,
    )
    .await
    .0;
    assert!(
        !text.contains("aaaaaaaaaa") && !text.contains("id with spaces"),
        "a forged Audit-ID reached the audit log"
    );

    let dump = c
        .get(gw.url("/debug/api_priority_and_fairness/dump_priority_levels"))
        .send()
        .await
        .expect("dump");
    assert_eq!(dump.status(), 403);
    let body = dump.text().await.expect("body");
    assert!(!body.contains("global-default"), "{body}");
}
