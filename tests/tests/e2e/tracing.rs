//! OpenTelemetry tracing end to end (`--tracing-config-file`, as kube-apiserver): a real OTLP
//! collector receiver (gRPC `TraceService` on loopback) gets one trace per sampled request,
//! the server span with its `authentication`, `authorization`, `flow-control`, `connect` and
//! `backend` children, and the backend (the sample-apiserver's `echo`, which answers with the
//! headers it received) and the delegate get the same trace ID in `traceparent`. A privileged
//! caller's (`system:masters`, `system:monitoring`) sampled `traceparent` is continued even at
//! rate 0; anyone else's, and a refused request's, never picks the trace ID nor forces
//! sampling; unsampled requests export nothing; a full export queue drops spans and counts
//! them; without the flag the caller's trace-context headers pass unchanged.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use apiagg_tests::otlp::{OtlpReceiver, ReceivedSpan};
use apiagg_tests::*;
use serde_json::Value;

/// Generous: the exporter looks for spans every 250 ms.
const WAIT: Duration = Duration::from_secs(30);
const ECHO: &str = "/apis/wardle.example.com/v1alpha1/echo";
const DELEGATE_ECHO: &str = "/apis/apps/v1/echo";
/// The W3C example of a sampled caller.
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";
const CALLER_STATE: &str = "congo=t61rcWkgMzE";

/// A privileged caller, whose trace context apiagg continues, and one who is not.
const TOKENS: &str = "tok-admin,admin,1,\"system:masters\"\ntok-alice,alice,2,\n";
const ADMIN: (&str, &str) = ("authorization", "Bearer tok-admin");

struct Traced {
    gw: Apiagg,
    _backends: [Sample; 2],
}

/// apiagg with a remote APIService and a delegate, tracing to `endpoint` at `rate` per million
/// (no tracing without `rate`).
async fn start(endpoint: &str, rate: Option<u32>) -> Traced {
    let wardle = sample(G, "traced", false);
    let delegate = kube_delegate(false, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: {}}}\ndelegate: {{url: \"{}\"}}\n{}",
        tokens.display(),
        delegate.url,
        one_backend("traced", &wardle)
    );
    let file = dir.path().join("tracing.yaml");
    let file = file.to_str().expect("utf8").to_string();
    let mut extra = vec![];
    if let Some(rate) = rate {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\n\
             endpoint: {endpoint}\nsamplingRatePerMillion: {rate}\n"
        );
        std::fs::write(&file, text).expect("tracing file");
        extra = vec!["--tracing-config-file", &file];
    }
    let gw = Apiagg::start_in(dir, &config, &extra, &[]);
    gw.wait_ready().await;
    Traced {
        gw,
        _backends: [wardle, delegate],
    }
}

/// GET `path` with `headers`; the headers the backend received (from its `echo`).
async fn echo(gw: &Apiagg, path: &str, headers: &[(&str, &str)]) -> Value {
    let mut req = client()
        .get(gw.url(path))
        .header("user-agent", "tracing-e2e/1");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.expect("GET echo");
    assert_eq!(resp.status(), 200, "GET {path}");
    json_of(resp).await["headers"].clone()
}

/// The single value of `name` the backend received.
fn received<'a>(headers: &'a Value, name: &str) -> &'a str {
    let values = headers[name].as_array().map(Vec::as_slice).unwrap_or(&[]);
    assert_eq!(values.len(), 1, "one {name} expected: {headers}");
    values[0].as_str().expect("text")
}

/// `(trace ID, parent span ID, flags)` of a `traceparent`.
fn parts(traceparent: &str) -> (String, String, String) {
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    assert_eq!(fields[0], "00", "{traceparent}");
    (fields[1].into(), fields[2].into(), fields[3].into())
}

fn of_trace<'a>(spans: &'a [ReceivedSpan], trace: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.trace_id == trace).collect()
}

fn names(spans: &[&ReceivedSpan]) -> BTreeSet<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

