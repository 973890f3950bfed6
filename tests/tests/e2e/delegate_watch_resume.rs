//! A watch through apiagg to an HA control plane (issue 46 item 7, the kcp-dev/kcp#4373
//! pattern): when the API server serving it dies mid-stream, apiagg resumes it on another from
//! the last resourceVersion the client got, on the same response. The client gets every event
//! once, in order, and no end of stream; a resumption the history no longer allows ends with the
//! `ERROR` event of a `410 Expired` Status, as kube-apiserver sends it.
//!
//! The two API servers are sample-apiservers given the same writes (as two kube-apiservers
//! share etcd), so their resourceVersions agree; a write to one only is a change the dying one
//! never sent.

use std::time::Duration;

use apiagg_tests::served_tls::ServedTls;
use apiagg_tests::streaming::read_until;
use apiagg_tests::*;
use serde_json::{json, Value};

/// The watched collection (the stand-ins' own resource, cluster-scoped).
const WATCHED: &str = "/apis/apps/v1/deployments";

/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);

/// A kube-apiserver stand-in named `name`, with `extra` arguments.
fn apiserver(name: &str, extra: &[&str]) -> Sample {
    kube_named(name, extra)
}

/// apiagg with the two API servers as its delegate, and the client the test watches with.
struct Front {
    /// apiagg, on plain HTTP or on TLS (kept running).
    _gw: Result<Apiagg, ServedTls>,
    /// Where apiagg listens (`scheme://host:port`).
    base: String,
    /// HTTP/1.1 on plain HTTP, or HTTP/2 over TLS.
    client: reqwest::Client,
}

impl Front {
    /// apiagg in front of `servers`, watched over HTTP/2 when `h2`.
    async fn start(servers: &[Option<Sample>; 2], h2: bool) -> Front {
        let urls: Vec<&str> = servers.iter().flatten().map(|s| s.url.as_str()).collect();
        let config = format!(
            "delegate:\n  url: \"{}\"\n  endpoints: [\"{}\", \"{}\"]\n",
            urls[0], urls[0], urls[1]
        );
        if !h2 {
            let gw = Apiagg::start(&config, &[]);
            gw.wait_ready().await;
            let client = reqwest::Client::builder()
                .http1_only()
                .no_gzip()
                .build()
                .expect("client");
            return Front {
                base: gw.url(""),
                _gw: Ok(gw),
                client,
            };
        }
        let served = ServedTls::start(&config, |dir, config| {
            Apiagg::start_in(dir, config, &[], &[])
        });
        let client = served
            .client()
            .http2_prior_knowledge()
            .no_gzip()
            .build()
            .expect("client");
        served.wait_ready(&client).await;
        Front {
            base: served.url(""),
            _gw: Err(served),
            client,
        }
    }

    /// Opens `query` on the collection.
    async fn watch(&self, query: &str) -> reqwest::Response {
        self.watch_encoded(query, "identity").await
    }

    /// Opens `query` on the collection, accepting `encoding`.
    async fn watch_encoded(&self, query: &str, encoding: &str) -> reqwest::Response {
        let watch = self
            .client
            .get(format!("{}{WATCHED}?{query}", self.base))
            .header("Accept-Encoding", encoding)
            .send()
            .await
            .expect("watch");
        assert_eq!(watch.status(), 200);
        watch
    }
}

