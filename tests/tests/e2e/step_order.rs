//! The request path's order, one row per step (kube-apiserver's `DefaultBuildHandlerChain`):
//! each request is refused by the step upstream refuses it at, and every answer apiagg writes
//! itself once the audit began (step 1b for a bad `?timeout=`, step 3 on) carries its
//! `Audit-ID`, the flow-control headers once the request was classified, and is in the audit
//! log, a failed upgrade included.
//!
//! Two rows would pass in another order only by chance, so each has its control: `?timeout=`
//! is refused before authentication (the same request with a valid timeout gets 401), and
//! impersonation before flow control (the same caller without `Impersonate-User` gets 429).

use std::time::Duration;

use apiagg_tests::audit::read_events;
use apiagg_tests::flow::{level, schema};
use apiagg_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GV: &str = "/apis/wardle.example.com/v1alpha1";

/// alice is the one caller of a level of one seat that rejects beyond it; bob is unclassified.
const TOKENS: &str = "tok-alice,alice,1,\"held\"\ntok-bob,bob,2,\n";

const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";

/// An answer read off the wire: code, headers (lower-case names), body.
struct Raw {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        let found = self.headers.iter().find(|(n, _)| n == name);
        found.map(|(_, v)| v.as_str())
    }

    fn reason(&self) -> String {
        let status: serde_json::Value = serde_json::from_str(&self.body).unwrap_or_default();
        status["reason"].as_str().unwrap_or_default().to_string()
    }
}

