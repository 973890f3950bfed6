//! Streaming-list helpers: a sample backend of flunders driven straight (create, delete, its
//! `/debug/queries` log, held lists), apiagg in front of several, and watch-event readers.

use std::time::Duration;

use serde_json::{json, Value};

use crate::{apiservice, client, sample_with, service, wait_until, Apiagg, Sample, V};

/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);

/// A sample backend of `flunders` in its own group.
pub struct Backend {
    /// Its group.
    pub group: &'static str,
    /// The process.
    pub sample: Sample,
}

impl Backend {
    /// Starts one for `group`, named `name` (`<name>.test.svc`), with `extra` arguments.
    pub fn start(group: &'static str, name: &str, extra: &[&str]) -> Backend {
        Backend {
            group,
            sample: sample_with(group, name, false, extra),
        }
    }

    /// Its APIService's name.
    pub fn apiservice(&self) -> String {
        format!("{V}.{}", self.group)
    }

    /// Its collection path.
    pub fn path(&self) -> String {
        format!("/apis/{}/{V}/flunders", self.group)
    }

    /// Creates a flunder straight at the backend.
    pub async fn create(&self, name: &str, labels: Value) {
        let resp = client()
            .post(format!("{}{}", self.sample.url, self.path()))
            .json(&json!({"metadata": {"name": name, "labels": labels}}))
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status(), 201, "create {name}");
    }

    /// Creates a flunder with a `status` straight at the backend.
    pub async fn create_with_status(&self, name: &str, status: Value) {
        let resp = client()
            .post(format!("{}{}", self.sample.url, self.path()))
            .json(&json!({"metadata": {"name": name}, "status": status}))
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status(), 201, "create {name}");
    }

    /// Deletes a flunder straight at the backend.
    pub async fn delete(&self, name: &str) {
        let resp = client()
            .delete(format!("{}{}/{name}", self.sample.url, self.path()))
            .send()
            .await
            .expect("delete");
        assert_eq!(resp.status(), 200, "delete {name}");
    }

    /// What the backend was asked for its flunders, as `METHOD path?query`, oldest first.
    pub async fn queries(&self) -> Vec<String> {
        let log = self.sample.queries().await;
        let prefix = format!("GET {}", self.path());
        log.into_iter().filter(|q| q.starts_with(&prefix)).collect()
    }

    /// Waits until the backend was asked a query containing every one of `parts`.
    pub async fn wait_query(&self, parts: &[&str]) -> String {
        let has = |q: &String| parts.iter().all(|p| q.contains(p));
        let queries = wait_until(
            &format!("a query with {parts:?} (the queries observed)"),
            LIMIT,
            || self.queries(),
            |queries| queries.iter().any(has),
        )
        .await;
        queries.into_iter().find(has).expect("the query awaited")
    }

    /// `POST /debug/<action>` (`hold-lists`, `release-lists`).
    pub async fn debug(&self, action: &str) {
        let resp = client()
            .post(format!("{}/debug/{action}", self.sample.url))
            .send()
            .await
            .expect("debug action");
        assert_eq!(resp.status(), 200);
    }
}

/// The three kinds of backend, in their own groups: one that ignores streaming lists (the
/// sample's default), one that honours them and one that refuses them with 422.
pub fn three_backends() -> [Backend; 3] {
    [
        Backend::start("wardle.example.com", "ignores", &[]),
        Backend::start("native.example.com", "honours", &["--watch-list", "native"]),
        Backend::start(
            "refuses.example.com",
            "refuses",
            &["--watch-list", "reject"],
        ),
    ]
}

/// `watchList` of an APIService in apiagg's `/debug/apiagg/status` (null when absent).
pub async fn watch_list_status(gw: &Apiagg, apiservice: &str) -> Value {
    let status: Value = client()
        .get(gw.url("/debug/apiagg/status"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status JSON");
    status["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == apiservice))
        .map(|i| i["watchList"].clone())
        .unwrap_or_default()
}

/// apiagg with one APIService per backend.
pub fn gateway(backends: &[&Backend]) -> Apiagg {
    let mut config = String::from("services:\n");
    for (i, b) in backends.iter().enumerate() {
        config.push_str(&service(&format!("b{i}"), &b.sample.url));
    }
    config.push_str("apiServices:\n");
    for (i, b) in backends.iter().enumerate() {
        config.push_str(&apiservice(b.group, V, &format!("b{i}"), ""));
    }
    Apiagg::start(&config, &[])
}

/// The query of a streaming list as client-go sends it, plus `extra`.
pub fn streaming_list(extra: &str) -> String {
    format!(
        "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&timeoutSeconds=60{extra}"
    )
}

/// Reads JSON watch events from `watch` (bytes read ahead kept in `buffer`) until `done` says
/// the last one ends the read.
pub async fn read_until(
    watch: &mut reqwest::Response,
    buffer: &mut Vec<u8>,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        while let Some(at) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=at).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let event: Value = serde_json::from_slice(&line).expect("event JSON");
            let last = done(&event);
            events.push(event);
            if last {
                return events;
            }
        }
        let chunk = tokio::time::timeout(LIMIT, watch.chunk())
            .await
            .unwrap_or_else(|_| panic!("no event within {LIMIT:?}; so far {events:?}"))
            .expect("read watch")
            .unwrap_or_else(|| panic!("the watch ended after {events:?}"));
        buffer.extend_from_slice(&chunk);
    }
}

/// Whether an event is the BOOKMARK annotated `k8s.io/initial-events-end`.
pub fn is_initial_events_end(event: &Value) -> bool {
    event["type"] == "BOOKMARK"
        && event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
}

/// `(type, name)` of each event, bookmarks left out.
pub fn named(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["type"] != "BOOKMARK")
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// `(type, name)` pairs as [`named`] gives them.
pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(t, n)| (t.to_string(), n.to_string()))
        .collect()
}
