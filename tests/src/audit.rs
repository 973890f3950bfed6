//! Reading audit events back as a JSON consumer does (every line of `--audit-log-path` parsed
//! with serde_json), the shape every `audit.k8s.io/v1` `Event` must have, and the audit
//! webhook's counterparts: a kubeconfig naming a URL, receivers that collect `EventList`s or
//! accept and never answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::wait_until;

/// The audit log files of `path`: the live file and its rotated backups (`<stem>-<time>.<ext>`),
/// sorted by name (the live file last).
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let dir = path.parent().expect("log folder");
    let name = path.file_name().and_then(|n| n.to_str()).expect("log name");
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    let mut backups: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the log folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n != name && n.starts_with(&format!("{stem}-")) && n.ends_with(ext)
        })
        .collect();
    backups.sort();
    if path.exists() {
        backups.push(path.to_path_buf());
    }
    backups
}

/// Every event in the audit log at `path` (backups first), each line parsed as JSON: a line
/// that is not a JSON object fails the test with the file and the line.
pub fn read_events(path: &Path) -> Vec<Value> {
    let mut events = Vec::new();
    for file in log_files(path) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        // The writer may be in the middle of a line: only whole lines are read.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        for (n, line) in whole.lines().enumerate() {
            let event: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("{}:{} is not JSON ({e}): {line}", file.display(), n + 1)
            });
            assert!(event.is_object(), "{}:{}: {line}", file.display(), n + 1);
            events.push(event);
        }
    }
    events
}

/// The events of one audit ID, in the order they were written.
pub fn of<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["auditID"] == id).collect()
}

/// The stages of `events`, in order.
pub fn stages(events: &[&Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["stage"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Waits (the log is flushed at least every second) until the log holds a `ResponseComplete`
/// event for each of `ids`; returns every event then.
pub async fn wait_complete(path: &Path, ids: &[&str]) -> Vec<Value> {
    let complete = |events: &[Value], id: &str| {
        events
            .iter()
            .any(|e| e["auditID"] == id && e["stage"] == "ResponseComplete")
    };
    let missing = || async {
        let events = read_events(path);
        let absent = ids.iter().filter(|id| !complete(&events, id));
        absent.map(|id| id.to_string()).collect::<Vec<_>>()
    };
    wait_until(
        "a ResponseComplete event of each request (the IDs still without one observed)",
        Duration::from_secs(15),
        missing,
        Vec::is_empty,
    )
    .await;
    read_events(path)
}

/// Waits until the log's events satisfy `done` (at most 15 s); returns them.
pub async fn wait_for(path: &Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    wait_until(
        "the audit log to hold the events awaited",
        Duration::from_secs(15),
        || async { read_events(path) },
        |events| done(events),
    )
    .await
}

/// The audit ID of the request whose `ResponseComplete` event has `uri` and `verb`.
pub fn id_of<'a>(events: &'a [Value], uri: &str, verb: &str) -> Option<&'a str> {
    events
        .iter()
        .find(|e| e["stage"] == "ResponseComplete" && e["requestURI"] == uri && e["verb"] == verb)
        .and_then(|e| e["auditID"].as_str())
}

/// Whether `text` is a timestamp as `metav1.MicroTime` writes it: `2006-01-02T15:04:05.000000Z`.
pub fn is_micro_time(text: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:dd.ddddddZ";
    text.len() == shape.len()
        && text.chars().zip(shape.chars()).all(|(c, s)| match s {
            'd' => c.is_ascii_digit(),
            _ => c == s,
        })
}

/// The user an event names: (username, groups), or `None` when credentials were refused.
pub type User<'a> = Option<(&'a str, &'a [&'a str])>;

/// The `User-Agent` of the tests' callers ([`caller`]).
pub const AGENT: &str = "audit-e2e/1.0";

/// What every event of a request must say, whatever its level and stage.
#[derive(Clone, Copy)]
pub struct Expect<'a> {
    /// `auditID`.
    pub id: &'a str,
    /// `level` (`Metadata`, `Request`, `RequestResponse`).
    pub level: &'a str,
    /// `verb`.
    pub verb: &'a str,
    /// `requestURI`.
    pub uri: &'a str,
    /// `user` (name and groups); `None`: no authenticated user.
    pub user: User<'a>,
    /// `userAgent`.
    pub agent: &'a str,
    /// `sourceIPs`.
    pub source_ips: &'a [&'a str],
    /// (resource, namespace, name, apiGroup, apiVersion, subresource); empty strings are
    /// absent fields; `None`: a non-resource request (no `objectRef`).
    pub object: Option<[&'a str; 6]>,
}