/// Creates `name` straight at `server`; its resourceVersion.
async fn create(server: &Sample, name: &str) -> String {
    let created: Value = client()
        .post(format!("{}{WATCHED}", server.url))
        .json(&json!({"metadata": {"name": name}}))
        .send()
        .await
        .expect("create")
        .error_for_status()
        .expect("created")
        .json()
        .await
        .expect("created JSON");
    created["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

/// Creates `name` at every API server still running (a write both share); its resourceVersion.
async fn create_everywhere(servers: &[Option<Sample>; 2], name: &str) -> String {
    let mut versions = Vec::new();
    for server in servers.iter().flatten() {
        versions.push(create(server, name).await);
    }
    versions.dedup();
    assert_eq!(versions.len(), 1, "the API servers disagree: {versions:?}");
    versions.remove(0)
}

/// The watches of the collection `server` was asked for, as `GET path?query`.
async fn watches(server: &Sample) -> Vec<String> {
    let log = server.queries().await;
    let prefix = format!("GET {WATCHED}?");
    log.into_iter()
        .filter(|q| q.starts_with(&prefix) && q.contains("watch=1"))
        .collect()
}

/// Which API server holds the client's watch (the only one asked for it).
async fn serving(servers: &[Option<Sample>; 2]) -> usize {
    let asked = wait_until(
        "one API server to be asked for the watch (the watches each was asked observed)",
        LIMIT,
        || async {
            let mut asked = Vec::new();
            for server in servers.iter().flatten() {
                asked.push(watches(server).await);
            }
            asked
        },
        |asked| asked.iter().map(Vec::len).sum::<usize>() == 1,
    )
    .await;
    usize::from(asked[0].is_empty())
}

/// `(type, name, resourceVersion)` of each event.
fn seen(events: &[Value]) -> Vec<(String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    events
        .iter()
        .map(|e| {
            let metadata = &e["object"]["metadata"];
            (
                text(&e["type"]),
                text(&metadata["name"]),
                text(&metadata["resourceVersion"]),
            )
        })
        .collect()
}

/// Whether `event` is the ADDED event of `name`.
fn added(event: &Value, name: &str) -> bool {
    event["type"] == "ADDED" && event["object"]["metadata"]["name"] == name
}

/// The scenario of both rows: `d1` exists, the client watches with `query` (from `d1`'s
/// resourceVersion, or a streaming list) and gets `d2`; `d3` reaches the other API server
/// only; the serving one dies; `d4` is written to the survivor. The client gets `d3` and `d4`
/// on the same response (over HTTP/2 when `h2`), once each, and the survivor was asked from
/// `d2`'s resourceVersion.
async fn resumes_on_the_survivor(query: &str, extra: &[&str], h2: bool) {
    let mut servers = [
        Some(apiserver("apiserver-a", extra)),
        Some(apiserver("apiserver-b", extra)),
    ];
    let front = Front::start(&servers, h2).await;
    let rv1 = create_everywhere(&servers, "d1").await;
    let mut stream = front.watch(&query.replace("{rv}", &rv1)).await;
    assert_eq!(stream.version() == reqwest::Version::HTTP_2, h2);
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    let rv2 = create_everywhere(&servers, "d2").await;
    events.extend(read_until(&mut stream, &mut buffer, |e| added(e, "d2")).await);

    let dying = serving(&servers).await;
    let survivor = servers[1 - dying].take().expect("survivor");
    let rv3 = create(&survivor, "d3").await;
    drop(servers[dying].take());
    events.extend(read_until(&mut stream, &mut buffer, |e| added(e, "d3")).await);
    let rv4 = create(&survivor, "d4").await;
    events.extend(read_until(&mut stream, &mut buffer, |e| added(e, "d4")).await);

    let events: Vec<_> = seen(&events)
        .into_iter()
        .filter(|(kind, _, _)| kind != "BOOKMARK")
        .collect();
    let expected: Vec<_> = [("d2", &rv2), ("d3", &rv3), ("d4", &rv4)]
        .into_iter()
        .map(|(name, rv)| ("ADDED".to_string(), name.to_string(), rv.clone()))
        .collect();
    let from_d1 = if query.contains("sendInitialEvents") {
        vec![("ADDED".to_string(), "d1".to_string(), rv1.clone())]
    } else {
        Vec::new()
    };
    assert_eq!(events, [from_d1, expected].concat());
    let resumed = watches(&survivor).await;
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    let resumed = &resumed[0];
    assert!(
        resumed.contains(&format!("resourceVersion={rv2}&")),
        "{resumed}"
    );
    assert!(
        !resumed.contains("sendInitialEvents") && !resumed.contains("resourceVersionMatch"),
        "{resumed}"
    );

    // The stream is still the client's: a later write reaches it too.
    create(&survivor, "d5").await;
    read_until(&mut stream, &mut buffer, |e| added(e, "d5")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_apiserver_when_its_own_dies() {
    resumes_on_the_survivor("watch=1&resourceVersion={rv}", &[], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_over_http2_resumes_on_the_same_stream() {
    resumes_on_the_survivor("watch=1&resourceVersion={rv}", &[], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_resumes_after_its_initial_events_without_asking_them_again() {
    resumes_on_the_survivor(
        "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
        &["--watch-list", "native"],
        false,
    )
    .await;
}

/// The survivor's history no longer holds the client's position (it kept 2 changes and took
/// 3 more the dying one never sent): the client gets the `ERROR` event of a 410 Expired
/// Status, then its watch ends cleanly. `extra`: how the survivor says so (an `ERROR` event in
/// a `200`, as kube-apiserver, or a `410` answer).
async fn expired_on_the_survivor(extra: &[&str]) {
    let args = [&["--watch-history", "2"], extra].concat();
    let mut servers = [
        Some(apiserver("apiserver-a", &args)),
        Some(apiserver("apiserver-b", &args)),
    ];
    let front = Front::start(&servers, false).await;
    let rv1 = create_everywhere(&servers, "d1").await;
    let mut stream = front.watch(&format!("watch=1&resourceVersion={rv1}")).await;
    let mut buffer = Vec::new();
    let rv2 = create_everywhere(&servers, "d2").await;
    read_until(&mut stream, &mut buffer, |e| added(e, "d2")).await;

    let dying = serving(&servers).await;
    let survivor = servers[1 - dying].take().expect("survivor");
    for name in ["x1", "x2", "x3"] {
        create(&survivor, name).await;
    }
    drop(servers[dying].take());
    let error = read_until(&mut stream, &mut buffer, |e| e["type"] == "ERROR").await;
    let status = &error[error.len() - 1]["object"];
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], 410, "{status}");
    assert_eq!(status["reason"], "Expired", "{status}");
    assert_eq!(
        error.len(),
        1,
        "nothing but the ERROR event after d2: {error:?}"
    );
    // Then the watch ends: the client lists again, as after any 410.
    let end = tokio::time::timeout(LIMIT, stream.chunk())
        .await
        .expect("the watch to end after its ERROR event")
        .expect("a clean end");
    assert!(end.is_none() && buffer.is_empty(), "{end:?} {buffer:?}");
    let resumed = watches(&survivor).await;
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(
        resumed[0].contains(&format!("resourceVersion={rv2}&")),
        "{resumed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_past_the_history_gets_the_expired_error_event_in_the_stream() {
    expired_on_the_survivor(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_answered_410_becomes_the_expired_error_event() {
    expired_on_the_survivor(&["--watch-expired-status"]).await;
}

/// A compressed watch (a streaming list to a client that accepts gzip, 1.37's
/// WatchListCompression) is opaque to apiagg: it is not resumed, and the client sees its end
/// (and re-watches) as it would without resumption.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_watch_is_not_resumed() {
    let extra = ["--watch-list", "native"];
    let mut servers = [
        Some(apiserver("apiserver-a", &extra)),
        Some(apiserver("apiserver-b", &extra)),
    ];
    let front = Front::start(&servers, false).await;
    create_everywhere(&servers, "d1").await;
    let query = "watch=1&sendInitialEvents=true&allowWatchBookmarks=true\
                 &resourceVersionMatch=NotOlderThan";
    let mut stream = front.watch_encoded(query, "gzip").await;
    assert_eq!(stream.headers()["content-encoding"], "gzip");
    let dying = serving(&servers).await;
    let survivor = servers[1 - dying].take().expect("survivor");
    drop(servers[dying].take());
    let ended = tokio::time::timeout(LIMIT, async {
        loop {
            match stream.chunk().await {
                Ok(Some(_)) => continue,
                Ok(None) => return "a clean end",
                Err(_) => return "a broken stream",
            }
        }
    })
    .await
    .expect("the watch to end");
    assert_eq!(ended, "a broken stream");
    assert!(watches(&survivor).await.is_empty());
}