/// Sends `head` (CRLF lines, without the blank line) on a new connection, asking it to close
/// after the answer unless the head says otherwise, and reads the answer (to its
/// `Content-Length`, or to the connection's end).
async fn send(port: u16, head: &str) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let connection = if head.contains("\r\nConnection:") {
        ""
    } else {
        "\r\nConnection: close"
    };
    let request = format!("{head}\r\nHost: apiagg{connection}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let read = tokio::time::timeout(Duration::from_secs(10), read_answer(&mut stream));
    let text = read
        .await
        .unwrap_or_else(|_| panic!("no answer within 10 s to {head:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default();
    let code = status
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw {
        code,
        headers,
        body: body.to_string(),
    }
}

/// One answer off `stream`: its head, and its body to its `Content-Length` or to the end.
async fn read_answer(stream: &mut tokio::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            assert!(
                n > 0,
                "the connection closed before the head's end: {text:?}"
            );
            continue;
        };
        let length = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            let length = name.eq_ignore_ascii_case("content-length");
            length.then(|| value.trim().parse::<usize>().ok()).flatten()
        });
        if n == 0 || length.is_some_and(|length| body.len() >= length) {
            return text;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_refused_by_the_step_kube_apiserver_refuses_it_at() {
    let backend = sample(G, "wardle", false);
    // A backend that answers 200 to everything: available, and no upgrade ever succeeds there.
    let fixed = fixed_server(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_string();
    std::fs::write(path("tokens.csv"), TOKENS).expect("tokens");
    std::fs::write(path("policy.yaml"), POLICY).expect("policy");
    let flow = format!(
        "{}{}",
        level("one-seat", "{type: Reject}"),
        schema("held", "held", "one-seat")
    );
    std::fs::write(path("flow.yaml"), flow).expect("flow control");
    let config = format!(
        "authentication: {{anonymous: false, tokenFile: tokens.csv}}\n\
         services:\n{}{}{}apiServices:\n{}{}{}",
        service("wardle", &backend.url),
        service("fixed", &format!("http://127.0.0.1:{fixed}")),
        // Nothing listens there: the APIService is never available.
        service("dead", "http://127.0.0.1:9"),
        apiservice(G, V, "wardle", ""),
        apiservice("fixed.example.com", "v1", "fixed", ""),
        apiservice("dead.example.com", "v1", "dead", ""),
    );
    let (policy, flow, log) = (path("policy.yaml"), path("flow.yaml"), path("audit.log"));
    let args = [
        "--audit-policy-file",
        &policy,
        "--audit-log-path",
        &log,
        "--flow-control-config-file",
        &flow,
    ];
    let args = [&SMALL_SERVER_ARGS[..], &args[..]].concat();
    let gw = Apiagg::start_in_secure(dir, &config, &args);
    gw.wait_ready().await;
    let port = gw.port;
    let bob = "Authorization: Bearer tok-bob";
    wait_until(
        "the fixed backend to be available",
        Duration::from_secs(20),
        || async {
            send(
                port,
                &format!("GET /apis/fixed.example.com/v1/x HTTP/1.1\r\n{bob}"),
            )
            .await
            .code
        },
        |code| *code == 200,
    )
    .await;

    // alice's seat is held by a slow request for the rows below that need it full.
    let holder = {
        let url = gw.url(&format!("{GV}/slow?ms=6000"));
        tokio::spawn(client().get(url).bearer_auth("tok-alice").send())
    };
    backend
        .wait_requests(&format!("{GV}/slow"), 1, Duration::from_secs(10))
        .await;

    // (the step, the request, the expected code and reason, whether it is audited)
    let rows: [(&str, String, u16, &str, bool); 12] = [
        ("0: CONNECT", format!("CONNECT {GV}/flunders HTTP/1.1"), 405, "MethodNotAllowed", false),
        ("0: a path not canonical", format!("GET {GV}/../x HTTP/1.1"), 400, "BadRequest", false),
        (
            "1b: a bad ?timeout=, before credentials are asked for",
            format!("GET {GV}/flunders?timeout=soon HTTP/1.1"),
            400,
            "BadRequest",
            true,
        ),
        (
            "3: the control of 1b: a valid ?timeout= without credentials",
            format!("GET {GV}/flunders?timeout=5s HTTP/1.1"),
            401,
            "Unauthorized",
            true,
        ),
        ("2: health without credentials", "GET /healthz HTTP/1.1".into(), 200, "", false),
        (
            "4: impersonation nobody may honour, before flow control",
            format!("GET {GV}/flunders HTTP/1.1\r\nAuthorization: Bearer tok-alice\r\nImpersonate-User: bob"),
            403,
            "Forbidden",
            true,
        ),
        (
            "5: the control of 4: the same caller, whose level is full",
            format!("GET {GV}/flunders HTTP/1.1\r\nAuthorization: Bearer tok-alice"),
            429,
            "TooManyRequests",
            true,
        ),
        (
            "7: an APIService none of whose endpoints is available",
            format!("GET /apis/dead.example.com/v1/things HTTP/1.1\r\n{bob}"),
            503,
            "ServiceUnavailable",
            true,
        ),
        (
            "7: a path nothing serves (no delegate)",
            format!("GET /nowhere HTTP/1.1\r\n{bob}"),
            404,
            "NotFound",
            true,
        ),
        (
            "9: an upgrade apiagg does not tunnel",
            format!("GET {GV}/flunders HTTP/1.1\r\n{bob}\r\nConnection: Upgrade, close\r\nUpgrade: h2c"),
            400,
            "BadRequest",
            true,
        ),
        (
            "9: a tunnelled upgrade the backend does not switch",
            format!(
                "GET /apis/fixed.example.com/v1/x HTTP/1.1\r\n{bob}\r\nConnection: Upgrade, close\r\n\
                 Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
            ),
            503,
            "ServiceUnavailable",
            true,
        ),
        ("forwarded", format!("GET {GV}/flunders HTTP/1.1\r\n{bob}"), 200, "", true),
    ];
    let mut audited = Vec::new();
    for (step, request, code, reason, is_audited) in &rows {
        let answer = send(port, request).await;
        assert_eq!(
            (answer.code, answer.reason()),
            (*code, reason.to_string()),
            "{step}: {}",
            answer.body
        );
        let id = answer.header("audit-id").map(str::to_string);
        assert_eq!(id.is_some(), *is_audited, "{step}: Audit-ID {id:?}");
        // Classified by flow control from step 5 on: bob's requests, and alice's refused one.
        let classified = *code == 429 || request.contains("tok-bob");
        assert_eq!(
            answer.header("x-kubernetes-pf-flowschema-uid").is_some(),
            classified,
            "{step}: flow-control headers {:?}",
            answer.headers
        );
        if let Some(id) = id {
            audited.push((*step, id, *code));
        }
    }
    holder.await.expect("holder").expect("holder's answer");

    // Every audited answer is in the log with its code, the failed upgrade's included.
    wait_until(
        "every audited answer's ResponseComplete event",
        Duration::from_secs(10),
        || async { read_events(std::path::Path::new(&log)) },
        |events| {
            audited.iter().all(|(_, id, _)| {
                events
                    .iter()
                    .any(|e| e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete")
            })
        },
    )
    .await;
    let events = read_events(std::path::Path::new(&log));
    for (step, id, code) in &audited {
        let complete = events
            .iter()
            .find(|e| e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete")
            .unwrap_or_else(|| panic!("{step}: no event"));
        assert_eq!(
            complete["responseStatus"]["code"], *code,
            "{step}: {complete}"
        );
    }
}

/// The concurrency limits under which a one-seat level is one seat.
const SMALL_SERVER_ARGS: [&str; 4] = apiagg_tests::flow::SMALL_SERVER;