impl<'a> Expect<'a> {
    /// A non-resource request of `user` from loopback with [`AGENT`].
    pub fn new(uri: &'a str, verb: &'a str, level: &'a str, user: User<'a>) -> Expect<'a> {
        let (id, agent, source_ips, object) = ("", AGENT, &["127.0.0.1"][..], None);
        Expect {
            id,
            level,
            verb,
            uri,
            user,
            agent,
            source_ips,
            object,
        }
    }

    /// A resource request: its `objectRef` fields.
    pub fn object(self, fields: [&'a str; 6]) -> Expect<'a> {
        Expect {
            object: Some(fields),
            ..self
        }
    }

    /// The request's `sourceIPs`.
    pub fn sources(self, source_ips: &'a [&'a str]) -> Expect<'a> {
        Expect { source_ips, ..self }
    }
}

/// A client sending [`AGENT`].
pub fn caller() -> reqwest::Client {
    let builder = reqwest::Client::builder().user_agent(AGENT);
    builder
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// An answer: status, the `Audit-ID` header (empty when none), the body.
pub struct Answer {
    /// The status code.
    pub code: u16,
    /// The `Audit-ID` header.
    pub id: String,
    /// The body as text.
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        let body = &self.body;
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    }
}

/// Sends `req`: its [`Answer`].
pub async fn send(req: reqwest::RequestBuilder) -> Answer {
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    let id = resp.headers().get("audit-id").and_then(|v| v.to_str().ok());
    let id = id.unwrap_or_default().to_string();
    Answer {
        code,
        id,
        body: resp.text().await.expect("body"),
    }
}

/// `RequestReceived` then `ResponseComplete`.
pub const BOTH: &[&str] = &["RequestReceived", "ResponseComplete"];
/// The stages of a long-running request.
pub const LONG: &[&str] = &["RequestReceived", "ResponseStarted", "ResponseComplete"];

/// Checks the events of `answer`: exactly the stages `staged`, the fields `want` (with the
/// answer's audit ID) in each, the answer's code in the last; returns them.
pub fn events_of<'a>(
    events: &'a [Value],
    answer: &Answer,
    want: Expect,
    staged: &[&str],
) -> Vec<&'a Value> {
    assert!(!answer.id.is_empty(), "no Audit-ID header: {}", answer.body);
    let mine = of(events, &answer.id);
    assert_eq!(
        stages(&mine),
        staged,
        "{} {}: {mine:?}",
        want.verb,
        want.uri
    );
    for event in &mine {
        check(
            event,
            &Expect {
                id: &answer.id,
                ..want
            },
        );
    }
    let last = mine.last().expect("an event");
    assert_eq!(last["responseStatus"]["code"], answer.code, "{last}");
    mine
}

/// An annotation of an event.
pub fn note<'a>(event: &'a Value, key: &str) -> Option<&'a str> {
    event["annotations"][key].as_str()
}