/// Checks one request's trace: the server span `path` with `parent`, its children, and the
/// `backend` span being what the upstream request named as its parent.
fn check_trace(spans: &[&ReceivedSpan], path: &str, parent: &str, upstream_parent: &str) {
    let servers: Vec<_> = spans.iter().filter(|s| s.name == "KubernetesAPI").collect();
    assert_eq!(servers.len(), 1, "one server span: {spans:#?}");
    let server = servers[0];
    assert_eq!(server.kind, 2, "a server span");
    assert_eq!(server.service, "apiagg");
    assert_eq!(server.parent_span_id, parent);
    assert_eq!(server.attributes["url.path"], path);
    assert_eq!(server.attributes["http.request.method"], "GET");
    assert_eq!(server.attributes["http.response.status_code"], "200");
    assert_eq!(server.attributes["user_agent.original"], "tracing-e2e/1");
    let want: BTreeSet<String> = [
        "KubernetesAPI",
        "authentication",
        "authorization",
        "flow-control",
        "connect",
        "backend",
    ]
    .map(String::from)
    .into();
    assert_eq!(names(spans), want, "{spans:#?}");
    for child in spans.iter().filter(|s| s.name != "KubernetesAPI") {
        assert_eq!(child.parent_span_id, server.span_id, "{child:?}");
    }
    let backend = spans.iter().find(|s| s.name == "backend").expect("backend");
    assert_eq!(
        backend.span_id, upstream_parent,
        "the backend's traceparent names its span"
    );
    assert_eq!(backend.kind, 3, "a client span");
    assert_eq!(backend.attributes["http.response.status_code"], "200");
    assert!(backend.attributes.contains_key("apiagg.backend"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_request_is_one_trace_and_its_backend_continues_it() {
    let receiver = OtlpReceiver::start().await;
    let t = start(&receiver.endpoint, Some(1_000_000)).await;
    let got = echo(&t.gw, ECHO, &[]).await;
    let (trace, upstream_parent, flags) = parts(received(&got, "traceparent"));
    assert_eq!(flags, "01", "sampled");
    assert!(got.get("tracestate").is_none(), "{got}");
    let delegated = echo(&t.gw, DELEGATE_ECHO, &[]).await;
    let (delegate_trace, delegate_parent, _) = parts(received(&delegated, "traceparent"));
    assert_ne!(trace, delegate_trace, "one trace per request");
    let complete = |spans: &[ReceivedSpan], trace: &str| of_trace(spans, trace).len() >= 6;
    let spans = receiver
        .wait_for(WAIT, |s| {
            complete(s, &trace) && complete(s, &delegate_trace)
        })
        .await;
    check_trace(&of_trace(&spans, &trace), ECHO, "", &upstream_parent);
    let delegate_spans = of_trace(&spans, &delegate_trace);
    check_trace(&delegate_spans, DELEGATE_ECHO, "", &delegate_parent);
    // Exactly one trace per request: no other server span for these paths.
    let servers = spans
        .iter()
        .filter(|s| s.name == "KubernetesAPI")
        .filter(|s| [ECHO, DELEGATE_ECHO].contains(&s.attributes["url.path"].as_str()));
    assert_eq!(servers.count(), 2, "{spans:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_tunnel_carries_its_backend_span_to_the_backend() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

    let receiver = OtlpReceiver::start().await;
    let t = start(&receiver.endpoint, Some(1_000_000)).await;
    let path = format!("/apis/{G}/{V}/namespaces/default/flunders/x/exec");
    let url = format!("ws://127.0.0.1:{}{path}", t.gw.port);
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "traceparent",
        format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")
            .parse()
            .expect("header"),
    );
    request
        .headers_mut()
        .insert(ADMIN.0, ADMIN.1.parse().expect("header"));
    let (mut ws, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade");
    assert_eq!(response.status(), 101);
    let received = response.headers()["x-received-traceparent"]
        .to_str()
        .expect("text")
        .to_string();
    ws.send(Message::Text("ping".into())).await.expect("send");
    let echoed = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("echo in time");
    assert!(echoed.is_some_and(|m| m.is_ok()), "the tunnel carries data");
    drop(ws);
    // The caller's trace continues through the tunnel: the backend's parent is apiagg's
    // `backend` span of this request, a child of its server span.
    let (trace, upstream_parent, flags) = parts(&received);
    assert_eq!((trace.as_str(), flags.as_str()), (CALLER_TRACE, "01"));
    assert_ne!(
        upstream_parent, CALLER_SPAN,
        "apiagg's span, not the caller's"
    );
    let spans = receiver
        .wait_for(WAIT, |s| {
            of_trace(s, CALLER_TRACE)
                .iter()
                .any(|span| span.name == "KubernetesAPI")
        })
        .await;
    let spans = of_trace(&spans, CALLER_TRACE);
    let server = spans
        .iter()
        .find(|s| s.name == "KubernetesAPI")
        .expect("server span");
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    let backend = spans
        .iter()
        .find(|s| s.name == "backend")
        .expect("backend span");
    assert_eq!(backend.span_id, upstream_parent);
    assert_eq!(backend.parent_span_id, server.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_sampled_trace_is_continued_and_unsampled_ones_are_not_exported() {
    let receiver = OtlpReceiver::start().await;
    let t = start(&receiver.endpoint, Some(0)).await;
    // Not sampled at rate 0: the request works, the backend gets an unsampled context.
    let quiet = echo(&t.gw, ECHO, &[]).await;
    let (quiet_trace, _, quiet_flags) = parts(received(&quiet, "traceparent"));
    assert_eq!(quiet_flags, "00", "not sampled");
    // A privileged caller sampled: continued, its tracestate kept.
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let headers = [
        ("traceparent", caller.as_str()),
        ("tracestate", CALLER_STATE),
        ADMIN,
    ];
    let got = echo(&t.gw, ECHO, &headers).await;
    let (trace, upstream_parent, flags) = parts(received(&got, "traceparent"));
    assert_eq!((trace.as_str(), flags.as_str()), (CALLER_TRACE, "01"));
    assert_ne!(
        upstream_parent, CALLER_SPAN,
        "apiagg's own span is the backend's parent"
    );
    assert_eq!(received(&got, "tracestate"), CALLER_STATE);
    let spans = receiver
        .wait_for(WAIT, |s| of_trace(s, CALLER_TRACE).len() >= 6)
        .await;
    check_trace(
        &of_trace(&spans, CALLER_TRACE),
        ECHO,
        CALLER_SPAN,
        &upstream_parent,
    );
    // The unsampled request ended before the sampled one and exported nothing; nor did the
    // readiness probes: everything received is the caller's trace.
    assert!(of_trace(&spans, &quiet_trace).is_empty());
    let others: Vec<_> = spans
        .iter()
        .filter(|s| s.trace_id != CALLER_TRACE)
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tracing_the_callers_trace_context_passes_unchanged() {
    let t = start("unused:4317", None).await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let headers = [
        ("traceparent", caller.as_str()),
        ("tracestate", CALLER_STATE),
    ];
    let got = echo(&t.gw, ECHO, &headers).await;
    assert_eq!(received(&got, "traceparent"), caller);
    assert_eq!(received(&got, "tracestate"), CALLER_STATE);
    let plain = echo(&t.gw, ECHO, &[]).await;
    assert!(plain.get("traceparent").is_none(), "{plain}");
    let metrics = get_text(&t.gw.url("/metrics")).await;
    assert!(
        !metrics.contains("apiagg_tracing_"),
        "no tracer, no tracing metrics"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_export_queue_drops_spans_and_counts_them() {
    // A collector that accepts connections and never answers: the first export waits for its
    // timeout while requests fill the bounded queue.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let t = start(&endpoint, Some(1_000_000)).await;
    let c = client();
    let dropped = |metrics: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("apiagg_tracing_spans_dropped_total{reason=\"queue_full\"} ")
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let first = get_text(&t.gw.url("/metrics")).await;
    assert!(
        dropped(&first).is_some(),
        "the counter is exported: {first}"
    );
    // Six spans per request: 600 requests overflow the 2,048 queued and 512 in flight.
    for _ in 0..600 {
        let resp = c.get(t.gw.url(ECHO)).send().await.expect("GET");
        assert_eq!(resp.status(), 200);
    }
    let metrics = t.gw.url("/metrics");
    wait_until(
        "dropped spans to be counted",
        WAIT,
        || async { dropped(&get_text(&metrics).await) },
        |n| n.is_some_and(|n| n > 0.0),
    )
    .await;
}

#[test]
fn a_bad_tracing_file_stops_the_start_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("apiagg.yaml");
    std::fs::write(&config, OPEN_FOR_TESTS).expect("config");
    let file = dir.path().join("tracing.yaml");
    let text = "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\n\
                samplingRatePerMillion: 2000000\n";
    std::fs::write(&file, text).expect("tracing file");
    let apiagg = binary("apiagg", "apiagg-gateway");
    let data = dir.path().join("data");
    let runs = [
        vec!["serve", "--listen", "127.0.0.1:0", "--data-dir"],
        vec!["check"],
    ];
    for args in runs {
        let mut cmd = Command::new(&apiagg);
        cmd.args(&args);
        if args[0] == "serve" {
            cmd.arg(&data);
        }
        let out = cmd
            .arg("--config")
            .arg(&config)
            .arg("--tracing-config-file")
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .expect("run apiagg");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(file.to_str().expect("utf8")), "{stderr}");
        assert!(
            stderr.contains("samplingRatePerMillion: Invalid value"),
            "{stderr}"
        );
    }
}

/// Hostile rows: a caller's trace context that does not parse (bad hex, the all-zero trace ID
/// W3C forbids, a `tracestate` without a `traceparent`) is not continued and never reaches the
/// backend: apiagg starts its own trace, sampled by its own rate, and its own context replaces
/// the caller's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_trace_context_is_replaced_not_continued() {
    let receiver = OtlpReceiver::start().await;
    let t = start(&receiver.endpoint, Some(0)).await;
    let zero_trace = format!("00-{}-{CALLER_SPAN}-01", "0".repeat(32));
    let rows: [(&str, Vec<(&str, &str)>); 3] = [
        (
            "bad hex",
            vec![(
                "traceparent",
                "00-ZZf7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )],
        ),
        (
            "all-zero trace ID",
            vec![("traceparent", zero_trace.as_str())],
        ),
        ("tracestate alone", vec![("tracestate", CALLER_STATE)]),
    ];
    for (what, headers) in rows {
        let got = echo(&t.gw, ECHO, &headers).await;
        let sent = received(&got, "traceparent");
        let (trace, _, flags) = parts(sent);
        assert_ne!(trace, "0".repeat(32), "{what}: {sent}");
        assert!(!sent.contains("ZZ"), "{what}: {sent}");
        assert_eq!(
            flags, "00",
            "{what}: not sampled at rate 0, whatever the caller says"
        );
        assert!(got.get("tracestate").is_none(), "{what}: {got}");
    }
}

/// Hostile rows (security round 2): an anonymous caller, an authenticated one outside the
/// privileged groups, and requests refused before authentication (401) or by flow control
/// send a sampled `traceparent` at rate 0. None is continued: the backend gets a new,
/// unsampled trace ID and no `tracestate`, and nothing is exported under the caller's trace
/// ID. The control: the same context from `system:masters` is continued and exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_privileged_callers_pick_the_trace_and_force_sampling() {
    let receiver = OtlpReceiver::start().await;
    let t = start(&receiver.endpoint, Some(0)).await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let context = [
        ("traceparent", caller.as_str()),
        ("tracestate", CALLER_STATE),
    ];
    let alice = ("authorization", "Bearer tok-alice");
    for (who, extra) in [("anonymous", None), ("alice", Some(alice))] {
        let mut headers = context.to_vec();
        headers.extend(extra);
        let got = echo(&t.gw, ECHO, &headers).await;
        let (trace, _, flags) = parts(received(&got, "traceparent"));
        assert_ne!(trace, CALLER_TRACE, "{who}: the caller's trace ID went on");
        assert_eq!(flags, "00", "{who}: sampling forced at rate 0");
        assert!(got.get("tracestate").is_none(), "{who}: {got}");
    }
    // Refused before authentication: a bad token gets 401.
    let refused = client()
        .get(t.gw.url(ECHO))
        .header("traceparent", caller.as_str())
        .bearer_auth("not-a-token")
        .send()
        .await
        .expect("GET");
    assert_eq!(refused.status(), 401);
    // The control: the privileged caller's context is continued and exported.
    let mut headers = context.to_vec();
    headers.push(ADMIN);
    let got = echo(&t.gw, ECHO, &headers).await;
    let (trace, _, flags) = parts(received(&got, "traceparent"));
    assert_eq!((trace.as_str(), flags.as_str()), (CALLER_TRACE, "01"));
    let spans = receiver
        .wait_for(WAIT, |s| of_trace(s, CALLER_TRACE).len() >= 6)
        .await;
    // Exactly one server span under the caller's trace ID: the privileged caller's.
    let servers: Vec<_> = of_trace(&spans, CALLER_TRACE)
        .into_iter()
        .filter(|s| s.name == "KubernetesAPI")
        .collect();
    assert_eq!(servers.len(), 1, "{servers:#?}");
    assert_eq!(servers[0].parent_span_id, CALLER_SPAN);
    // Nothing else was sampled at rate 0.
    let others: Vec<_> = spans
        .iter()
        .filter(|s| s.trace_id != CALLER_TRACE)
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}
