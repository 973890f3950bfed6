//! Streaming lists (KEP-3157) through apiagg with real clients: kubectl with
//! `KUBE_FEATURE_WatchListClient=true` (`wait --for=condition` and `--for=delete`, which watch)
//! and kube-rs's `watcher` with `streaming_lists()`, against a sample backend that honours
//! `sendInitialEvents` (passed through), one that ignores it and one that refuses it with 422
//! (both emulated by apiagg). The times are printed (`--nocapture`) for docs/routing-and-discovery.md.

use std::process::Command;
use std::time::{Duration, Instant};

use apiagg_tests::streaming::*;
use apiagg_tests::*;
use serde_json::json;

/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);

const KUBECTL: &str = KUBECTL_132_BIN;

/// `kubectl wait` with the WatchList gate on, against apiagg or a backend on `port`.
fn kubectl_wait(port: u16, args: &[&str]) -> (bool, Duration, String) {
    let mut command = Command::new(KUBECTL);
    command
        .env("KUBE_FEATURE_WatchListClient", "true")
        .args(["--server", &format!("http://127.0.0.1:{port}")]);
    let started = Instant::now();
    let (ok, stdout, stderr) = kubectl_output(command, args);
    (ok, started.elapsed(), format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_with_watch_list_syncs_for_every_backend() {
    let [ignores, honours, refuses] = three_backends();
    let gw = gateway(&[&ignores, &honours, &refuses]);
    gw.wait_ready().await;

    let ready = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    for backend in [&ignores, &honours, &refuses] {
        backend.create_with_status("ready", ready.clone()).await;
    }
    // The backend that ignores the option really leaves a WatchList client hanging: kubectl
    // straight at it never syncs, though the condition holds.
    let resource = format!("flunders.{}/ready", ignores.group);
    let port = ignores.sample.port;
    let (ok, _, out) = tokio::task::spawn_blocking(move || {
        kubectl_wait(
            port,
            &["wait", "--for=condition=Ready", &resource, "--timeout=3s"],
        )
    })
    .await
    .expect("kubectl");
    assert!(
        !ok,
        "kubectl wait straight at the ignoring backend should time out: {out}"
    );

    for (backend, mode) in [
        (&ignores, "emulated"),
        (&honours, "native"),
        (&refuses, "emulated"),
    ] {
        // A condition that holds: the wait returns as soon as the informer synced.
        let resource = format!("flunders.{}/ready", backend.group);
        let (port, r) = (gw.port, resource.clone());
        let (ok, took, out) = tokio::task::spawn_blocking(move || {
            kubectl_wait(
                port,
                &["wait", "--for=condition=Ready", &r, "--timeout=20s"],
            )
        })
        .await
        .expect("kubectl");
        assert!(ok, "{resource}: {out}");
        println!("kubectl wait --for=condition=Ready {resource}, {mode}: {took:?}");

        // An object deleted while kubectl waits: the delete reaches it through the watch.
        backend.create("doomed", json!({})).await;
        let resource = format!("flunders.{}/doomed", backend.group);
        let (port, r) = (gw.port, resource.clone());
        let wait = tokio::task::spawn_blocking(move || {
            kubectl_wait(port, &["wait", "--for=delete", &r, "--timeout=30s"])
        });
        // kubectl's watch is open at the backend (passed through, or apiagg's after its list).
        let watching = match mode {
            "native" => vec![
                "sendInitialEvents=true",
                "fieldSelector=metadata.name%3Ddoomed",
            ],
            _ => vec![
                "watch=true&resourceVersion=",
                "fieldSelector=metadata.name%3Ddoomed",
            ],
        };
        backend.wait_query(&watching).await;
        let deleted = Instant::now();
        backend.delete("doomed").await;
        let (ok, _, out) = wait.await.expect("kubectl");
        assert!(ok, "{resource}: {out}");
        println!(
            "kubectl wait --for=delete {resource}, {mode}: returned {:?} after the delete",
            deleted.elapsed()
        );

        let support = watch_list_status(&gw, &backend.apiservice()).await;
        assert_eq!(support["mode"], mode, "{support}");
        let series = format!(
            "apiagg_watch_list_streams_total{{apiservice=\"{}\",mode=\"{mode}\"}}",
            backend.apiservice()
        );
        assert!(
            gw.metric(&series).await.is_some_and(|n| n >= 2.0),
            "{series}"
        );
    }
    // The emulated backends were probed once each; kubectl's streaming lists through apiagg
    // became apiagg's lists and watches (the ignoring backend also saw kubectl's own, sent
    // straight at it above).
    for backend in [&ignores, &refuses] {
        let queries = backend.queries().await;
        let probes = queries
            .iter()
            .filter(|q| q.contains("APIAGG-WATCH-LIST-PROBE"))
            .count();
        assert_eq!(probes, 1, "{queries:?}");
        assert!(
            queries.iter().any(|q| q.contains("limit=500")),
            "{queries:?}"
        );
    }
    let queries = refuses.queries().await;
    let streaming = queries
        .iter()
        .filter(|q| q.contains("sendInitialEvents"))
        .count();
    assert_eq!(
        streaming, 1,
        "only the probe reached the refusing backend: {queries:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_watcher_with_streaming_lists_syncs_for_every_backend() {
    use futures_util::StreamExt;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    use kube::runtime::watcher;

    let [ignores, honours, refuses] = three_backends();
    let gw = gateway(&[&ignores, &honours, &refuses]);
    gw.wait_ready().await;
    let config = kube::Config::new(gw.url("/").parse().expect("url"));
    let kube_client = kube::Client::try_from(config).expect("kube client");

    for (backend, mode) in [
        (&ignores, "emulated"),
        (&honours, "native"),
        (&refuses, "emulated"),
    ] {
        for name in ["one", "two"] {
            backend.create(name, json!({"tier": "gold"})).await;
        }
        backend.create("bronze", json!({"tier": "bronze"})).await;
        let gvk = GroupVersionKind::gvk(backend.group, V, "Flunder");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "flunders");
        let api: kube::Api<DynamicObject> = kube::Api::all_with(kube_client.clone(), &resource);
        let config = watcher::Config::default()
            .streaming_lists()
            .labels("tier=gold");
        let started = Instant::now();
        let mut events = watcher(api, config).boxed();
        let mut synced = Vec::new();
        loop {
            let event = tokio::time::timeout(LIMIT, events.next())
                .await
                .unwrap_or_else(|_| panic!("{mode}: not synced within {LIMIT:?}: {synced:?}"))
                .expect("stream open")
                .expect("watcher event");
            match event {
                watcher::Event::InitApply(object) => {
                    synced.push(object.metadata.name.unwrap_or_default())
                }
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        println!(
            "kube-rs watcher, streaming lists, {mode}: synced in {:?}",
            started.elapsed()
        );
        synced.sort();
        assert_eq!(synced, ["one", "two"], "{mode}");
        // Then it follows changes.
        backend.create("three", json!({"tier": "gold"})).await;
        loop {
            let event = tokio::time::timeout(LIMIT, events.next())
                .await
                .unwrap_or_else(|_| panic!("{mode}: no event for three"))
                .expect("stream open")
                .expect("watcher event");
            if let watcher::Event::Apply(object) = event {
                assert_eq!(object.metadata.name.as_deref(), Some("three"), "{mode}");
                break;
            }
        }
    }
}
