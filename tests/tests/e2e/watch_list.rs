//! Streaming lists (KEP-3157) through apiagg, the protocol: events changed during the list,
//! expiry, refusals, plain requests and hostile callers (the clients: `watch_list_clients.rs`),
//! against sample backends: one that honours `sendInitialEvents`
//! (`--watch-list native`: requests pass through), one that ignores it (the sample's default,
//! like many extension servers: apiagg emulates) and one that refuses it with 422 (a server
//! without the feature: apiagg emulates). Every assertion is on what the client received and on
//! what the backend was asked (its `/debug/queries` log).

use std::time::Duration;

use apiagg_tests::streaming::*;
use apiagg_tests::*;
use serde_json::{json, Value};

/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_during_the_initial_list_are_neither_lost_nor_duplicated() {
    let backend = Backend::start("wardle.example.com", "ignores", &[]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    let web = json!({"app": "web"});
    for name in ["a", "b", "c"] {
        backend.create(name, web.clone()).await;
    }
    backend.create("other", json!({"app": "db"})).await;

    // Lists at the backend wait (their state taken on arrival) while objects change.
    backend.debug("hold-lists").await;
    let url = gw.url(&format!(
        "{}?{}",
        backend.path(),
        streaming_list("&labelSelector=app%3Dweb")
    ));
    let opened = tokio::spawn(async move { client().get(url).send().await.expect("watch") });
    backend
        .wait_query(&["limit=500", "labelSelector=app%3Dweb"])
        .await;
    backend.create("d", web.clone()).await;
    backend.create("not-web", json!({"app": "db"})).await;
    backend.delete("b").await;
    backend.create("e", web.clone()).await;
    backend.debug("release-lists").await;

    let mut watch = opened.await.expect("watch task");
    assert_eq!(watch.status(), 200);
    let mut buffer = Vec::new();
    let initial = read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    assert_eq!(
        named(&initial),
        pairs(&[("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]),
        "the list as it was when it arrived, selected: {initial:?}"
    );
    let bookmark = initial.last().expect("bookmark");
    assert_eq!(bookmark["object"]["kind"], "Flunder");
    for event in &initial[..3] {
        assert_eq!(event["object"]["kind"], "Flunder");
        assert_eq!(
            event["object"]["apiVersion"],
            format!("wardle.example.com/{V}")
        );
    }
    // The changes made during the list follow, once each, then a sentinel: nothing between.
    backend.create("sentinel", web.clone()).await;
    let after = read_until(&mut watch, &mut buffer, |e| {
        e["object"]["metadata"]["name"] == "sentinel"
    })
    .await;
    assert_eq!(
        named(&after),
        pairs(&[
            ("ADDED", "d"),
            ("DELETED", "b"),
            ("ADDED", "e"),
            ("ADDED", "sentinel")
        ]),
        "{after:?}"
    );
    let watched = backend.wait_query(&["watch=true&resourceVersion="]).await;
    assert!(watched.contains("labelSelector=app%3Dweb"), "{watched}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_watch_after_the_list_reaches_the_client_as_the_backend_sent_it() {
    let backend = Backend::start("wardle.example.com", "ignores", &["--watch-history", "2"]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    backend.create("a", json!({})).await;
    backend.debug("hold-lists").await;
    let url = gw.url(&format!("{}?{}", backend.path(), streaming_list("")));
    let opened = tokio::spawn(async move { client().get(url).send().await.expect("watch") });
    backend.wait_query(&["limit=500"]).await;
    // More changes than the backend's history keeps: the watch from the list's version is
    // too old by the time it starts.
    for name in ["b", "c", "d"] {
        backend.create(name, json!({})).await;
    }
    backend.debug("release-lists").await;
    let mut watch = opened.await.expect("watch task");
    let mut buffer = Vec::new();
    let initial = read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    assert_eq!(named(&initial), pairs(&[("ADDED", "a")]));
    let error = read_until(&mut watch, &mut buffer, |_| true).await;
    assert_eq!(error[0]["type"], "ERROR", "{error:?}");
    let status = &error[0]["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    assert_eq!(status["message"], "too old resource version: 1 (2)");
    // The stream ends there, as the backend's did.
    let rest = tokio::time::timeout(LIMIT, watch.chunk())
        .await
        .expect("end");
    assert!(matches!(rest, Ok(None)), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_list_reaches_the_client_and_plain_requests_are_untouched() {
    let backend = Backend::start("wardle.example.com", "ignores", &[]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    let c = client();
    // A selector the backend refuses: its 400 Status, as the list answered it.
    let url = gw.url(&format!(
        "{}?{}",
        backend.path(),
        streaming_list("&fieldSelector=spec.x%3D1")
    ));
    let refused = c.get(url).send().await.expect("watch");
    assert_eq!(refused.status(), 400);
    let status: Value = refused.json().await.expect("Status");
    assert_eq!(status["kind"], "Status");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.x")),
        "{status}"
    );
    // Options kube-apiserver refuses for a streaming list: 422, as it answers.
    let url = gw.url(&format!(
        "{}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        backend.path()
    ));
    let invalid = c.get(url).send().await.expect("watch");
    assert_eq!(invalid.status(), 422);

    // Plain lists and watches reach the backend exactly as sent.
    let before = backend.queries().await.len();
    for query in [
        "limit=2&labelSelector=a%3Db",
        "watch=true&resourceVersion=0&timeoutSeconds=1",
    ] {
        let resp = c
            .get(gw.url(&format!("{}?{query}", backend.path())))
            .send()
            .await
            .expect("get");
        assert_eq!(resp.status(), 200);
        let _ = resp.bytes().await;
    }
    let queries = backend.queries().await;
    let path = backend.path();
    assert_eq!(
        queries[before..],
        [
            format!("GET {path}?limit=2&labelSelector=a%3Db as system:anonymous"),
            format!("GET {path}?watch=true&resourceVersion=0&timeoutSeconds=1 as system:anonymous"),
        ]
    );
}

/// Hostile rows: what a caller sends never changes in whose name apiagg lists, watches and
/// probes, nor how an APIService's streaming lists are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_streaming_lists_change_neither_identity_nor_mode() {
    let ignores = Backend::start("wardle.example.com", "ignores", &[]);
    let honours = Backend::start("native.example.com", "honours", &["--watch-list", "native"]);
    let gw = gateway(&[&ignores, &honours]);
    gw.wait_ready().await;
    ignores.create("a", json!({})).await;
    let c = client();

    // Forged identity headers on a streaming list that apiagg emulates: the list and the
    // watch go in the caller's real name, the probe (which selects nothing) in apiagg's own.
    let url = gw.url(&format!("{}?{}", ignores.path(), streaming_list("")));
    let mut watch = c
        .get(url)
        .header("X-Remote-User", "admin")
        .header("X-Remote-Group", "system:masters")
        .header("Impersonate-User", "admin")
        .send()
        .await
        .expect("watch");
    assert_eq!(
        watch.status(),
        403,
        "impersonation is refused before any backend"
    );
    let _ = watch.bytes().await;
    let url = gw.url(&format!("{}?{}", ignores.path(), streaming_list("")));
    watch = c
        .get(url)
        .header("X-Remote-User", "admin")
        .header("X-Remote-Group", "system:masters")
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    let mut buffer = Vec::new();
    read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    ignores.wait_query(&["watch=true&resourceVersion="]).await;
    let queries = ignores.queries().await;
    assert!(queries.len() >= 3, "probe, list and watch: {queries:?}");
    for query in &queries {
        let who = if query.contains("APIAGG-WATCH-LIST-PROBE") {
            " as system:kube-aggregator"
        } else {
            " as system:anonymous"
        };
        assert!(query.ends_with(who), "{query}");
    }

    // A native APIService: a client's refused options make apiagg probe again, and the probe
    // (apiagg's own options) keeps it native.
    let url = gw.url(&format!("{}?{}", honours.path(), streaming_list("")));
    let resp = c.get(url).send().await.expect("watch");
    assert_eq!(resp.status(), 200);
    drop(resp);
    let url = gw.url(&format!(
        "{}?{}",
        honours.path(),
        streaming_list("&fieldSelector=spec.x%3D1")
    ));
    let refused = c.get(url).send().await.expect("watch");
    assert_eq!(refused.status(), 400, "the backend's own answer");
    let _ = refused.bytes().await;
    let url = gw.url(&format!("{}?{}", honours.path(), streaming_list("")));
    let resp = c.get(url).send().await.expect("watch");
    assert_eq!(resp.status(), 200);
    drop(resp);
    let probes = |queries: &Vec<String>| {
        queries
            .iter()
            .filter(|q| q.contains("APIAGG-WATCH-LIST-PROBE"))
            .count()
    };
    wait_until(
        "a second probe (the backend's queries observed)",
        LIMIT,
        || honours.queries(),
        |queries| probes(queries) >= 2,
    )
    .await;
    let support = watch_list_status(&gw, &honours.apiservice()).await;
    assert_eq!(support["mode"], "native", "{support}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_ends_the_emulated_watch() {
    let backend = Backend::start("wardle.example.com", "ignores", &[]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    backend.create("a", json!({})).await;
    let url = gw.url(&format!("{}?{}", backend.path(), streaming_list("")));
    let mut watch = client().get(url).send().await.expect("watch");
    let mut buffer = Vec::new();
    read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    // The emulated watch is in flight (with the `/metrics` request that asks).
    assert_eq!(gw.metric("apiagg_requests_in_flight").await, Some(2.0));
    drop(watch);
    // Nothing more comes from the backend, yet apiagg notices the client left and ends the
    // watch (and its backend request) long before its timeoutSeconds=60.
    wait_until(
        "the emulated watch to end with its client (in flight: the asking request alone)",
        Duration::from_secs(10),
        || gw.metric("apiagg_requests_in_flight"),
        |in_flight| *in_flight == Some(1.0),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_gets_the_emulated_stream_and_leaving_ends_it() {
    use apiagg_tests::wire::tls_apiagg_with;

    let backend = Backend::start("wardle.example.com", "ignores", &[]);
    backend.create("a", json!({})).await;
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("b0", &backend.sample.url),
        apiservice(backend.group, V, "b0", "")
    );
    let (gw, ca) = tls_apiagg_with(&config, &[]).await;
    let h2 = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let base = format!("https://127.0.0.1:{}", gw.port);
    let metrics = format!("{base}/metrics");
    let in_flight = || metric_at(&h2, &metrics, "apiagg_requests_in_flight");
    let url = format!("{base}{}?{}", backend.path(), streaming_list(""));
    let mut watch = h2.get(url).send().await.expect("watch");
    assert_eq!(watch.version(), reqwest::Version::HTTP_2);
    assert_eq!(watch.status(), 200);
    let mut buffer = Vec::new();
    let initial = read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    assert_eq!(named(&initial), pairs(&[("ADDED", "a")]));
    backend.create("b", json!({})).await;
    let next = read_until(&mut watch, &mut buffer, |_| true).await;
    assert_eq!(named(&next), pairs(&[("ADDED", "b")]));
    assert_eq!(in_flight().await, Some(2.0));
    // The stream is reset (the connection stays): apiagg ends the watch at once.
    drop(watch);
    wait_until(
        "the emulated watch to end with its HTTP/2 stream (in flight: the asking request alone)",
        Duration::from_secs(10),
        in_flight,
        |in_flight| *in_flight == Some(1.0),
    )
    .await;
}

/// Security round 2, item 7: a caller's own path never decides an APIService's mode. The first
/// streaming list comes on the deprecated `/watch/<resource>/<name>` path, which the backend
/// refuses with 400: the caller gets that 400, while apiagg's probe (on a collection it picks
/// from the backend's discovery, in its own name) finds the backend native, and native it
/// stays for everyone. Before, the probe went to the caller's path and its 400 switched the
/// APIService to emulation. The control: the backend does refuse that path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_own_path_never_decides_the_mode() {
    let honours = Backend::start("native.example.com", "honours", &["--watch-list", "native"]);
    let gw = gateway(&[&honours]);
    gw.wait_ready().await;
    let c = client();
    let legacy = format!("/apis/native.example.com/{V}/watch/flunders/x");
    let direct = c
        .get(format!(
            "{}{legacy}?{}",
            honours.sample.url,
            streaming_list("")
        ))
        .send()
        .await
        .expect("direct");
    assert_eq!(direct.status(), 400, "the control: the backend refuses it");
    let refused = c
        .get(gw.url(&format!("{legacy}?{}", streaming_list(""))))
        .send()
        .await
        .expect("legacy path");
    assert_eq!(
        refused.status(),
        400,
        "the caller gets the backend's answer"
    );
    let _ = refused.bytes().await;
    let probe = honours.wait_query(&["APIAGG-WATCH-LIST-PROBE"]).await;
    assert!(probe.ends_with(" as system:kube-aggregator"), "{probe}");
    let support = watch_list_status(&gw, &honours.apiservice()).await;
    assert_eq!(support["mode"], "native", "{support}");
    // Everyone else's streaming list is passed through: the backend itself answers it.
    let url = gw.url(&format!("{}?{}", honours.path(), streaming_list("")));
    let mut watch = c.get(url).send().await.expect("watch");
    assert_eq!(watch.status(), 200);
    let mut buffer = Vec::new();
    read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    let passed = honours.queries().await;
    assert!(
        passed
            .iter()
            .any(|q| q.contains("sendInitialEvents=true") && q.ends_with(" as system:anonymous")),
        "{passed:?}"
    );
}