/// Checks the fields every event of the request shares, and the event's own shape: typed as
/// `audit.k8s.io/v1` `Event`, both timestamps as MicroTime in order, `responseStatus` from
/// `ResponseStarted` on, no bodies before `ResponseStarted`.
pub fn check(event: &Value, want: &Expect) {
    let e = event;
    assert_eq!(e["kind"], "Event", "{e}");
    assert_eq!(e["apiVersion"], "audit.k8s.io/v1", "{e}");
    assert_eq!(e["auditID"], want.id, "{e}");
    assert_eq!(e["level"], want.level, "{e}");
    assert_eq!(e["verb"], want.verb, "{e}");
    assert_eq!(e["requestURI"], want.uri, "{e}");
    assert_eq!(e["userAgent"], want.agent, "{e}");
    let ips: Vec<&str> = e["sourceIPs"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(ips, want.source_ips, "{e}");
    match want.user {
        Some((name, groups)) => {
            assert_eq!(e["user"]["username"], name, "{e}");
            let got: Vec<&str> = e["user"]["groups"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            assert_eq!(got, groups, "{e}");
        }
        None => assert_eq!(e["user"], serde_json::json!({}), "{e}"),
    }
    match want.object {
        Some(fields) => {
            let names = [
                "resource",
                "namespace",
                "name",
                "apiGroup",
                "apiVersion",
                "subresource",
            ];
            let mut expected = serde_json::Map::new();
            for (key, value) in names.iter().zip(fields) {
                if !value.is_empty() {
                    expected.insert(key.to_string(), value.into());
                }
            }
            assert_eq!(e["objectRef"], Value::Object(expected), "{e}");
        }
        None => assert!(e.get("objectRef").is_none(), "{e}"),
    }
    let received = e["requestReceivedTimestamp"].as_str().unwrap_or("");
    let stage_time = e["stageTimestamp"].as_str().unwrap_or("");
    assert!(is_micro_time(received), "{e}");
    assert!(is_micro_time(stage_time), "{e}");
    assert!(
        received <= stage_time,
        "stage before the request arrived: {e}"
    );
    let stage = e["stage"].as_str().unwrap_or("");
    assert!(
        ["RequestReceived", "ResponseStarted", "ResponseComplete"].contains(&stage),
        "{e}"
    );
    if stage == "RequestReceived" {
        for field in ["responseStatus", "requestObject", "responseObject"] {
            assert!(e.get(field).is_none(), "{field} at RequestReceived: {e}");
        }
        assert_eq!(received, stage_time, "{e}");
    } else {
        assert!(e["responseStatus"]["code"].is_u64(), "{e}");
    }
    let level = want.level;
    if e.get("requestObject").is_some() {
        assert!(level == "Request" || level == "RequestResponse", "{e}");
    }
    if e.get("responseObject").is_some() {
        assert_eq!(level, "RequestResponse", "{e}");
        assert_eq!(stage, "ResponseComplete", "{e}");
    }
}

/// The value of a counter or gauge sample in Prometheus text (`name{labels}` exactly as
/// written, labels in the order the registry writes them); 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0.0)
}

/// The sum of every sample of `name` whose labels contain all of `labels` (`key="value"`).
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name && labels.iter().all(|label| rest.contains(label))
        })
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

/// A kubeconfig whose current context names `url` (the audit webhook).
pub fn webhook_kubeconfig(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("audit-webhook.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: audit\n  cluster: {{server: \"{url}\"}}\n\
         users:\n- name: apiagg\n  user: {{}}\ncontexts:\n- name: audit\n  context: {{cluster: audit, user: apiagg}}\n\
         current-context: audit\n"
    );
    std::fs::write(&path, text).expect("write the webhook kubeconfig");
    path
}

/// What a webhook receiver got: every request body, parsed as JSON, with its path.
#[derive(Clone, Default)]
pub struct Received(Arc<Mutex<Vec<(String, Value)>>>);

impl Received {
    /// The bodies so far.
    pub fn bodies(&self) -> Vec<(String, Value)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every event of every batch so far, in the order received.
    pub fn events(&self) -> Vec<Value> {
        self.bodies()
            .into_iter()
            .flat_map(|(_, b)| b["items"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

/// A webhook receiver on loopback that answers `200 {}` to every POST and keeps its body:
/// `(url, received)`.
pub async fn webhook_receiver() -> (String, Received) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let received = Received::default();
    let kept = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let kept = kept.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let body: hyper::body::Incoming = req.into_body();
                        let bytes = body.collect().await.map(|b| b.to_bytes());
                        let bytes = bytes.unwrap_or_default();
                        let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                            Value::String(String::from_utf8_lossy(&bytes).into_owned())
                        });
                        kept.0
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((path, value));
                        let full = http_body_util::Full::new(bytes::Bytes::from_static(b"{}"));
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(full))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (format!("http://127.0.0.1:{port}/audit/events"), received)
}

/// A server on loopback that accepts connections and never answers (nor closes them): its
/// URL and how many connections it accepted.
pub async fn silent_server() -> (String, Arc<Mutex<u64>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(Mutex::new(0u64));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            *count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            held.push(stream);
        }
    });
    (format!("http://127.0.0.1:{port}/audit"), accepted)
}

/// Counts of `values`.
pub fn tally<'a>(values: impl IntoIterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut counts = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts
}
